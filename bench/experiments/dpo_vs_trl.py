"""anvil train --objective dpo beside TRL's DPOTrainer on one GPU, and Qwen3-8B's DPO.

Qwen3-1.7B with the same fresh weights (anvil init, loaded by both), sequence 2048, 4 pairs a
step, STEPS steps, the same preference rows (make_inputs.preference_pairs: random-word
conversations, 1,628-2,028 tokens a pair, written in the order of anvil's blocks, so that both
trainers read the same batches in file order), the same constant LR, BETA, no warm-up or weight
decay, the gradient norm clipped to 1.0:
  anvil       --recompute auto (the fastest the plan fits), its default bf16 gradients
  anvil_fp32  the same with --grad-dtype fp32: anvil's own rounding spread, the bf16 noise
  trl_gc      bench/reference_dpo.py: DPOTrainer with precomputed reference log-probs, bf16
              autocast, SDPA attention (no flash-attn there), fused AdamW, gradient checkpointing
  trl_nogc    the same without gradient checkpointing (TRL_NO_GC=0 leaves it out)
Prints pairs/s (the steps after WARM) at peak allocated GiB, the ratio to TRL's faster setting
(goal >= 2x) and the reference passes' times; then the first COMPARE steps' losses side by side.
"Within bf16 noise": the largest |anvil - TRL| over those steps is at most twice the largest
|anvil - anvil_fp32| (two runs that differ only in rounding: two trainers' roundings add up).
Step 1's logps/chosen of anvil and TRL (the same weights, the same 4 pairs) shows the batches
match. Then Qwen3-8B (--preset: fresh weights, no folder written) on the first STEPS_8B x 4
pairs: pairs/s and peak beside the plan. SKIP_8B=1 / ONLY_8B=1 split it into two calls.
"""
import json
import re
import shutil

import make_inputs
import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer (tokenizer.json, tokenizer_config.json with its chat template)")]
SETTINGS = {"PAIRS": 240, "STEPS": 60, "COMPARE": 50, "WARM": 10, "LR": "1e-6", "BETA": "0.1", "STEPS_8B": 10,
            "TRL_NO_GC": 1, "TRL_TIMEOUT": 300, "SKIP_8B": 0, "ONLY_8B": 0}
TABLE_WHEN_STOPPED = True
PAIRS_PER_STEP = 4


def copy_tokenizer(src, model_dir):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{src}/{name}", f"{model_dir}/{name}")


def head(src, dst, n):
    with open(src) as f, open(dst, "w") as g:
        g.writelines(line for _, line in zip(range(n), f))


def runs(x):
    s, out, tok = x.s, x.out, x.inputs["TOKENIZER_DIR"]
    x.call("pairs", make_inputs.preference_pairs, out / "pairs.jsonl", s["PAIRS"])
    dpo = ["--objective", "dpo", "--beta", s["BETA"], "--seq-len", "2048", "--micro-batch", PAIRS_PER_STEP, "--lr",
           s["LR"], "--no-shuffle", "--log-every", "1", "--recompute", "auto"]
    if not s["ONLY_8B"]:
        x.anvil("init", "init", "--preset", "qwen3-1.7b", "--out", out / "model")
        x.call("tokenizer", copy_tokenizer, tok, out / "model")
        train = ["train", "--model", out / "model", "--data", out / "pairs.jsonl", "--steps", s["STEPS"], *dpo]
        x.anvil("anvil", *train, "--metrics", out / "anvil.jsonl", check=False)
        x.anvil("anvil_fp32", *train, "--grad-dtype", "fp32", "--metrics", out / "anvil_fp32.jsonl", check=False)
        trl = ["--model", out / "model", "--data", out / "pairs.jsonl", "--steps", s["STEPS"], "--warmup", s["WARM"],
               "--lr", s["LR"], "--beta", s["BETA"], "--batch", PAIRS_PER_STEP, "--max-length", "2048"]
        for label, flags in (("trl_gc", []), ("trl_nogc", ["--no-gc"]))[:2 if s["TRL_NO_GC"] else 1]:
            r = x.python(label, "reference_dpo.py", *trl, *flags, timeout=s["TRL_TIMEOUT"], check=False)
            x.results[label] = trl_result(r)
    if not s["SKIP_8B"]:
        x.call("pairs_8b", head, out / "pairs.jsonl", out / "pairs_8b.jsonl", s["STEPS_8B"] * PAIRS_PER_STEP)
        x.anvil("anvil_8b", "train", "--preset", "qwen3-8b", "--tokenizer", tok, "--data", out / "pairs_8b.jsonl",
                "--steps", s["STEPS_8B"], *dpo, "--metrics", out / "anvil_8b.jsonl", check=False)


def trl_result(r):
    if r is None or not r.text:
        return {"error": "not run"}
    j = R.last_json(r.out)
    if j and "pairs_per_s" in j:
        return j
    return R.step_result(r.text, r.rc)


