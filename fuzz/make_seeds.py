#!/usr/bin/env python3
"""Writes the generated seeds of the fuzz corpora (fuzz/corpus/<target>/), small files made
from real ones: Parquet files of every shape, codec, page version and string encoding pyarrow
writes; safetensors files of every dtype anvil reads; Qwen3's and Llama 3.1's tokenizer.json
cut to a few hundred tokens; the chat templates of the tokenizer fixtures; JSONL rows of
every shape, plain, gzip and zstd; config.json files of both transformers forms; and, with
--anvil, a real checkpoint's meta.json and anvil_config.toml from a two-step run of the
model of fuzz/fixtures/checkpoint. Inputs that once crashed a target are added to the corpora
by hand (named regress-*), not by this script.

Usage (from the repository root, with ../shared/fixtures beside it and the test oracles'
Python: pyarrow, safetensors, torch, zstandard or the zstd tool):
    python3 fuzz/make_seeds.py [--anvil build/anvil]
"""
import argparse
import gzip
import io
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from safetensors import safe_open
from safetensors.torch import save

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
SHARED = ROOT.parent / "shared" / "fixtures"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def parquet_seeds():
    chats = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello!"}],
        None,
        [],
        [{"role": "user", "content": None}, {"role": "assistant", "content": "caf\u00e9 \U0001F600"}],
    ]
    messages = pa.table({"messages": pa.array(chats, pa.list_(pa.struct([("role", pa.string()),
                                                                          ("content", pa.string())])))})
    sharegpt = pa.table({"conversations": [[{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}],
                                           [{"from": "system", "value": "s"}, {"from": "human", "value": "x"}]]})
    texts = ["alpha", None, "", "alphabet", "alphabetical", "beta " * 8]
    text = pa.table({"text": texts, "id": list(range(len(texts)))})
    prompt = pa.table({"prompt": ["What is 2+2?", "Name a color."], "completion": ["4", "Blue."]})
    for codec in ["NONE", "SNAPPY", "GZIP", "ZSTD"]:
        for version in ["1.0", "2.0"]:
            buf = io.BytesIO()
            pq.write_table(messages, buf, compression=codec, data_page_version=version)
            put("parquet", f"messages-{codec.lower()}-v{version[0]}.parquet", buf.getvalue())
    for encoding in ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"]:
        for version in ["1.0", "2.0"]:
            buf = io.BytesIO()
            pq.write_table(text, buf, use_dictionary=False, column_encoding={"text": encoding, "id": "PLAIN"},
                           compression="NONE", data_page_version=version)
            put("parquet", f"text-{encoding.lower()}-v{version[0]}.parquet", buf.getvalue())
    variants = {
        "text-dictionary-pages.parquet": dict(table=text, row_group_size=2, data_page_size=16),
        "sharegpt.parquet": dict(table=sharegpt),
        "prompt-completion-snappy.parquet": dict(table=prompt, compression="SNAPPY"),
        "empty.parquet": dict(table=text.slice(0, 0)),
    }
    for name, kw in variants.items():
        buf = io.BytesIO()
        pq.write_table(kw.pop("table"), buf, **kw)
        put("parquet", name, buf.getvalue())
    for name in ["good", "corrupt-page", "brotli", "int-text", "no-columns"]:
        put("parquet", f"tests-{name}.parquet", (ROOT / "tests/data/parquet" / f"{name}.parquet").read_bytes())


