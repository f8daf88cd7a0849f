#!/usr/bin/env python3
"""Writes the demo's data and tokenizer into data/demo/ (committed; rerun to regenerate).

- tokenizer.json: a byte-level BPE tokenizer in the Hugging Face format, shaped like
  Qwen's (NFC, the same split regex, ByteLevel), with the 256 byte tokens, merges for the
  most frequent pairs of the demo text, and the ChatML special tokens.
- tokenizer_config.json: a ChatML chat template (Qwen's turn format).
- arithmetic.jsonl: conversations that ask for a sum or a difference of two numbers below
  100, and the answer (the tokenizer's merges come from these; benchmarks and tests read it).
- digits.jsonl: the same conversations with one-digit numbers: the demo's training set, a
  task small enough for the tiny preset to learn on two CPU cores in under three minutes.
- digits_quiz.jsonl: 50 more such questions, drawn with another seed, each with its
  "answer": tools/demo.sh asks the trained model and counts the exact answers. The one-digit
  task has 155 questions and digits.jsonl holds them all, so the quiz is not held out: it
  shows that training took, not that the model answers questions it never saw.
Deterministic: the same files every run.
"""
import json
import os
import random
import re
from collections import Counter

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "demo")
SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NUM_MERGES = 64


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def conversations(rng, n, top=99):
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, top), rng.randint(0, top)
        if rng.random() < 0.5:
            q, ans = f"What is {a} + {b}?", f"{a} + {b} = {a + b}"
        else:
            a, b = max(a, b), min(a, b)
            q, ans = f"What is {a} - {b}?", f"{a} - {b} = {a - b}"
        rows.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]})
    return rows


def write_rows(name, rows):
    with open(os.path.join(OUT, name), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(1234)
    rows = conversations(rng, 6000)
    write_rows("arithmetic.jsonl", rows)
    write_rows("digits.jsonl", conversations(random.Random(2024), 6000, top=9))
    quiz = [{"messages": r["messages"][:1], "answer": r["messages"][1]["content"]}
            for r in conversations(random.Random(77), 50, top=9)]
    write_rows("digits_quiz.jsonl", quiz)

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(range(256))}
    # Merges: the most frequent adjacent pairs within words of the demo's text (ASCII only,
    # so words are runs of letters; numbers are split into digits by the regex anyway).
    words = Counter()
    for r in rows:
        for m in r["messages"]:
            for w in re.findall(r" ?[A-Za-z]+", m["role"] + "\n" + m["content"]):
                words[w] += 1
    seqs = {w: [b2u[b] for b in w.encode()] for w in words}
    merges = []
    for _ in range(NUM_MERGES):
        pairs = Counter()
        for w, s in seqs.items():
            for p in zip(s, s[1:]):
                pairs[p] += words[w]
        if not pairs:
            break
        (x, y), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{x} {y}")
        vocab[x + y] = len(vocab)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == x and s[i + 1] == y:
                    out.append(x + y)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    added = []
    for tok in SPECIALS:
        added.append({"id": len(vocab) + len(added), "content": tok, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(OUT, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    template = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                "{%- endif %}")
    config = {
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "chat_template": template, "model_max_length": 4096, "tokenizer_class": "Qwen2Tokenizer",
        "clean_up_tokenization_spaces": False, "errors": "replace", "split_special_tokens": False,
    }
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    print(f"wrote {OUT}: {len(rows)} conversations (and the one-digit set), vocabulary {len(vocab) + len(added)}")


if __name__ == "__main__":
    main()
