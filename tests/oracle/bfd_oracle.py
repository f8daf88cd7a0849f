"""TRL's packing of text rows, the oracle of anvil's bfd and bfd-split bins (tests/test_data_bfd.cpp).

Usage: python bfd_oracle.py TOKENIZER_DIR CASES.json

CASES.json: a list of {"rows": ROWS.jsonl, "seq_len": N, "strategy": "bfd" | "bfd_split",
"out": OUT.jsonl} (one process for them all: importing TRL takes long). Each row
{"text": ...} is tokenized as anvil tokenizes it (tokenizers, no added special tokens), the
rows are packed by trl.pack_dataset(..., strategy=STRATEGY) (its defaults: datasets' batched
map of 1000 rows), and each packed sequence is written as one line: its input_ids,
seq_lengths (the documents' lengths) and position_ids as TRL's collator makes them from
seq_lengths.
"""
import json
import sys

from datasets import Dataset
from tokenizers import Tokenizer
from trl import pack_dataset
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling


def pack(rows_path, seq_len, strategy, out_path):
    rows = [json.loads(line) for line in open(rows_path, encoding="utf-8") if line.strip()]
    ids = [tokenizer.encode(r["text"], add_special_tokens=False).ids for r in rows]
    packed = pack_dataset(Dataset.from_dict({"input_ids": ids}), seq_len, strategy=strategy)
    with open(out_path, "w", encoding="utf-8") as out:
        for seq in packed:
            lengths = [seq["seq_lengths"]]
            positions = DataCollatorForLanguageModeling.get_position_ids_from_packed_seq_lengths(lengths)[0]
            out.write(json.dumps({"input_ids": seq["input_ids"], "seq_lengths": seq["seq_lengths"],
                                  "position_ids": positions.tolist()}) + "\n")


tokenizer = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
for case in json.load(open(sys.argv[2], encoding="utf-8")):
    pack(case["rows"], case["seq_len"], case["strategy"], case["out"])