def safetensors_seeds():
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.uint8,
              torch.bool, torch.int16]
    every = {f"t.{str(d).split('.')[1]}": (torch.arange(6) % 3).to(d).reshape(2, 3) for d in dtypes}
    put("safetensors", "every-dtype.safetensors", save(every, metadata={"format": "pt"}))
    odd = {"scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4), "rank4": torch.ones(1, 2, 1, 2, dtype=torch.bfloat16)}
    put("safetensors", "odd-shapes.safetensors", save(odd))
    model = {}
    with safe_open(str(SHARED / "tiny-qwen3" / "model.safetensors"), "pt") as f:
        for name in f.keys():  # the model's names and ranks, tiny sizes
            shape = f.get_slice(name).get_shape()
            model[name] = torch.full([min(s, 2) for s in shape], 0.5)
    put("safetensors", "tiny-qwen3-names.safetensors", save(model, metadata={"format": "pt"}))
    shard = {f"{kind}.{u}": torch.zeros(64) for kind in ["master", "exp_avg", "exp_avg_sq"] for u in range(2)}
    put("safetensors", "checkpoint-shard.safetensors", save(shard))


def cut_tokenizer(path, keep):
    """tokenizer.json with the vocab ids below `keep`, the merges among them, and the added
    tokens renumbered after them."""
    t = json.loads(path.read_text())
    model = t["model"]
    vocab = {k: v for k, v in model["vocab"].items() if v < keep}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    added = t["added_tokens"][:12]
    for i, a in enumerate(added):
        a["id"] = keep + i
    t["added_tokens"] = added
    return t


def tokenizer_seeds():
    put("tokenizer", "demo.json", (ROOT / "data/demo/tokenizer.json").read_bytes())
    qwen = cut_tokenizer(SHARED / "qwen3-tokenizer" / "tokenizer.json", 400)
    put("tokenizer", "qwen3-cut.json", json.dumps(qwen, ensure_ascii=False))
    llama = cut_tokenizer(SHARED / "llama3_1-tokenizer" / "tokenizer.json", 400)
    put("tokenizer", "llama3_1-cut.json", json.dumps(llama, ensure_ascii=False))
    strings = json.loads(json.dumps(qwen))  # merges as "a b" strings, as older tokenizers write them
    strings["model"]["merges"] = [" ".join(m) for m in strings["model"]["merges"]]
    strings["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
    put("tokenizer", "qwen3-cut-merge-strings-nfkc.json", json.dumps(strings, ensure_ascii=False))
    demo = json.loads((ROOT / "data/demo/tokenizer.json").read_text())
    demo["added_tokens"] += [
        {"id": 274, "content": " word", "single_word": True, "lstrip": True, "rstrip": False, "normalized": True,
         "special": False},
        {"id": 275, "content": "<tool>", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False,
         "special": True}]
    put("tokenizer", "demo-added-token-flags.json", json.dumps(demo, ensure_ascii=False))


FEATURE_TEMPLATES = {
    "filters.jinja": "{{ messages[0].content|trim|upper }}|{{ messages|length }}|{{ messages|map(attribute='role')"
                     "|join(',') }}|{{ messages[-1]|tojson(indent=2) }}|{{ 'a-b'.replace('-', '+')|lower }}"
                     "|{{ (messages|selectattr('role', 'equalto', 'user')|list)|first }}|{{ x|default('d') }}"
                     "|{{ messages[0]|items|list }}",
    "strings.jinja": "{% for m in messages %}{% set c = m.content %}{{ c[::-1] }}{{ c[1:-1] }}{{ c.split('</think>')[-1]"
                     ".lstrip('\\n') }}{{ c.startswith('<') }}{{ c.endswith(('>', 'x')) }}{{ c.strip() ~ '|' }}"
                     "{{ '%' in c }}{% endfor %}",
    "control.jinja": "{%- set ns = namespace(last=-1, n=0) -%}{%- for m in messages[::-1] %}{%- set i = messages|length"
                     " - loop.index0 - 1 -%}{%- if m.role == 'user' and ns.last < 0 %}{%- set ns.last = i -%}{%- endif"
                     " -%}{%- if loop.index is odd %}{% continue %}{% endif %}{%- set ns.n = ns.n + 1 -%}{%- endfor -%}"
                     "{{ ns.last }}/{{ ns.n }}{% for k, v in {'a': 1, 'b': [2, 3]}.items() %}{{ k }}={{ v }}"
                     "{% else %}none{% endfor %}{% if add_generation_prompt %}<gen>{% elif 0 %}x{% else %}y{% endif %}",
    "macros.jinja": "{% macro turn(role, text='', end='<|im_end|>') -%}<|im_start|>{{ role }}\n{{ text }}{{ end }}\n"
                    "{%- endmacro %}{% for m in messages %}{{ turn(m.role, m.content) }}{% if m.tool_calls is defined %}"
                    "{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments|tojson }}){% endfor %}"
                    "{% endif %}{% endfor %}{% set tail %}{{ turn('assistant', end='') }}{% endset %}"
                    "{{ tail if add_generation_prompt else '' }}{{ 7 // 2 }}{{ 2 ** 8 }}{{ -7 % 3 }}{{ 1e16 }}",
    "errors.jinja": "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
                    "{{ strftime_now('%Y-%m-%d') }}{{ range(3)|list }}{{ range(10, 0, -3)|list }}",
    "generation.jinja": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                        "{{ eos_token }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
}


def chat_template_seeds():
    for name, folder in [("qwen3", SHARED / "qwen3-tokenizer"), ("llama3_1", SHARED / "llama3_1-tokenizer"),
                         ("demo", ROOT / "data/demo")]:
        put("chat_template", f"{name}.jinja", json.loads((folder / "tokenizer_config.json").read_text())["chat_template"])
    for name, text in FEATURE_TEMPLATES.items():
        put("chat_template", name, text)


def zstd(data):
    try:
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    except ImportError:
        return subprocess.run(["zstd", "-q", "-c"], input=data, check=True, stdout=subprocess.PIPE).stdout


def jsonl_seeds():
    lines = (SHARED / "tokenizer" / "conversations_public.jsonl").read_text().splitlines()
    chats = "\n".join(lines[:4]) + "\n"
    put("jsonl_rows", "chats.jsonl", chats)
    put("jsonl_rows", "chats.jsonl.gz", gzip.compress(chats.encode(), mtime=0))
    put("jsonl_rows", "chats.jsonl.zst", zstd(chats.encode()))
    shapes = [
        {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
        {"text": "plain text row \u00e9"},
        {"prompt": "What is 2+2?", "completion": "4"},
        {"prompt": [{"role": "user", "content": "Hi"}], "completion": [{"role": "assistant", "content": "Hello"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                      {"role": "assistant", "content": "<think>\nr\n</think>\n\na"}]},
        {"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "content": "{\"y\": 2}"}, {"role": "assistant", "content": "done"}]},
        {"messages": [{"role": "bot", "content": "unknown role"}]},
        {"text": 5},
    ]
    put("jsonl_rows", "shapes.jsonl", "\n".join(json.dumps(s, ensure_ascii=False) for s in shapes) + "\n\n  \r\n{bad\n")
    # TRL's preference shapes (--objective dpo): strings, conversations, the implicit prompt.
    pairs = [
        {"prompt": "What is 2 + 2?", "chosen": "4", "rejected": "5"},
        {"prompt": [{"role": "user", "content": "Name a colour."}],
         "chosen": [{"role": "assistant", "content": "Blue."}], "rejected": [{"role": "assistant", "content": "Seven."}]},
        {"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
         "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go away."}]},
        {"prompt": "x", "chosen": "", "rejected": "y<|im_end|>"},
    ]
    put("jsonl_rows", "preference.jsonl", "\n".join(json.dumps(s, ensure_ascii=False) for s in pairs) + "\n")


def config_seeds():
    for name, folder in [("tiny-qwen3", SHARED / "tiny-qwen3"), ("tiny-qwen3-untied", SHARED / "tiny-qwen3-untied"),
                         ("tiny-qwen2", ROOT / "tests/data/tiny-qwen2"), ("tiny-llama3", ROOT / "tests/data/tiny-llama3")]:
        put("model_config", f"{name}.json", (folder / "config.json").read_bytes())
    c = json.loads((SHARED / "tiny-qwen3" / "config.json").read_text())
    v4 = dict(c)  # transformers 4: rope_theta at the top level, rope_scaling beside it
    del v4["rope_parameters"]
    v4["rope_theta"] = 1e6
    v4["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                          "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16}
    put("model_config", "tiny-qwen3-v4-yarn.json", json.dumps(v4, indent=1))
    llama = json.loads((ROOT / "tests/data/tiny-llama3" / "config.json").read_text())
    llama.pop("head_dim", None)
    llama["rope_scaling"] = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}
    put("model_config", "tiny-llama3-v4-no-head-dim.json", json.dumps(llama, indent=1))


