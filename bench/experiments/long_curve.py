"""The loss at sequence 16,384 with the MLP tiled and the checkpoints offloaded, against plain runs.

STEPS steps of PRESET (fresh weights, --seed 1) at sequence SEQ on real long text: Python's
docstrings as chats (bench/docstring_chats.py), concatenated and cut every SEQ tokens (`anvil
prepare --packing wrapped`), the same blocks in the same order for every run:
  plain   --recompute full, the MLP untiled, checkpoints on the GPU;
  plain2  the same run again;
  tiled   --recompute full --mlp-tile TILE --offload-activations.
At this length attention's backward runs cuDNN's non-deterministic algorithm, so plain and
plain2 differ by the run's own bf16 noise; prints tiled's mean and largest |loss difference|
from plain beside plain2's, and each run's speed.
"""
import statistics

import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer")]
SETTINGS = {"PRESET": "qwen3-0.6b", "STEPS": 50, "SEQ": 16384, "TILE": 2048, "LR": "3e-5"}
RUNS = ("plain", "plain2", "tiled")


def runs(x):
    s, out = x.s, x.out
    x.python("chats", "docstring_chats.py", out / "chats.jsonl", "8e6")
    x.anvil("prepare", "prepare", "--tokenizer", x.inputs["TOKENIZER_DIR"], "--data", out / "chats.jsonl", "--seq-len",
            s["SEQ"], "--packing", "wrapped", "--out", out / "blocks")
    flags = {"plain": ["--mlp-tile", s["SEQ"]], "plain2": ["--mlp-tile", s["SEQ"]],
             "tiled": ["--mlp-tile", s["TILE"], "--offload-activations"]}
    for name in RUNS:
        x.anvil(name, "train", "--preset", s["PRESET"], "--data", out / "blocks", "--packing", "wrapped", "--seq-len",
                s["SEQ"], "--steps", s["STEPS"], "--lr", s["LR"], "--warmup", "5", "--schedule", "constant", "--seed",
                "1", "--log-every", "1", "--recompute", "full", "--metrics", out / (name + ".jsonl"), *flags[name])


def table(x):
    for name in RUNS:
        print("%s: %s" % (name, R.done_line((x.out / (name + ".log")).read_text())))
    plain = {s: r["loss"] for s, r in R.metrics(x.out / "plain.jsonl").items()}
    print(f"plain: loss {plain[min(plain)]:.4f} -> {plain[max(plain)]:.4f} over {len(plain)} steps")
    for name in RUNS[1:]:
        c = {s: r["loss"] for s, r in R.metrics(x.out / (name + ".jsonl")).items()}
        assert sorted(c) == sorted(plain), f"{name} logged other steps than plain"
        d = {s: abs(c[s] - plain[s]) for s in plain}
        worst = max(d, key=d.get)
        print(f"{name} against plain: mean |loss difference| {statistics.mean(d.values()):.2e}, largest {d[worst]:.2e} "
              f"at step {worst} (loss {plain[worst]:.4f})")
