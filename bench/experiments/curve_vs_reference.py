"""The loss curve beside the reference trainer's, on the same weights and blocks.

Qwen3-0.6B (PRESET) with the same random weights (anvil init, loaded by both), the same blocks
in file order (chats rendered by the Qwen3 chat template, tokenized without special tokens,
concatenated and cut into blocks), one block per step, constant learning rate: anvil train on
one GPU beside bench/reference_train.py (ddp, its default recomputation), and the reference
again in two settings as valid as its default (--fused-adam; --mode fsdp: FSDP2 with bf16
parameters instead of autocast), the reference's own spread from rounding beside anvil's.
Prints the curves' ends, each one's largest and mean relative difference from the reference
(anvil's bar: 5e-3), and the curves. OTHER_ANVIL: more anvil binaries to compare, separated
by spaces.
"""
import json

import make_inputs
import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer (tokenizer.json, tokenizer_config.json with its chat template)"),
          ("CHATS", "JSONL of {\"messages\": [...]} rows (data/demo/arithmetic.jsonl will do)")]
SETTINGS = {"STEPS": 100, "SEQ": 512, "LR": "3e-5", "PRESET": "qwen3-0.6b", "OTHER_ANVIL": ""}


def others(x):
    return ["anvil_other%d" % i for i, _ in enumerate(x.s["OTHER_ANVIL"].split())]


def runs(x):
    s, out = x.s, x.out
    x.call("blocks", make_inputs.chat_blocks, x.inputs["TOKENIZER_DIR"], x.inputs["CHATS"], out / "blocks.safetensors",
           s["SEQ"], s["STEPS"])
    x.anvil("init", "init", "--preset", s["PRESET"], "--out", out / "model")
    train = ["train", "--model", out / "model", "--data", out / "blocks.safetensors", "--steps", s["STEPS"], "--lr",
             s["LR"], "--no-shuffle", "--micro-batch", "1", "--log-every", "1"]
    x.anvil("anvil", *train, "--metrics", out / "anvil.jsonl")
    for label, binary in zip(others(x), s["OTHER_ANVIL"].split()):
        x.run(label, [binary, *train, "--metrics", out / (label + ".jsonl")])
    ref = ["--mode", "ddp", "--model", out / "model", "--data", out / "blocks.safetensors", "--no-shuffle", "--steps",
           s["STEPS"], "--lr", s["LR"]]
    for label, flags in (("ref", []), ("ref_fused", ["--fused-adam"]), ("ref_fsdp", ["--mode", "fsdp"])):
        x.reference(label, 1, *ref, "--losses", out / ("curve_%s.json" % label), *flags)
        if not R.ok(x.results[label]) and not x.dry:
            x.stop("%s: %s" % (label, x.results[label]["error"]))


def curve(x, label):
    if label.startswith("ref"):
        return R.reference_losses(x.out / ("curve_%s.json" % label))
    return R.losses(x.out / (label + ".jsonl"))


def table(x):
    r = curve(x, "ref")
    labels = ["anvil", *others(x), "ref_fused", "ref_fsdp"]
    print("reference (reference_train.py ddp): %.4f -> %.4f over %d steps" % (r[0], r[-1], len(r)))
    for label in labels:
        c = curve(x, label)
        worst, at, mean = R.curve_difference(c, r)
        bar = "" if label.startswith("ref_") else "; bar 5e-3: " + ("met" if worst <= 5e-3 else "NOT met")
        print("%-12s %.4f -> %.4f; relative difference from the reference: max %.2e (step %d), mean %.2e%s"
              % (label, c[0], c[min(len(c), len(r)) - 1], worst, at, mean, bar))
    print("the curves, every 5th step from step 5:")
    for label in ["ref"] + labels:
        print("%-12s %s" % (label, " ".join("%.4f" % v for v in curve(x, label)[4::5])))
    json.dump({l: curve(x, l) for l in ["ref"] + labels}, open(x.out / "curves.json", "w"))
