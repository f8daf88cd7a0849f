"""FP8's loss against bf16's: the same blocks trained STEPS steps with --fp8 off and each FP8 mode.

The blocks' linear layers in bf16 (--fp8 off) and in FP8 (tensorwise; rowwise where the GPU
runs it), the same fresh weights (--seed 1), the same order. The text is real English prose
found on any machine with Python: the docstrings of its installed modules as chats
(bench/docstring_chats.py, up to 4 M characters), packed at sequence SEQ by `anvil prepare`
with the Qwen3 tokenizer. Prints, per FP8 mode, the mean |loss difference| over the last 100
steps as a fraction of bf16's mean loss there (bar: <= 1%), the largest step difference, and
gradient-norm spikes (steps whose norm is over 3x the median of the 20 before it).
"""
import statistics

import results as R

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer")]
SETTINGS = {"PRESET": "qwen3-0.6b", "STEPS": 300, "SEQ": 2048, "LR": "3e-5", "MODES": "tensorwise rowwise"}


def modes(x):
    return ["off", *x.s["MODES"].split()]


def runs(x):
    s, out = x.s, x.out
    x.python("chats", "docstring_chats.py", out / "chats.jsonl")
    x.anvil("prepare", "prepare", "--tokenizer", x.inputs["TOKENIZER_DIR"], "--data", out / "chats.jsonl", "--seq-len",
            s["SEQ"], "--out", out / "blocks")
    for fp8 in modes(x):
        r = x.anvil(fp8, "train", "--preset", s["PRESET"], "--data", out / "blocks", "--seq-len", s["SEQ"], "--steps",
                    s["STEPS"], "--lr", s["LR"], "--warmup", "10", "--schedule", "constant", "--seed", "1",
                    "--log-every", "1", "--fp8", fp8, "--metrics", out / (fp8 + ".jsonl"), check=False)
        if not x.dry and not r.ok:
            print("--fp8 %s: did not train: %s" % (fp8, r.text.strip().splitlines()[-1]))
            (out / (fp8 + ".jsonl")).unlink(missing_ok=True)


def spikes(c):
    steps = sorted(c)
    norms = [c[s]["grad_norm"] for s in steps]
    return [(steps[i], norms[i]) for i in range(20, len(norms)) if norms[i] > 3 * statistics.median(norms[i - 20:i])]


def table(x):
    for fp8 in modes(x):
        log = x.out / (fp8 + ".log")
        print("--fp8 %s: %s" % (fp8, R.done_line(log.read_text()) if log.exists() else "not run"))
    base = R.metrics(x.out / "off.jsonl")
    last = sorted(base)[-100:]
    bl = statistics.mean(base[s]["loss"] for s in last)
    print(f"bf16: loss {base[min(base)]['loss']:.4f} -> {base[max(base)]['loss']:.4f}, mean over the last 100 steps "
          f"{bl:.4f}; grad-norm spikes: {spikes(base) or 'none'}")
    for mode in modes(x)[1:]:
        c = R.metrics(x.out / (mode + ".jsonl"))
        if not c:
            print(f"{mode}: no curve")
            continue
        d = [abs(c[s]["loss"] - base[s]["loss"]) for s in last]
        worst = max(sorted(base), key=lambda s: abs(c[s]["loss"] - base[s]["loss"]))
        print(f"{mode}: loss {c[min(c)]['loss']:.4f} -> {c[max(c)]['loss']:.4f}; mean |difference| over the last 100 "
              f"steps {statistics.mean(d):.5f} = {100 * statistics.mean(d) / bl:.3f}% of bf16's loss (bar 1%); largest "
              f"{abs(c[worst]['loss'] - base[worst]['loss']):.4f} at step {worst}; grad-norm spikes: {spikes(c) or 'none'}")
