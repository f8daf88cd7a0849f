"""anvil prepare from Parquet against the same rows as JSONL, on every core.

N synthetic chats (2-6 turns, mixed ASCII and non-ASCII words) written by pyarrow (snappy,
dictionary, its defaults) and as JSONL, each prepared twice; prints the best wall time of each
and whether the two block files are identical.
"""
import json
import time

import make_inputs

INPUTS = [("TOKENIZER_DIR", "a Qwen3 tokenizer")]
SETTINGS = {"N": 100000}
SOURCES = ("chats.jsonl", "chats.parquet")


def runs(x):
    x.call("chats", make_inputs.parquet_and_jsonl_chats, x.out, x.s["N"])
    for src in SOURCES:
        for run in (1, 2):
            t0 = time.perf_counter()
            x.anvil("prepare-%s-%d" % (src, run), "prepare", "--tokenizer", x.inputs["TOKENIZER_DIR"], "--data",
                    x.out / src, "--seq-len", "2048", "--out", x.out / ("out-" + src))
            x.results["%s-%d" % (src, run)] = time.perf_counter() - t0


def blocks(path):
    b = open(path, "rb").read()
    h = json.loads(b[16:16 + int.from_bytes(b[8:16], "little")])
    return h["num_blocks"], b[h["data_offset"]:]


def table(x):
    for src in SOURCES:
        print("%s: %.1f MB, best of 2: %.2f s" % (src, (x.out / src).stat().st_size / 1e6,
                                                  min(x.results["%s-%d" % (src, r)] for r in (1, 2))))
    a, b = (blocks(x.out / ("out-%s/packed.bin" % s)) for s in SOURCES)
    print("blocks:", a[0], "identical" if a == b else "DIFFERENT")
