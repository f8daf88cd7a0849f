"""TensorBoard oracle for tests/test_cli_output.cpp: the `tensorboard` package reads the event
files anvil train --tensorboard wrote, as TensorBoard itself does (EventAccumulator, which
checks each record's masked CRC32Cs and parses the Event protobufs).

usage: tensorboard_oracle.py DIR

Prints one JSON object: {"files": [event file names], "file_version": the first event's,
"scalars": {tag: [[step, value], ...]}}.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402
from tensorboard.backend.event_processing import event_file_loader  # noqa: E402


def main():
    folder = sys.argv[1]
    files = sorted(f for f in os.listdir(folder) if f.startswith("events.out.tfevents."))
    first = next(iter(event_file_loader.EventFileLoader(os.path.join(folder, files[0])).Load()))
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    print(json.dumps({"files": files, "file_version": first.file_version, "scalars": scalars}))


if __name__ == "__main__":
    main()
