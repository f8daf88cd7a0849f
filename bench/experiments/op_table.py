"""The step model's op-cost table measured on this GPU, then its predictions beside measured tokens/s.

One call measures what the table needs and what it predicts:
 1. Fits: `anvil bench step --op-times --no-overlap-optimizer --write-op-table TABLE`, each fit
    merged into the last (TABLE, default OUT/h200_op_costs.json, starts from the binary's
    built-in table: its measured rates at sizes not measured again stay, its unmeasured ones
    go where a fit has the op). FP8 first (the FP8 linears' GEMM rates and their casts' rate at
    1,024, 2,048, 4,096 and 8,192 rows, from the 1.7B's and the 8B's widths), then bf16, so
    that the bf16 steps price every other op: Qwen3-1.7B, one sequence of 1,024, 2,048,
    8,192 and 32,768 tokens (attention at those lengths, the per-token ops at those rows, the
    GEMMs at their MFLOP per call), Qwen3-0.6B at 1,024 (the smaller GEMMs; its per-token ops
    replace the 1.7B's at 1,024 rows), then four of 2,048 (attention at 2,048 and the per-token
    ops at 8,192 rows kept from it). FP8_FITS=0 leaves out the FP8 fits (their rates stay).
 2. Rows, as training runs (the optimizer overlapped), predicted with --op-table TABLE: the
    step model's rows of issue 38 (the 1.7B, 4 x 2,048 selective, bf16 and FP8; the 1.7B at
    32,768, --recompute none; the 8B, 2 x 2,048, bf16 and FP8; the 8B at 32,768, --recompute
    full) and the 0.6B at 1,024.
 3. With two GPUs or more: the all-reduce bus bandwidth at 256 MB fp32 (`anvil bench`), then
    1.7B ddp and fsdp on 2 GPUs, predicted with that bandwidth, and the comm_overlap_cost
    each measured step implies (the table's is 0.3, not measured).
Then, on the machine of the repository: `bench/op_table_apply.py OUT` puts TABLE in
src/plan/h200_op_costs.json and prints the rows, measured beside predicted by the device
and by the local build.
"""
import json
import subprocess

import results as R

