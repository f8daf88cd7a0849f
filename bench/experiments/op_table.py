"""The step model's op-cost table measured on this GPU, then its predictions beside measured tokens/s.

 1. Qwen3-1.7B, --recompute none, every op timed with the optimizer alone after the backward:
    `anvil bench step --op-times --no-overlap-optimizer --write-op-table TABLE` at sequence 1024
    and 2048 with one sequence and 2048 with four (1024, 2048 and 8192 rows), each fit merged
    into the last (default TABLE: src/plan/h200_op_costs.json, the one the binary embeds at its
    next build; of an unmeasured table only the rates of ops no step here runs stay, marked not
    measured). The same three shapes with --fp8 tensorwise go first, so that their linear_fp8_*
    rows stay and the bf16 steps' fits price every other op.
 2. One GPU, as training runs (the optimizer overlapped): 0.6B (sequence 1024), 1.7B (one
    sequence, none; four, selective; four, selective, FP8), 8B (none; two sequences, FP8):
    measured and predicted with --op-table TABLE.
 3. With two GPUs or more: the all-reduce bus bandwidth at 256 MB fp32 (`anvil bench`, about a
    block's gradient), then 1.7B ddp and fsdp on 2 GPUs, predicted with that bandwidth, and the
    comm_overlap_cost each measured step implies (the table's is 0.3, not measured): the time
    the step lost beyond the predicted exposed communication, over the hidden one.
"""
import json
import subprocess

import results as R

INPUTS = []
SETTINGS = {"TABLE": "src/plan/h200_op_costs.json", "STEPS": 20}
ROWS = [
    ("0.6B seq 1024, 1 seq, none", ["--preset", "qwen3-0.6b", "--seq-len", "1024", "--recompute", "none"]),
    ("1.7B seq 2048, 1 seq, none", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--recompute", "none"]),
    ("1.7B seq 2048, 4 seq, selective",
     ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4", "--recompute", "selective"]),
    ("8B seq 2048, 1 seq, none", ["--preset", "qwen3-8b", "--seq-len", "2048", "--recompute", "none"]),
    ("1.7B seq 2048, 4 seq, selective, fp8", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4",
                                              "--recompute", "selective", "--fp8", "tensorwise"]),
    ("8B seq 2048, 2 seq, none, fp8",
     ["--preset", "qwen3-8b", "--seq-len", "2048", "--micro-batch", "2", "--recompute", "none", "--fp8", "tensorwise"]),
]


def gpus():
    try:
        return len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines())
    except OSError:
        return 0


def runs(x):
    table, steps = x.s["TABLE"], x.s["STEPS"]
    for fp8 in ("tensorwise", "off"):
        for seq, batch in (("1024", "1"), ("2048", "4"), ("2048", "1")):
            x.anvil("fit_%s_%s_b%s" % (fp8, seq, batch), "bench", "step", "--preset", "qwen3-1.7b", "--seq-len", seq,
                    "--micro-batch", batch, "--recompute", "none", "--fp8", fp8, "--steps", steps, "--op-times",
                    "--no-overlap-optimizer", "--write-op-table", table)
    print("op-cost table written: " + table)
    for i, (label, flags) in enumerate(ROWS):
        x.step("row%d" % i, "--steps", steps, "--op-table", table, *flags)
    if x.dry or gpus() >= 2:
        r = x.anvil("bus", "bench", "all_reduce", "--nproc-per-node", "2", "-b", "256M", "-e", "256M", "--dtype", "fp32",
                    "--json")
        bus = "BUS" if x.dry else str(json.loads(r.out.strip().splitlines()[-1])["rows"][-1]["busbw_gbps"])
        print("all-reduce bus bandwidth, 2 GPUs, 256 MB fp32: %s GB/s" % bus)
        for mode in ("ddp", "fsdp"):
            x.step("two_" + mode, "--steps", steps, "--op-table", table, "--preset", "qwen3-1.7b", "--seq-len", "2048",
                   "--recompute", "none", "--mode", mode, "--nproc-per-node", "2", "--bus-gbps", bus)


def row(label, j):
    if not R.ok(j):
        print("%-44s %s" % (label, j.get("error")))
        return
    p = j["predicted"]
    print("%-44s measured %8.0f tokens/s, predicted %8.0f (%+.1f%%); step %.1f / %.1f ms, exposed comm %.1f ms" % (
        label, j["tokens_per_s"], p["tokens_per_s"], 100 * (p["tokens_per_s"] / j["tokens_per_s"] - 1),
        j["step_ms"], p["step_ms"], p["exposed_ms"]))
    if j["world"] > 1:
        c, hidden = p["comm_overlap_cost"], p["communication_ms"] - p["exposed_ms"]
        f = (j["step_ms"] - (p["step_ms"] - p["slowed_ms"])) / hidden
        print("%-44s implied comm_overlap_cost %s (the table: %.2f)" % (
            "", "%.2f" % (f / (1 - f)) if 0 <= f < 1 else "out of range (x = %.2f)" % f, c))


def table(x):
    for i, (label, _) in enumerate(ROWS):
        row(label, x.results["row%d" % i])
    for mode in ("ddp", "fsdp"):
        if "two_" + mode in x.results:
            row("1.7B seq 2048, 1 seq/GPU, none, 2 GPUs " + mode, x.results["two_" + mode])
