"""Writes the Parquet fixtures of tests/test_data_parquet.cpp with pyarrow, and beside each
NAME.parquet the rows as pyarrow reads them back, NAME.expected.jsonl: the oracle.

Usage: python parquet_fixtures.py CONVERSATIONS.jsonl OUT_DIR

The rows: real chats, then edge cases (null messages, an empty list, a null message, null
role or content, non-ASCII text, long content spanning pages). Variants: every codec,
dictionary on and off (and a dictionary that falls back to PLAIN), data pages v1 and v2,
the DELTA string encodings, row groups of 7 rows, small pages, extra columns and fields
(ignored), pyarrow's non-compliant list naming, large list and string types, a text
dataset, an empty file.
"""
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

convs, out = sys.argv[1], sys.argv[2]
chats = [json.loads(line) for line in open(convs, encoding="utf-8") if line.strip()]
edge = [
    {"messages": None},
    {"messages": []},
    {"messages": [{"role": "user", "content": "hello"}, None]},
    {"messages": [{"role": "user", "content": None}, {"role": "assistant", "content": "ok"}]},
    {"messages": [{"role": None, "content": "no role"}]},
    {"messages": [{"role": "user", "content": "Grüße, 世界! 🙂 e\u0301 — ½"},
                  {"role": "assistant", "content": "Привет. ありがとう。 \U0001F680"}]},
    {"messages": [{"role": "user", "content": "long " * 400},
                  {"role": "assistant", "content": "".join(chr(0x4E00 + i % 500) for i in range(1500))}]},
]
rows = chats + edge + chats[:5]
message = pa.struct([("role", pa.string()), ("content", pa.string()), ("name", pa.string())])
schema = pa.schema([("id", pa.int64()), ("messages", pa.list_(message)), ("source", pa.string())])
for i, r in enumerate(rows):
    r["id"] = i
    r["source"] = None if i % 3 == 0 else "src-%d" % (i % 4)
    for m in r["messages"] or []:
        if m is not None:
            m["name"] = None if i % 2 else "n%d" % i
table = pa.Table.from_pylist(rows, schema=schema)

texts = ["plain text row %d " % i + "word " * (i % 50) for i in range(30)]
texts[3] = None
texts[7] = "Ünïcödé ✓ 中文 🙂"
texts[11] = ""
text_table = pa.table({"text": pa.array(texts, pa.string()), "n": pa.array(range(30), pa.int32())})

ROLE, CONTENT = "messages.list.element.role", "messages.list.element.content"


def write(name, t, **kw):
    path = "%s/%s.parquet" % (out, name)
    kw.setdefault("row_group_size", 7)
    kw.setdefault("data_page_size", 512)
    pq.write_table(t, path, **kw)
    with open("%s/%s.expected.jsonl" % (out, name), "w", encoding="utf-8") as f:
        for r in pq.read_table(path).to_pylist():
            keep = {}
            for k in ("messages", "text"):  # what anvil reads, in the file's column order
                if k in r:
                    v = r[k]
                    if k == "messages" and v is not None:
                        v = [None if m is None else {f: m[f] for f in m if f in ("role", "content")} for m in v]
                    keep[k] = v
            f.write(json.dumps(keep, ensure_ascii=False) + "\n")


for codec in ("none", "snappy", "gzip", "zstd"):
    for dictionary in (True, False):
        for version in ("1.0", "2.0"):
            name = "chats-%s-%s-v%s" % (codec, "dict" if dictionary else "plain", version[0])
            write(name, table, compression=codec, use_dictionary=dictionary, data_page_version=version)
for enc in ("DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"):
    for version in ("1.0", "2.0"):
        write("chats-%s-v%s" % (enc.lower(), version[0]), table, compression="snappy", use_dictionary=False,
              column_encoding={ROLE: enc, CONTENT: enc, "source": enc}, data_page_version=version)
write("chats-dict-fallback", table, compression="zstd", dictionary_pagesize_limit=64)
write("chats-one-group", table, compression="snappy", row_group_size=1 << 20, data_page_size=1 << 20)
write("chats-item-naming", table, compression="gzip", use_compliant_nested_type=False)
# Large list and string types, the fields in the other order (as trl-lib/Capybara has them).
swapped = [{**r, "messages": None if r["messages"] is None else
            [None if m is None else {"content": m["content"], "role": m["role"]} for m in r["messages"]]}
           for r in table.to_pylist()]
large = pa.schema([("id", pa.int64()), ("messages", pa.large_list(pa.struct(
    [("content", pa.large_string()), ("role", pa.large_string())]))), ("source", pa.large_string())])
write("chats-large-types", pa.Table.from_pylist(swapped, schema=large), compression="zstd")
for version in ("1.0", "2.0"):
    write("text-v%s" % version[0], text_table, compression="zstd", data_page_version=version)
write("text-delta", text_table, compression="none", use_dictionary=False,
      column_encoding={"text": "DELTA_BYTE_ARRAY"})
write("empty", table.slice(0, 0), compression="snappy")