def checkpoint_seeds(anvil):
    """meta.json and anvil_config.toml of a real two-step run, its folders made relative."""
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda *a: subprocess.run([anvil, *a], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run("init", "--config", str(ROOT / "fuzz/fixtures/checkpoint/config.json"), "--out", f"{tmp}/model")
        run("train", "--model", f"{tmp}/model", "--tokenizer", str(ROOT / "fuzz/fixtures/chat"), "--data",
            str(ROOT / "data/demo/sums_heldout.jsonl"), "--device", "cpu", "--seq-len", "32", "--micro-batch", "2",
            "--steps", "1", "--save-every", "1", "--ckpt-dir", f"{tmp}/ckpt", "--data-cache", f"{tmp}/cache")
        relative = lambda text: text.replace(f"{tmp}/", "").replace(f"{ROOT}/", "")
        put("checkpoint_meta", "meta.json", relative((pathlib.Path(tmp) / "ckpt/step-1/meta.json").read_text()))
        put("toml_config", "anvil_config.toml", relative((pathlib.Path(tmp) / "ckpt/step-1/anvil_config.toml").read_text()))
    put("toml_config", "flags.toml", 'model = "m"\nseq_len = 2048\nlr = 2e-5\ndata = ["a.jsonl", "b.parquet"]\n'
                                     'no-shuffle = true\nmicro-batch = 4 # comment\n[extra]\nlr = 1\n')


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anvil", help="an anvil binary: also writes the checkpoint and settings seeds of a real run")
    a = p.parse_args()
    parquet_seeds()
    safetensors_seeds()
    tokenizer_seeds()
    chat_template_seeds()
    jsonl_seeds()
    config_seeds()
    if a.anvil:
        checkpoint_seeds(os.path.abspath(a.anvil))


if __name__ == "__main__":
    main()
