"""A small Qwen3-MoE's loss curve beside transformers', on real text, from the same weights (issue 39).

The model: PRESET (qwen3-30b-a3b: 128 experts of 768, top 8, norm_topk_prob) cut to its first
LAYERS layers by `anvil init --num-layers` (CONFIG=FILE: that config.json instead, e.g. a tiny one
to check the experiment on a CPU), the folder loaded by both trainers. The text: Python's
docstrings as chats (bench/docstring_chats.py: real English prose), rendered by the Qwen3 chat
template, concatenated and cut into blocks of SEQ tokens (make_inputs.chat_blocks), BATCH blocks a
step in file order. STEPS steps at the constant LR, AdamW without weight decay, the gradient norm
clipped to 1.0:
  anvil       anvil train, its default gradients (bf16 on one GPU with one micro-batch a step)
  anvil_fp32  the same with --grad-dtype fp32: anvil's own rounding spread, the bf16 noise
  ref         bench/reference_train.py ddp: transformers' Qwen3MoeForCausalLM, grouped_mm experts,
              fp32 parameters, bf16 autocast, fused AdamW, no gradient checkpointing
The load-balancing loss is in both losses or in neither, as the folder's config.json says
(output_router_logits; false in the presets, as on the hub); AUX=1 writes it true there, and both
then add router_aux_loss_coef x transformers' load_balancing_loss_func.
The verdict this experiment holds is dpo_vs_trl's "within bf16 noise": the largest |anvil - ref|
over the steps is at most twice the largest |anvil - anvil_fp32| (two trainers' roundings add
up). Beside it, shown and not held, the dense curve's bar (curve_vs_reference: the largest
relative difference from the reference <= 5e-3). Also step 1's losses (the same weights and
blocks: only the forward's rounding differs), anvil's smallest router share over the steps
(above 0: every expert of every layer took tokens at every step), and the curves.
"""
import json

import make_inputs
import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer (tokenizer.json, tokenizer_config.json with its chat template)")]
SETTINGS = {"PRESET": "qwen3-30b-a3b", "CONFIG": "", "LAYERS": 2, "SEQ": 2048, "BATCH": 2, "STEPS": 100, "LR": "3e-5",
            "AUX": 0}
TABLE_WHEN_STOPPED = True
NOISE_BAR, DENSE_BAR = 2.0, 5e-3


def set_router_aux_loss(config_json):
    """output_router_logits true in a model folder's config.json: both trainers add the aux loss."""
    j = json.load(open(config_json))
    j["output_router_logits"] = True
    json.dump(j, open(config_json, "w"), indent=2)


def runs(x):
    s, out = x.s, x.out
    x.python("chats", "docstring_chats.py", out / "chats.jsonl")
    x.call("blocks", make_inputs.chat_blocks, x.inputs["TOKENIZER_DIR"], out / "chats.jsonl",
           out / "blocks.safetensors", s["SEQ"], s["STEPS"] * s["BATCH"])
    model = ["--config", s["CONFIG"]] if s["CONFIG"] else ["--preset", s["PRESET"]]
    x.anvil("init", "init", *model, "--num-layers", s["LAYERS"], "--out", out / "model")
    if s["AUX"]:
        x.call("aux", set_router_aux_loss, out / "model" / "config.json")
    train = ["train", "--model", out / "model", "--data", out / "blocks.safetensors", "--steps", s["STEPS"], "--lr",
             s["LR"], "--no-shuffle", "--micro-batch", s["BATCH"], "--log-every", "1"]
    x.anvil("anvil", *train, "--metrics", out / "anvil.jsonl", check=False)
    x.anvil("anvil_fp32", *train, "--grad-dtype", "fp32", "--metrics", out / "anvil_fp32.jsonl", check=False)
    x.reference("ref", 1, "--mode", "ddp", "--model", out / "model", "--data", out / "blocks.safetensors",
                "--no-shuffle", "--steps", s["STEPS"], "--lr", s["LR"], "--batch", s["BATCH"], "--fused-adam",
                "--no-recompute", "--experts-implementation", "grouped_mm", "--losses", out / "curve_ref.json")


