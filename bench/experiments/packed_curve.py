"""The loss curve of packed documents beside PyTorch's, on the same weights and bins.

Chats prepared once by `anvil prepare --packing bfd` (best-fit-decreasing bins, each document
whole), Qwen3-0.6B with the same random weights (anvil init, loaded by both), one block per step
in file order, constant learning rate: anvil train on one GPU beside
bench/packed_curve_reference.py (transformers on the same bins: position_ids per document, SDPA
with a block-diagonal causal mask, bf16 autocast, AdamW as bench/reference_train.py). Prints both
curves, their ends, and the largest and mean relative difference; the curve_vs_reference
experiment's wrapped blocks read 2.4e-3 mean and 7.5e-3 largest between the two trainers
(bench/NOTES.md), the bf16 noise to expect.
"""
import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer (tokenizer.json, tokenizer_config.json with its chat template)"),
          ("CHATS", "any --data source of anvil prepare with {\"messages\": [...]} rows")]
SETTINGS = {"STEPS": 100, "SEQ": 2048, "LR": "3e-5", "PRESET": "qwen3-0.6b", "PACKING": "bfd"}


def runs(x):
    s, out = x.s, x.out
    r = x.anvil("prepare", "prepare", "--tokenizer", x.inputs["TOKENIZER_DIR"], "--data", x.inputs["CHATS"],
                "--seq-len", s["SEQ"], "--packing", s["PACKING"], "--out", out / "blocks")
    if not x.dry:
        print("\n".join(l for l in r.text.splitlines() if l.startswith("wrote")))
    x.anvil("init", "init", "--preset", s["PRESET"], "--out", out / "model")
    x.anvil("anvil", "train", "--model", out / "model", "--data", out / "blocks", "--packing", s["PACKING"],
            "--seq-len", s["SEQ"], "--steps", s["STEPS"], "--lr", s["LR"], "--no-shuffle", "--micro-batch", "1",
            "--log-every", "1", "--metrics", out / "anvil.jsonl")
    x.python("reference", "packed_curve_reference.py", "--model", out / "model", "--blocks", out / "blocks", "--steps",
             s["STEPS"], "--lr", s["LR"], "--losses", out / "curve_reference.json")


def table(x):
    print("\n".join(l for l in (x.out / "reference.log").read_text().splitlines() if l.startswith("reference:")))
    anvil, ref = R.losses(x.out / "anvil.jsonl"), R.reference_losses(x.out / "curve_reference.json")
    n = min(len(anvil), len(ref))
    worst, at, mean = R.curve_difference(anvil, ref)
    print("anvil %.4f -> %.4f, reference %.4f -> %.4f over %d steps" % (anvil[0], anvil[n - 1], ref[0], ref[n - 1], n))
    print("relative difference from the reference: largest %.2e (step %d), mean %.2e" % (worst, at, mean))
    print("the curves, every 5th step from step 5:")
    for label, c in (("reference", ref), ("anvil", anvil)):
        print("%-10s %s" % (label, " ".join("%.4f" % v for v in c[4:n:5])))
