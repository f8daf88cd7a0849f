"""anvil's training step beside the PyTorch reference on one GPU, like for like.

Qwen3-1.7B at sequence 2048 unless said; tokens/s at peak allocated memory, the ratio, anvil's
peak beside its plan, the goal of each row and whether it is met:
  recompute     anvil --recompute full, 1 seq     vs  reference default (recompute, unfused AdamW)
  no recompute  anvil --recompute none, 1 seq     vs  --fused-adam --no-recompute
  best          anvil's fastest setting at <= 35.0 GiB with 4 sequences per optimizer step
                (micro-batch x accumulation = 4; candidates planned to fit, measured)
                                                  vs  --fused-adam --compile --batch 4
  1 seq/step    anvil's fastest 1 seq/step setting at <= the reference default's peak
  0.6B          Qwen3-0.6B, sequence 1024, 1 seq: anvil's MFU
  8B            Qwen3-8B on one GPU, --recompute none, 1 and 2 sequences per step, each at
                <= 132 GiB                        vs  reference --mode fsdp (may run out of memory)
On one GPU anvil's ddp and fsdp are the same, so its candidates run in one mode. Short step
counts keep it to a few minutes (the reference times the steps after its 10th; --compile costs
its compile time). REF_TIMEOUT bounds each reference run; SKIP_8B=1 leaves out the 8B runs,
ONLY_8B=1 runs only them (two calls where one would not fit in ten minutes). The table is
printed also when the experiment is stopped early; the rows not run say so.
"""
import results as R

INPUTS = []
SETTINGS = {"REF_TIMEOUT": 180, "SKIP_8B": 0, "ONLY_8B": 0}
TABLE_WHEN_STOPPED = True

P17 = ["--preset", "qwen3-1.7b", "--seq-len", "2048", "--steps", "12", "--warmup", "4"]
P8 = ["--preset", "qwen3-8b", "--seq-len", "2048", "--steps", "10", "--warmup", "3"]


def planned_gib(x, batch, recompute, accum=1):
    """The plan's total for Qwen3-1.7B at sequence 2048 in ddp (what the candidates are run in)."""
    import json
    j = json.loads(x.query("plan", "--preset", "qwen3-1.7b", "--seq-len", "2048", "--micro-batch", batch,
                           "--recompute", recompute, "--grad-accum", accum, "--json"))
    return j["ddp"]["total"] / 2**30


