"""anvil's MoE training step beside transformers' on one GPU: Qwen3-30B-A3B's first 8 layers.

The issue's benchmark model: Qwen3-30B-A3B shortened to its first 8 of 48 layers (5,607,297,024
parameters, all 128 experts, top 8, fresh weights), sequence 2048, 4 sequences a step, full
fine-tuning. anvil: `bench step --preset qwen3-30b-a3b --num-layers 8`, micro-batch x
accumulation = 4, in each recompute setting of RECOMPUTE (and 2 x 2 where B2=1); a setting that
does not fit fails on its own and the others run. The reference: bench/reference_train.py
--model qwen3-30b-a3b --num-layers 8 --batch 4 --fused-adam with transformers'
experts_implementation grouped_mm (its default and fastest; "eager" and "batched_mm" through
REF_IMPLS), with and without gradient checkpointing. Each side's fresh init of 5.6B parameters
takes about 40 s; the anvil runs time STEPS steps after WARMUP (then 3 with the phases timed and
3 with every op timed, --op-times), the reference the steps after its 10th of REF_STEPS.
OLD_ANVIL=PATH runs the same anvil settings with a second binary too (a build before a change,
side by side: tokens/s and the experts' ops' device and host ms a step); with it, RECOMPUTE=none
keeps the experiment within 7 minutes.

The table: tokens/s at peak allocated memory, MFU on active parameters (the router and 8 of
128 experts per layer: anvil's flops_per_token, also for the reference's row), the ratio to the
fastest reference run and the goal ">= 3x at <= reference peak, MFU >= 35%". The MoE memory
plan is young: each anvil row shows its plan beside its peak.
"""
import results as R

INPUTS = []
SETTINGS = {"RECOMPUTE": "none,selective,full", "B2": 0, "STEPS": 12, "WARMUP": 4, "REF_STEPS": 14,
            "REF_IMPLS": "grouped_mm", "REF_TIMEOUT": 240, "OLD_ANVIL": ""}
TABLE_WHEN_STOPPED = True

MODEL = ["--preset", "qwen3-30b-a3b", "--num-layers", "8", "--seq-len", "2048"]
REF = ["--mode", "ddp", "--model", "qwen3-30b-a3b", "--num-layers", "8", "--seq-len", "2048", "--batch", "4",
       "--fused-adam"]


def runs(x):
    steps = ["--steps", x.s["STEPS"], "--warmup", x.s["WARMUP"], "--op-times"]
    binaries = [("a", None)] + ([("o", x.s["OLD_ANVIL"])] if x.s["OLD_ANVIL"] else [])
    for r in x.s["RECOMPUTE"].split(","):
        for side, binary in binaries:
            x.step(side + "_b4_" + r, *MODEL, *steps, "--micro-batch", "4", "--recompute", r, binary=binary)
            if x.s["B2"]:
                x.step(side + "_b2x2_" + r, *MODEL, *steps, "--micro-batch", "2", "--grad-accum", "2", "--recompute",
                       r, binary=binary)
    for impl in x.s["REF_IMPLS"].split(","):
        for tag, extra in (("recompute", []), ("none", ["--no-recompute"])):
            x.reference("r_%s_%s" % (impl, tag), 1, *REF, "--experts-implementation", impl, "--steps",
                        x.s["REF_STEPS"], *extra, timeout=x.s["REF_TIMEOUT"])


def table(x):
    res, ok = x.results, R.ok
    anvil = {t: j for t, j in res.items() if t.startswith("a_") and ok(j)}
    refs = {t: j for t, j in res.items() if t.startswith("r_") and ok(j)}
    ref = max(refs.values(), key=lambda j: j["tokens_per_s"]) if refs else {"error": "no reference run"}
    bar = ref["peak_allocated_gib"] if ok(ref) else None
    # MFU on active parameters, the reference's by anvil's FLOPs per token and peak.
    flops = next((j for j in anvil.values() if j.get("peak_tflops")), None)
    mfu = lambda j: (j["tokens_per_s"] * flops["flops_per_token"] / (flops["peak_tflops"] * 1e12)
                     if ok(j) and flops else None)
    pct = lambda v: "%.1f%%" % (100 * v) if v is not None else ""
    fitting = [j for j in anvil.values() if bar is not None and j["peak_allocated_gib"] <= bar]
    best = max(fitting, key=lambda j: j["tokens_per_s"]) if fitting else {
        "error": "nothing at <= %.1f GiB" % bar if bar is not None else "no reference peak to hold it to"}

    def met(a):
        good = ok(a) and ok(ref) and a["tokens_per_s"] >= 3 * ref["tokens_per_s"] and (mfu(a) or 0) >= 0.35
        return "yes" if good else "no"

    print("| row | setting | tok/s @ peak | MFU (active) | plan GiB (vs peak) | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for tag in sorted(refs):
        j = refs[tag]
        print("| reference %s | %s, recompute %s | %s | %s | | | | |" % (
            tag[2:], j.get("experts_implementation"), "yes" if j["recompute"] else "no", R.figure(j), pct(mfu(j))))
    for tag in sorted(t for t in res if t.startswith("r_") and t not in refs):
        print("| reference %s | | %s | | | | | |" % (tag[2:], R.figure(res[tag])))
    for tag in sorted(t for t in res if t.startswith("a_")):
        j = res[tag]
        print("| anvil %s | %s | %s | %s | %s | %s | | |" % (
            tag[2:], R.setting(j), R.figure(j), pct(mfu(j)), R.plan_error(j), R.ratio(j, ref)))
    print("| anvil best at <= reference peak | %s | %s | %s | %s | %s | >= 3x at <= reference peak, MFU >= 35%% | %s |"
          % (R.setting(best), R.figure(best), pct(mfu(best)), R.plan_error(best), R.ratio(best, ref), met(best)))
    print("\nEvery anvil run (step ms: forward / backward / optimizer from the synchronised breakdown steps;"
          " the MoE ops' device and host ms a step from the --op-times steps):")
    for tag in sorted(t for t in res if t[:2] in ("a_", "o_") and ok(res[t])):
        j = res[tag]
        moe = [op for op in (j.get("op_times") or {}).get("ops", []) if op["op"].startswith("moe_")]
        experts = [op for op in moe if op["op"].startswith("moe_linear")]
        print("  %-16s %-28s %s  step %.1f ms (fwd %.1f, bwd %.1f, opt %.1f)  moe ops %.1f / %.1f ms, "
              "experts' GEMMs %.1f / %.1f ms" % (
                  ("new " if tag[0] == "a" else "old ") + tag[2:], R.setting(j), R.figure(j), j["step_ms"],
                  j["forward_ms"], j["backward_ms"], j["optimizer_ms"], sum(op["device_ms"] for op in moe),
                  sum(op["host_ms"] for op in moe), sum(op["device_ms"] for op in experts),
                  sum(op["host_ms"] for op in experts)))
    for tag in sorted(t for t in res if t.startswith("o_")):
        new_run = res.get("a_" + tag[2:], {"error": "not run"})
        print("  new / old %-10s %s" % (tag[2:], R.ratio(new_run, res[tag])))