def header(path):
    """The settings line of an anvil train metrics file ({} when missing)."""
    try:
        with open(path) as f:
            return json.loads(f.readline()).get("config", {})
    except (OSError, ValueError):
        return {}


def preface(x, a, a32, ref):
    """The model, the aux loss, anvil's gradients, step 1's losses and the router's smallest share."""
    out = x.out
    config = json.load(open(out / "model" / "config.json"))
    aux, experts = config.get("output_router_logits", False), config["num_experts"]
    grads = header(out / "anvil.jsonl").get("grad_dtype", "?")
    shares = [m["router_fraction_min"] for m in R.metrics(out / "anvil.jsonl").values()]
    print("model: %s, the aux loss %s; anvil's gradients %s%s" % (
        x.s["CONFIG"] or "%s's first %d layers" % (x.s["PRESET"], x.s["LAYERS"]),
        "in both losses (output_router_logits true)" if aux else "in neither loss (output_router_logits false)",
        grads, "" if grads == "bf16" else " (not bf16: the noise below is not bf16's)"))
    print("step 1 (same weights, same blocks): anvil %.5f, anvil fp32 grads %.5f, transformers %.5f, anvil vs "
          "transformers %.2e relative" % (a[0], a32[0], ref[0], abs(a[0] - ref[0]) / abs(ref[0])))
    print("anvil's smallest share of a layer's assignments that went to one expert, over the steps: %.5f (balanced: "
          "1/%d = %.5f); every expert took tokens at every step: %s"
          % (min(shares), experts, 1 / experts, "yes" if min(shares) > 0 else "no") if shares
          else "anvil logged no router shares")


def table(x):
    out = x.out
    curves = {"anvil": R.losses(out / "anvil.jsonl"), "anvil_fp32": R.losses(out / "anvil_fp32.jsonl"),
              "ref": R.reference_losses(out / "curve_ref.json")}
    for label, c in curves.items():
        if len(c) < x.s["STEPS"]:
            print("%s: %d of %d steps logged (%s)" % (label, len(c), x.s["STEPS"], out / (label + ".log")))
    if any(not c for c in curves.values()):
        return
    a, a32, ref = curves["anvil"], curves["anvil_fp32"], curves["ref"]
    preface(x, a, a32, ref)
    d_ref, at, mean = R.abs_difference(a, ref)
    noise, noise_at, noise_mean = R.abs_difference(a, a32)
    rel, rel_at, rel_mean = R.curve_difference(a, ref)
    print("\n| run | loss step 1 -> %d | max abs diff from anvil (step) | mean abs diff |" % len(a))
    print("| --- | --- | --- | --- |")
    print("| anvil | %.4f -> %.4f | | |" % (a[0], a[-1]))
    row = "| %s | %.4f -> %.4f | %.3e (%d) | %.3e |"
    print(row % ("anvil --grad-dtype fp32", a32[0], a32[-1], noise, noise_at, noise_mean))
    print(row % ("transformers (grouped_mm, fused AdamW)", ref[0], ref[-1], d_ref, at, mean))
    print("\n| verdict | measured | bar | met |")
    print("| --- | --- | --- | --- |")
    print("| within bf16 noise (held): max abs(anvil - transformers) <= %g x max abs(anvil - anvil fp32 grads) "
          "| %.3e | %.3e | %s |" % (NOISE_BAR, d_ref, NOISE_BAR * noise, "yes" if d_ref <= NOISE_BAR * noise else "no"))
    print("| the dense curve's bar (shown, not held): max relative abs(anvil - transformers) / transformers "
          "(step %d; mean %.2e) | %.3e | %.0e | %s |" % (rel_at, rel_mean, rel, DENSE_BAR,
                                                         "yes" if rel <= DENSE_BAR else "no"))
    print("\nthe curves, every 5th step from step 5:")
    for label, c in curves.items():
        print("%-12s %s" % (label, " ".join("%.4f" % v for v in c[4::5])))
    json.dump(curves, open(out / "curves.json", "w"))
