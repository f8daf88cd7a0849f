"""Checkpoints that do not stop the run: the stall per save, the write and resume bandwidth.

First `anvil bench disk` on the checkpoint folder: the disk's sequential write (fsync timed) and
read (page cache dropped) bandwidth. Then, for each preset (fresh weights), on random blocks:
  - anvil train without saves, and the same run with asynchronous saves every EVERY steps
    (--keep-last 1): the stall per save, from the train log ("training stalled S s") and from
    the metrics (the interval between the saving step's line and the next one, minus the median
    interval); the background write's bandwidth beside bench disk's write; the run's speed with
    saves against without (steps after the 10th);
  - a resume from the newest checkpoint with its pages dropped from the cache: the checksum
    pass's and the load's GB/s (they run side by side) beside bench disk's read.
STEPS and EVERY at 0 mean 500 and 50, PLAIN at -1 means 1 (the run without saves too); qwen3-8b
takes a call of its own (98 GB of snapshot and checkpoint, one save), where they mean 15, 10 and
0. NPROC > 1 runs fsdp on NPROC GPUs; VOCAB bounds the random token ids; DISK_SIZE is bench
disk's file.
"""
import json
import re
import statistics

import make_inputs

INPUTS = [("CKPT_DIR", "the folder the checkpoints are written to (on the disk to measure)")]
SETTINGS = {"PRESETS": "qwen3-0.6b qwen3-1.7b", "STEPS": 0, "EVERY": 0, "PLAIN": -1, "SEQ": 2048, "NPROC": 1,
            "DISK_SIZE": "16G", "VOCAB": 151000}


def plan(x, preset):
    """(steps, every, plain) for a preset: the settings, else 500, 50, 1 (qwen3-8b: 15, 10, 0)."""
    big = preset == "qwen3-8b"
    s = x.s
    return (s["STEPS"] or (15 if big else 500), s["EVERY"] or (10 if big else 50),
            s["PLAIN"] if s["PLAIN"] >= 0 else (0 if big else 1))


def runs(x):
    import pathlib
    import shutil
    s, out, root = x.s, x.out, pathlib.Path(x.inputs["CKPT_DIR"])
    par = ["--nproc-per-node", s["NPROC"], "--mode", "fsdp"] if s["NPROC"] > 1 else []
    if not x.dry:
        root.mkdir(parents=True, exist_ok=True)
    x.anvil("disk", "bench", "disk", root, "--size", s["DISK_SIZE"], "--json")
    for preset in s["PRESETS"].split():
        steps, every, plain = plan(x, preset)
        ckpt = root / preset
        if not x.dry:
            shutil.rmtree(ckpt, ignore_errors=True)
        x.call("blocks", make_inputs.random_blocks, out / "blocks.safetensors", steps * s["NPROC"] + 16, s["SEQ"],
               s["VOCAB"])
        train = ["train", "--preset", preset, "--data", out / "blocks.safetensors", "--steps", steps, "--lr", "1e-5",
                 "--log-every", "1", "--no-shuffle", *par]
        try:
            if plain:
                x.anvil(preset + ".plain", *train, "--metrics", out / (preset + ".plain.jsonl"))
            x.anvil(preset + ".saves", *train, "--metrics", out / (preset + ".saves.jsonl"), "--ckpt-dir", ckpt,
                    "--save-every", every, "--keep-last", "1")
        except Exception as e:  # the next preset still runs
            print(e)
            continue
        x.call("uncache", make_inputs.uncache, ckpt)
        x.anvil(preset + ".resume", "train", "--preset", preset, "--data", out / "blocks.safetensors", "--steps",
                "NEWEST+1" if x.dry else newest_step(ckpt) + 1, "--lr", "1e-5", "--no-shuffle", "--ckpt-dir", ckpt, *par, check=False)


def newest_step(ckpt):
    return max(int(p.name.split("-")[1]) for p in ckpt.glob("step-*"))


def metrics(x, preset, kind):
    return {j["step"]: j for j in map(json.loads, open(x.out / ("%s.%s.jsonl" % (preset, kind)))) if "elapsed_s" in j}


def rate(m):  # steps/s over the steps after the 10th, wall clock (saves included)
    last = max(m)
    return (last - 10) / (m[last]["elapsed_s"] - m[10]["elapsed_s"])


def table(x):
    disk = json.loads(x.runs["disk"].out.strip().splitlines()[-1])
    print("bench disk: %s" % disk)
    for preset in x.s["PRESETS"].split():
        if preset + ".saves" not in x.runs:
            print("%s: not run" % preset)
            continue
        every = plan(x, preset)[1]
        saves = metrics(x, preset, "saves")
        gaps = {s: saves[s + 1]["elapsed_s"] - saves[s]["elapsed_s"] for s in saves if s + 1 in saves and s > 1}
        normal = statistics.median(g for s, g in gaps.items() if s % every)
        log = x.runs[preset + ".saves"].text
        said = [float(v) for v in re.findall(r"training stalled ([0-9.]+) s", log)]
        wrote = [(float(g), float(r)) for g, r in
                 re.findall(r"([0-9.]+) GB written in the background in [0-9.]+ s \(([0-9.]+) GB/s", log)]
        print("%s: %d saves of %.2f GB; step %.1f ms" % (preset, len(wrote), wrote[0][0] if wrote else 0, 1000 * normal))
        for s in sorted(s for s in gaps if s % every == 0):
            print("  save at step %d: stall %.2f s from the metrics (that interval %.2f s minus a normal step)"
                  % (s, gaps[s] - normal, gaps[s]))
        print("  stall per save from the log: %s s (max %.2f)" % (", ".join("%.2f" % v for v in said), max(said or [0])))
        print("  background write: %s GB/s; bench disk write %.2f GB/s: %s" % (
            ", ".join("%.2f" % r for _, r in wrote), disk["write_gbps"],
            ", ".join("%.0f%%" % (100 * r / disk["write_gbps"]) for _, r in wrote)))
        if preset + ".plain" in x.runs:
            a, b = rate(metrics(x, preset, "plain")), rate(saves)
            print("  steps/s without saves %.3f, with a save every %d %.3f: the saves cost %.2f%%"
                  % (a, every, b, 100 * (a - b) / a))
        else:
            print("  no run without saves (PLAIN=1 adds it)")
        res = x.runs[preset + ".resume"].text if preset + ".resume" in x.runs else ""
        v = re.search(r"verified: ([0-9.]+) GB checksummed in ([0-9.]+) s \(([0-9.]+) GB/s\)", res)
        l = re.search(r"this rank loaded ([0-9.]+) GB in ([0-9.]+) s \(([0-9.]+) GB/s\)", res)
        if not (v and l):
            print("  resume: no figures")
            continue
        both = float(v.group(1)) / max(float(v.group(2)), float(l.group(2)))  # the two run side by side
        print("  resume: checksums %s GB/s, load %s GB/s (rank 0; the two side by side), the checkpoint read at %.2f "
              "GB/s; bench disk read %.2f GB/s: %.0f%% / %.0f%% / %.0f%%" % (
                  v.group(3), l.group(3), both, disk["read_gbps"], 100 * float(v.group(3)) / disk["read_gbps"],
                  100 * float(l.group(3)) / disk["read_gbps"], 100 * both / disk["read_gbps"]))
