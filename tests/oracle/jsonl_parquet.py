"""Writes the rows of a JSONL file as Parquet with pyarrow's defaults (strings as strings, lists of
messages as lists of structs), for the tests that read the same rows from both.

usage: jsonl_parquet.py IN.jsonl OUT.parquet
"""
import json
import sys

import pyarrow as pa
import pyarrow.parquet as pq

rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
pq.write_table(pa.Table.from_pylist(rows), sys.argv[2])
