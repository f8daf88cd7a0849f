"""The padding of each packing at sequence 2048 on chats of typical length.

Two seeded synthetic sets (bench/make_inputs.py): the prepare_speed experiment's short chats
(20,000 rows of 2-6 turns of 5-80 words) and Capybara-shaped ones (16,000 rows of 1-5
exchanges, some longer than 2048 tokens), each prepared with --packing bfd-split, bfd and
wrapped; prints anvil prepare's report lines.
"""
import make_inputs

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer")]
SETTINGS = {}
SETS = ("speed", "capybara_like")
PACKINGS = ("bfd-split", "bfd", "wrapped")


def prepare_all(x, sets=SETS):
    """Writes the chats and prepares each set with each packing into OUT/out-SET-PACKING."""
    x.call("chats", make_inputs.padding_chats, x.out)
    for name in sets:
        for packing in PACKINGS:
            x.anvil("prepare-%s-%s" % (name, packing), "prepare", "--tokenizer", x.inputs["TOKENIZER_DIR"], "--data",
                    x.out / (name + ".jsonl"), "--seq-len", "2048", "--packing", packing, "--out",
                    x.out / ("out-%s-%s" % (name, packing)))


def report(x, sets=SETS):
    for name in sets:
        for packing in PACKINGS:
            for line in x.runs["prepare-%s-%s" % (name, packing)].out.splitlines():
                if line.startswith("wrote "):
                    print(name + " " + line.split(" ", 2)[2])
                else:
                    print(line)


def runs(x):
    prepare_all(x)


def table(x):
    report(x)