def anvil_result(x, label, warm):
    """pairs/s over the steps after WARM (the metrics' elapsed times), peak and plan, the curve,
    the reference pass's time; {"error": ...} when the run failed."""
    m = R.metrics(x.out / (label + ".jsonl"))
    r = x.runs.get(label)
    if not m or r is None:
        return {"error": "not run" if r is None else R.step_result(r.text, r.rc)["error"]}
    steps = sorted(m)
    if len(steps) < 2:
        return {"error": "fewer than 2 steps logged"}
    last, first = steps[-1], max(1, min(warm, len(steps) - 1))
    ref = re.search(r"reference log-probs: (\d+) pairs in ([\d.]+) s", r.text)
    return {"pairs_per_s": (last - first) * PAIRS_PER_STEP / (m[last]["elapsed_s"] - m[steps[first - 1]]["elapsed_s"]),
            "peak_allocated_gib": m[last]["peak_mem_gib"], "planned_gib": m[last]["planned_mem_gib"],
            "losses": [m[k]["loss"] for k in steps], "logps_chosen": [m[k]["logps/chosen"] for k in steps],
            "rewards_accuracies": [m[k]["rewards/accuracies"] for k in steps],
            "ref_precompute_s": float(ref.group(2)) if ref else None,
            "recompute": (re.search(r"recompute (\w+)\)", r.text) or [None, "?"])[1]}


def figure(j):
    return "%.2f @ %.1f GiB" % (j["pairs_per_s"], j["peak_allocated_gib"]) if "pairs_per_s" in j else j["error"][:60]


def table(x):
    s = x.s
    res = {label: anvil_result(x, label, s["WARM"]) for label in ("anvil", "anvil_fp32", "anvil_8b")}
    res.update({label: x.results.get(label, {"error": "not run"}) for label in ("trl_gc", "trl_nogc")})
    ok = lambda j: "pairs_per_s" in j
    trl = max((res[t] for t in ("trl_gc", "trl_nogc") if ok(res[t])), key=lambda j: j["pairs_per_s"], default=None)
    a = res["anvil"]
    ratio = a["pairs_per_s"] / trl["pairs_per_s"] if ok(a) and trl else None
    print("| run | setting | pairs/s @ peak allocated | plan GiB | reference pass s | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    plan = lambda j: "%.2f" % j["planned_gib"] if ok(j) and j.get("planned_gib") else ""
    refs = lambda j: "%.1f" % j["ref_precompute_s"] if ok(j) and j.get("ref_precompute_s") is not None else ""
    rows = [("anvil 1.7B", "recompute %s, bf16 grads" % a.get("recompute", "-"), a,
             "%.2fx" % ratio if ratio else "-", ">= 2x TRL's faster", "yes" if ratio and ratio >= 2 else "no"),
            ("anvil 1.7B fp32 grads", "recompute %s" % res["anvil_fp32"].get("recompute", "-"), res["anvil_fp32"],
             "", "", ""),
            ("TRL 1.7B", "gradient checkpointing", res["trl_gc"], "", "", ""),
            ("TRL 1.7B", "no gradient checkpointing", res["trl_nogc"], "", "", ""),
            ("anvil 8B", "recompute %s" % res["anvil_8b"].get("recompute", "-"), res["anvil_8b"], "",
             "peak <= plan", "yes" if ok(res["anvil_8b"]) and res["anvil_8b"]["peak_allocated_gib"]
             <= res["anvil_8b"]["planned_gib"] + 1e-6 else "no")]
    for name, setting, j, rat, goal, met in rows:
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (name, setting, figure(j), plan(j), refs(j), rat, goal,
                                                                met))
    if not (ok(a) and trl):
        return
    n = min(s["COMPARE"], len(a["losses"]), len(trl["losses"]))
    worst, step, mean = R.abs_difference(a["losses"][:n], trl["losses"][:n])
    print("\nfirst %d steps' losses, anvil vs TRL (%s): max |difference| %.3e (step %d), mean %.3e"
          % (n, "gradient checkpointing" if trl["gradient_checkpointing"] else "no gradient checkpointing",
             worst, step, mean))
    if ok(res["anvil_fp32"]):
        noise, _, noise_mean = R.abs_difference(a["losses"][:n], res["anvil_fp32"]["losses"][:n])
        bar = 2 * noise
        print("bf16 noise (anvil bf16 vs fp32 gradients): max |difference| %.3e, mean %.3e; bar 2 x max = %.3e: %s"
              % (noise, noise_mean, bar, "within bf16 noise" if worst <= bar else "NOT within"))
    c0, t0 = a["logps_chosen"][0], trl["logps_chosen"][0]
    print("step 1 logps/chosen (same weights, same pairs): anvil %.3f, TRL %.3f, relative difference %.2e"
          % (c0, t0, abs(c0 - t0) / abs(t0)))
    print("\n| step | anvil | anvil fp32 grads | TRL | anvil - TRL | anvil acc | TRL acc |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    f32 = res["anvil_fp32"]["losses"] if ok(res["anvil_fp32"]) else [float("nan")] * n
    for k in range(n):
        print("| %d | %.5f | %.5f | %.5f | %+.2e | %.2f | %.2f |" % (
            k + 1, a["losses"][k], f32[k], trl["losses"][k], a["losses"][k] - trl["losses"][k],
            a["rewards_accuracies"][k], trl["rewards_accuracies"][k]))
    json.dump(res, open(x.out / "dpo_vs_trl.json", "w"))
