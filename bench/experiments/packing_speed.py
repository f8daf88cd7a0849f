"""Real tokens/s with --packing bfd-split against wrapped, one GPU, Qwen3-1.7B, sequence 2048.

Fresh weights, on the Capybara-shaped chats of the packing_padding experiment (which it runs
first): STEPS steps of each (the first 10 not timed), then the ratio (bar: bfd-split >=
0.97 x wrapped; padding is not counted in bfd's tokens).
"""
import results as R
from experiments import packing_padding

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer")]
SETTINGS = {"STEPS": 40}
PACKINGS = ("wrapped", "bfd-split")


def runs(x):
    packing_padding.prepare_all(x)
    for packing in PACKINGS:
        x.anvil("train-" + packing, "train", "--preset", "qwen3-1.7b", "--data", x.out / ("out-capybara_like-" + packing),
                "--seq-len", "2048", "--steps", x.s["STEPS"], "--lr", "1e-5", "--log-every", "10")


def table(x):
    packing_padding.report(x, sets=("capybara_like",))
    logs = {p: (x.out / ("train-%s.log" % p)).read_text() for p in PACKINGS}
    for p in PACKINGS:
        print("%s: %s" % (p, R.done_line(logs[p])))
    tps = {p: R.train_tokens_per_s(logs[p]) for p in PACKINGS}
    print("bfd-split / wrapped real tokens/s: %.3f (bar 0.97)" % (tps["bfd-split"] / tps["wrapped"]))