INPUTS = []
SETTINGS = {"TABLE": "", "STEPS": 10, "FIT_STEPS": 5, "LONG_STEPS": 4, "FP8_FITS": 1}
FP8 = ["--fp8", "tensorwise"]
# (label, flags): the fits, in order (a later fit's rates replace an earlier one's at the same op and size).
FITS = [
    ("fit_fp8_1.7b_1024x1", ["--preset", "qwen3-1.7b", "--seq-len", "1024", "--micro-batch", "1"] + FP8),
    ("fit_fp8_1.7b_2048x1", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "1"] + FP8),
    ("fit_fp8_8b_2048x2", ["--preset", "qwen3-8b", "--seq-len", "2048", "--micro-batch", "2"] + FP8),
    ("fit_fp8_1.7b_2048x4", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4"] + FP8),
    ("fit_1.7b_1024x1", ["--preset", "qwen3-1.7b", "--seq-len", "1024", "--micro-batch", "1"]),
    ("fit_0.6b_1024x1", ["--preset", "qwen3-0.6b", "--seq-len", "1024", "--micro-batch", "1"]),
    ("fit_1.7b_2048x1", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "1"]),
    ("fit_1.7b_8192x1", ["--preset", "qwen3-1.7b", "--seq-len", "8192", "--micro-batch", "1"]),
    ("fit_1.7b_32768x1", ["--preset", "qwen3-1.7b", "--seq-len", "32768", "--micro-batch", "1"]),
    ("fit_1.7b_2048x4", ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4"]),
]
# (label, flags, long): the rows; long ones run LONG_STEPS steps after one warm-up step.
ROWS = [
    ("0.6B seq 1024, 1 seq, none", ["--preset", "qwen3-0.6b", "--seq-len", "1024", "--recompute", "none"], False),
    ("1.7B seq 2048, 4 seq, selective",
     ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4", "--recompute", "selective"], False),
    ("1.7B seq 2048, 4 seq, selective, fp8",
     ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", "4", "--recompute", "selective"] + FP8, False),
    ("1.7B seq 32768, 1 seq, none", ["--preset", "qwen3-1.7b", "--seq-len", "32768", "--recompute", "none"], True),
    ("8B seq 2048, 2 seq, none",
     ["--preset", "qwen3-8b", "--seq-len", "2048", "--micro-batch", "2", "--recompute", "none"], False),
    ("8B seq 2048, 2 seq, none, fp8",
     ["--preset", "qwen3-8b", "--seq-len", "2048", "--micro-batch", "2", "--recompute", "none"] + FP8, False),
    ("8B seq 32768, 1 seq, full", ["--preset", "qwen3-8b", "--seq-len", "32768", "--recompute", "full"], True),
]


def gpus():
    try:
        return len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines())
    except OSError:
        return 0


def table_path(x):
    return x.s["TABLE"] or str(x.out / "h200_op_costs.json")


def runs(x):
    table = table_path(x)
    for label, flags in FITS:  # a fit that fails leaves the table as the fits before it wrote it
        if "--fp8" in flags and not x.s["FP8_FITS"]:
            continue  # FP8_FITS=0: the table's FP8 rates stay as the built-in table has them
        r = x.anvil(label, "bench", "step", *flags, "--recompute", "none", "--steps", x.s["FIT_STEPS"], "--warmup",
                    "2", "--op-times", "--no-overlap-optimizer", "--write-op-table", table, check=False)
        if not r.ok:
            print("  %s failed (exit %d): %s" % (label, r.rc, " ".join(r.text.split()[-30:])), flush=True)
    print("op-cost table written: " + table)
    for i, (label, flags, long) in enumerate(ROWS):
        steps = ["--steps", x.s["LONG_STEPS"], "--warmup", "1"] if long else ["--steps", x.s["STEPS"]]
        x.step("row%d" % i, *steps, "--op-table", table, *flags)
    if x.dry or gpus() >= 2:
        r = x.anvil("bus", "bench", "all_reduce", "--nproc-per-node", "2", "-b", "256M", "-e", "256M", "--dtype", "fp32",
                    "--json")
        bus = "BUS" if x.dry else str(json.loads(r.out.strip().splitlines()[-1])["rows"][-1]["busbw_gbps"])
        print("all-reduce bus bandwidth, 2 GPUs, 256 MB fp32: %s GB/s" % bus)
        for mode in ("ddp", "fsdp"):
            x.step("two_" + mode, "--steps", x.s["STEPS"], "--op-table", table, "--preset", "qwen3-1.7b", "--seq-len",
                   "2048", "--recompute", "none", "--mode", mode, "--nproc-per-node", "2", "--bus-gbps", bus)


def row(label, j):
    if not R.ok(j):
        print("%-44s %s" % (label, j.get("error")))
        return
    p = j["predicted"]
    if not p:
        print("%-44s measured %8.0f tokens/s, not predicted" % (label, j["tokens_per_s"]))
        return
    print("%-44s measured %8.0f tokens/s, predicted %8.0f (%+.1f%%); step %.1f / %.1f ms, exposed comm %.1f ms" % (
        label, j["tokens_per_s"], p["tokens_per_s"], 100 * (p["tokens_per_s"] / j["tokens_per_s"] - 1),
        j["step_ms"], p["step_ms"], p["exposed_ms"]))
    if j["world"] > 1:
        c, hidden = p["comm_overlap_cost"], p["communication_ms"] - p["exposed_ms"]
        f = (j["step_ms"] - (p["step_ms"] - p["slowed_ms"])) / hidden
        print("%-44s implied comm_overlap_cost %s (the table: %.2f)" % (
            "", "%.2f" % (f / (1 - f)) if 0 <= f < 1 else "out of range (x = %.2f)" % f, c))


def table(x):
    for i, (label, _, _) in enumerate(ROWS):
        row(label, x.results.get("row%d" % i, {"error": "not run"}))
    for mode in ("ddp", "fsdp"):
        if "two_" + mode in x.results:
            row("1.7B seq 2048, 1 seq/GPU, none, 2 GPUs " + mode, x.results["two_" + mode])