def runs(x):
    ref = lambda tag, *a, steps="16": x.reference("r_" + tag, 1, "--steps", steps, *a, timeout=x.s["REF_TIMEOUT"])
    if not x.s["ONLY_8B"]:
        x.step("a_ddp_b1_full", *P17, "--micro-batch", "1", "--recompute", "full")
        x.step("a_ddp_b1_none", *P17, "--micro-batch", "1", "--recompute", "none")
        ref("default", "--mode", "ddp", "--model", "qwen3-1.7b")
        ref("fused", "--mode", "ddp", "--model", "qwen3-1.7b", "--fused-adam", "--no-recompute")
        ref("best", "--mode", "ddp", "--model", "qwen3-1.7b", "--fused-adam", "--compile", "--batch", "4")
        # Per recompute setting: 4 sequences per optimizer step in the largest micro-batch planned
        # under 35.0 GiB, and 1 sequence per step if planned under the reference default's 32.3
        # GiB, each less 0.5% for the plan's error. Full recomputation is the first row's.
        for r in ("none", "selective"):
            for b in (4, 2, 1):
                if planned_gib(x, b, r, 4 // b) <= 34.8:
                    x.step("a_ddp_b%dx%d_%s" % (b, 4 // b, r), *P17, "--micro-batch", b, "--grad-accum", 4 // b,
                           "--recompute", r)
                    break
            tag = "a_ddp_b1_" + r
            if tag not in x.results and planned_gib(x, 1, r) <= 32.1:
                x.step(tag, *P17, "--micro-batch", "1", "--recompute", r)
        x.step("a_small", "--preset", "qwen3-0.6b", "--seq-len", "1024", "--micro-batch", "1", "--recompute", "none",
               "--steps", "24", "--warmup", "6")
    if not x.s["SKIP_8B"]:
        x.step("a_8b_none", *P8, "--micro-batch", "1", "--recompute", "none")
        x.step("a_8b_none_b2", *P8, "--micro-batch", "2", "--recompute", "none")
        ref("8b", "--mode", "fsdp", "--model", "qwen3-8b", steps="13")


def table(x):
    res = x.results
    get = lambda tag: res.get(tag, {"error": "not run"})
    ok = R.ok

    def best(tags, bar):
        cands = [res[t] for t in tags if ok(res[t]) and res[t]["peak_allocated_gib"] <= bar]
        return max(cands, key=lambda j: j["tokens_per_s"]) if cands else {"error": "nothing under %.1f GiB" % bar}

    def seqs(j):
        return j["micro_batch"] * j.get("grad_accum", 1) if ok(j) else 0

    cands = [t for t in res if t.startswith("a_ddp_b")]
    ref_default = get("r_default")
    bar = ref_default["peak_allocated_gib"] if ok(ref_default) else 32.3
    rows = [
        ("1.7B 1 seq, recompute vs recompute", get("a_ddp_b1_full"), "default (recompute, unfused)", ref_default, ""),
        ("1.7B 1 seq, no recompute vs fused no recompute", get("a_ddp_b1_none"), "--fused-adam --no-recompute",
         get("r_fused"), ""),
        ("1.7B best <= 35.0 GiB, 4 seq/step, vs best", best([t for t in cands if seqs(res[t]) == 4], 35.0),
         "--fused-adam --compile --batch 4", get("r_best"), ">= 1.35x at <= 35.0 GiB"),
        ("1.7B best 1 seq/step", best([t for t in cands if "_b1_" in t], bar), "default (recompute, unfused)",
         ref_default, ">= 30,000 at <= %.1f GiB" % bar),
        ("0.6B seq 1024, 1 seq", get("a_small"), "", {"error": "not run"}, "MFU >= 35%"),
        ("8B one GPU, 1 seq/step", get("a_8b_none"), "--mode fsdp", get("r_8b"), ">= 9,000 at <= 132 GiB"),
        ("8B one GPU, 2 seq/step", get("a_8b_none_b2"), "--mode fsdp", get("r_8b"), ">= 9,000 at <= 132 GiB"),
    ]

    def met(i, a, r):
        if not ok(a):
            return "no"
        if i == 2:
            return "yes" if ok(r) and a["tokens_per_s"] >= 1.35 * r["tokens_per_s"] and a["peak_allocated_gib"] <= 35 else "no"
        if i == 3:
            return "yes" if a["tokens_per_s"] >= 30000 and a["peak_allocated_gib"] <= bar else "no"
        if i == 4:
            return "yes" if (a.get("mfu") or 0) >= 0.35 else "no"
        if i >= 5:
            return "yes" if a["tokens_per_s"] >= 9000 and a["peak_allocated_gib"] <= 132 else "no"
        return ""

    print("| row | anvil setting | anvil tok/s @ peak | MFU | plan GiB (vs peak) | reference | reference tok/s @ peak "
          "| ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for i, (name, a, rset, r, goal) in enumerate(rows):
        mfu = "%.1f%%" % (100 * a["mfu"]) if ok(a) and a.get("mfu") else ""
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, R.setting(a), R.figure(a), mfu, R.plan_error(a), rset, R.figure(r) if rset else "",
            R.ratio(a, r), goal, met(i, a, r)))
    print("\nEvery anvil run (step ms: forward / backward / optimizer from the synchronised breakdown steps):")
    for tag in sorted(t for t in res if t.startswith("a_")):
        j = res[tag]
        if ok(j):
            print("  %-18s %-28s %s  plan %s  step %.1f ms (fwd %.1f, bwd %.1f, opt %.1f)" % (
                tag[2:], R.setting(j), R.figure(j), R.plan_error(j), j["step_ms"], j["forward_ms"], j["backward_ms"],
                j["optimizer_ms"]))
        else:
            print("  %-18s %s" % (tag[2:], R.figure(j)))
