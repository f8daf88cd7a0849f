"""Qwen3-8B at sequence 32,768 on one GPU, then sequence 2,048 where nothing may get slower.

Fresh weights from the preset, random tokens, --recompute full: the plan, then anvil bench
step's tokens/s and peak allocated memory beside the plan's total (the goal on an H200: a peak
of at most 132 GiB, within 3% of the plan; --mlp-tile auto leaves the MLP untiled there, and
attention's backward is cuDNN's non-deterministic one at this length). Then sequence 2,048
(--recompute none) with this binary, and with BASE_ANVIL (a build without the change) when set.
"""
import results as R

INPUTS = []
SETTINGS = {"STEPS": 4, "BASE_ANVIL": ""}


def summary(j):
    if not R.ok(j):
        return j.get("error")
    return "seq %d recompute %s mlp tile %s: %.0f tokens/s, step %.0f ms, peak %.2f GiB, plan %.2f GiB (peak/plan %.3f)" % (
        j["seq_len"], j["recompute"], j.get("mlp_tile", "-"), j["tokens_per_s"], j["step_ms"], j["peak_allocated_gib"],
        j["planned_gib"], j["peak_allocated_gib"] / j["planned_gib"])


def runs(x):
    common = ["--preset", "qwen3-8b", "--steps", x.s["STEPS"], "--warmup", "1"]
    x.anvil("plan", "plan", "--preset", "qwen3-8b", "--seq-len", "32768", "--recompute", "full")
    for label, flags in (("long", ["--seq-len", "32768", "--recompute", "full"]),
                         ("short", ["--seq-len", "2048", "--recompute", "none"])):
        j = x.step(label, *common, *flags)
        if not x.dry and not R.ok(j):
            x.stop("%s: %s" % (label, j["error"]))
    if x.s["BASE_ANVIL"]:
        x.step("base_short", *common, "--seq-len", "2048", "--recompute", "none", binary=x.s["BASE_ANVIL"])


def table(x):
    print((x.out / "plan.log").read_text())
    print("%s\n  %s\n  %s" % (x.bin, summary(x.results["long"]), summary(x.results["short"])))
    if "base_short" in x.results:
        print("%s\n  %s" % (x.s["BASE_ANVIL"], summary(x.results["base_short"])))
