#!/usr/bin/env python3
"""Writes the demo's data, model shape and tokenizer into data/demo/ (committed; rerun to
regenerate, or pass --out DIR to write them elsewhere: tools/test_make_demo_data.py does).

- tokenizer.json: a byte-level BPE tokenizer in the Hugging Face format, shaped like
  Qwen's (NFC, the same split regex, ByteLevel), with the 256 byte tokens, merges for the
  most frequent pairs of the demo text, and the ChatML special tokens.
- tokenizer_config.json: a ChatML chat template (Qwen's turn format).
- arithmetic.jsonl: conversations that ask for a sum or a difference of two numbers below
  100, and the answer (the tokenizer's merges come from these; benchmarks and tests read it).
- The demo's task: "What is A + B?" for A and B from 0 to 99 (10,000 questions), answered
  with the sum alone ("What is 47 + 35?", "82"). The questions are shuffled (seed 36) and
  split: sums_heldout.jsonl holds the first 1,000, each with its "answer", and
  sums_train.jsonl the other 9,000 as conversations, each once. Training never sees a
  held-out question: tools/demo.sh trains on sums_train.jsonl and asks every held-out one.
  The split is by question, so each held-out question's digit pairs are in many training
  rows: to answer it the model must add, digit by digit, not recall.
- model_config.json: the demo model's shape (anvil init --config): the tiny preset's Qwen3
  block narrowed to a width of 64, so that it learns the task on two CPU cores in under
  three minutes.
Deterministic: the same files every run.
"""
import argparse
import json
import os
import random
import re
from collections import Counter

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "demo")
TOP = 99  # the demo task's numbers: 0 to TOP
HELD_OUT = 1000  # questions of the demo task that training never sees
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


def conversations(rng, n):
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        if rng.random() < 0.5:
            q, ans = f"What is {a} + {b}?", f"{a} + {b} = {a + b}"
        else:
            a, b = max(a, b), min(a, b)
            q, ans = f"What is {a} - {b}?", f"{a} - {b} = {a - b}"
        rows.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": ans}]})
    return rows


def write_rows(out, name, rows):
    with open(os.path.join(out, name), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def sum_questions():
    """The demo's task, every question once, in a fixed shuffled order: (question, answer)."""
    pairs = [(a, b) for a in range(TOP + 1) for b in range(TOP + 1)]
    random.Random(36).shuffle(pairs)
    return [(f"What is {a} + {b}?", str(a + b)) for a, b in pairs]


def write_sums(out):
    questions = sum_questions()
    held, train = questions[:HELD_OUT], questions[HELD_OUT:]
    write_rows(out, "sums_heldout.jsonl",
               [{"messages": [{"role": "user", "content": q}], "answer": a} for q, a in held])
    write_rows(out, "sums_train.jsonl",
               [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in train])


def write_model_config(out):
    """The tiny preset's config.json (anvil init --preset tiny) at width 64 (heads of 16)."""
    config = {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "dtype": "float32", "head_dim": 16,
        "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 256,
        "max_position_embeddings": 4096, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": None, "tie_word_embeddings": True, "use_cache": False, "use_sliding_window": False,
        "vocab_size": 320,
    }
    with open(os.path.join(out, "model_config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")


def bpe_merges(rows, b2u):
    """The vocabulary (the 256 bytes, then each merge) and the merges."""
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
            merged, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == x and s[i + 1] == y:
                    merged.append(x + y)
                    i += 2
                else:
                    merged.append(s[i])
                    i += 1
            seqs[w] = merged
    return vocab, merges


def write_tokenizer(out, rows):
    vocab, merges = bpe_merges(rows, bytes_to_unicode())
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
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
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
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    return len(vocab) + len(added)


def main():
    parser = argparse.ArgumentParser(description="Writes the demo's data, model shape and tokenizer.")
    parser.add_argument("--out", default=OUT, help="the folder to write (default: data/demo)")
    out = parser.parse_args().out
    os.makedirs(out, exist_ok=True)
    rows = conversations(random.Random(1234), 6000)
    write_rows(out, "arithmetic.jsonl", rows)
    write_sums(out)
    write_model_config(out)
    vocab = write_tokenizer(out, rows)
    print(f"wrote {out}: {len(rows)} conversations, the demo's {TOP + 1}^2 sums ({HELD_OUT} held out), "
          f"vocabulary {vocab}")


if __name__ == "__main__":
    main()
