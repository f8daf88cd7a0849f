"""Qwen3-8B at sequence 65,536 on one GPU with the checkpoints offloaded to pinned host memory.

Fresh weights from the preset, random tokens, --recompute full --offload-activations: the plan
without offload (which does not fit) and with it, then anvil bench step's tokens/s, peak
allocated device memory beside the plan's total and the pinned host memory the offloaded
checkpoints take. The goal: it trains (a non-finite gradient norm would stop it), the peak
within 3% of the plan.
"""
import results as R

INPUTS = []
SETTINGS = {"STEPS": 3}
LONG = ["--preset", "qwen3-8b", "--seq-len", "65536", "--recompute", "full"]


def runs(x):
    x.anvil("plan", "plan", *LONG)
    x.anvil("plan_offload", "plan", *LONG, "--offload-activations")
    x.step("offload", *LONG, "--offload-activations", "--steps", x.s["STEPS"], "--warmup", "1")


def table(x):
    for label in ("plan", "plan_offload"):
        print((x.out / (label + ".log")).read_text())
    j = x.results["offload"]
    if not R.ok(j):
        print("offload: " + j["error"])
        return
    print("seq %d recompute %s offload %s mlp tile %s: %.0f tokens/s, step %.0f ms, peak %.2f GiB, plan %.2f GiB "
          "(peak/plan %.3f), pinned host %.2f GiB" % (
              j["seq_len"], j["recompute"], j["offload_activations"], j["mlp_tile"], j["tokens_per_s"], j["step_ms"],
              j["peak_allocated_gib"], j["planned_gib"], j["peak_allocated_gib"] / j["planned_gib"],
              j["host_activations_gib"]))
