"""Context parallelism's MFU on two GPUs against one GPU at half the sequence.

anvil bench step of a preset (fresh weights, random tokens) at sequence SEQ with
--context-parallel 2 on both GPUs, against one GPU at SEQ/2, the same recompute; each run's
figures, then the ratio of their MFU (the goal: at least 0.9). MFU counts attention's flops at
each run's own sequence length, per GPU, so the two are comparable. The plan of the context-
parallel run goes to OUT/plan_cp.log.
"""
import json

INPUTS = []
SETTINGS = {"PRESET": "qwen3-1.7b", "SEQ": 131072, "RECOMPUTE": "full", "MODE": "fsdp", "STEPS": 6, "WARMUP": 2}


def runs(x):
    s = x.s
    x.anvil("plan_cp", "plan", "--preset", s["PRESET"], "--nproc", "2", "--context-parallel", "2", "--seq-len", s["SEQ"],
            "--recompute", s["RECOMPUTE"], "--mode", s["MODE"], check=False)
    common = ["--preset", s["PRESET"], "--recompute", s["RECOMPUTE"], "--steps", s["STEPS"], "--warmup", s["WARMUP"]]
    x.step("one", *common, "--seq-len", s["SEQ"] // 2)
    x.step("cp", *common, "--seq-len", s["SEQ"], "--context-parallel", "2", "--nproc-per-node", "2", "--mode", s["MODE"])


def table(x):
    one, cp = x.results["one"], x.results["cp"]
    print("one GPU, sequence %d: %s" % (x.s["SEQ"] // 2, json.dumps(one)))
    print("context parallel 2, sequence %d: %s" % (x.s["SEQ"], json.dumps(cp)))
    if not (one.get("mfu") and cp.get("mfu")):
        print("no MFU (no GPU peak to count it against)")
        return
    print(f"MFU {cp['mfu']:.3f} (context parallel 2, {cp['seq_len']} tokens) / {one['mfu']:.3f} (one GPU, "
          f"{one['seq_len']} tokens) = {cp['mfu'] / one['mfu']:.3f} (goal: >= 0.9); peak "
          f"{cp['peak_allocated_gib']:.1f} GiB per GPU against {cp['planned_gib']:.1f} planned")
