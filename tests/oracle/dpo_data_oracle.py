"""TRL's DPOTrainer dataset preparation as the oracle of anvil's preference rows
(tests/test_dpo_data.cpp): the ids TRL makes of each pair.

usage: dpo_data_oracle.py TOKENIZER_DIR IN.jsonl OUT.jsonl

The rows (preference pairs: prompt, chosen and rejected as strings or conversations, or the
implicit-prompt form) go through DPOTrainer._prepare_dataset itself (extract_prompt, the EOS
appended to plain completions, tokenization, the completion split where the prompt's ids part),
with no truncation (max_length None); one output line per row: {"prompt_ids", "chosen_ids",
"rejected_ids"}. The chosen sequence is prompt_ids + chosen_ids and its completion mask covers
chosen_ids (TRL's DataCollatorForPreference); the same for the rejected one.
"""
import json
import sys
import tempfile
import types

from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig
from trl.trainer.dpo_trainer import DPOTrainer


def main():
    tokenizer_dir, src, dst = sys.argv[1:4]
    rows = [json.loads(line) for line in open(src, encoding="utf-8")]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with tempfile.TemporaryDirectory() as out_dir:
        args = DPOConfig(output_dir=out_dir, report_to=[], max_length=None, use_cpu=True, bf16=False)
        # _prepare_dataset reads the tokenizer (for its eos token) from the trainer alone.
        trainer = types.SimpleNamespace(_tokenizer=tokenizer)
        prepared = DPOTrainer._prepare_dataset(trainer, Dataset.from_list(rows), tokenizer, args, "train")
        with open(dst, "w", encoding="utf-8") as out:
            for example in prepared:
                out.write(json.dumps({k: example[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}) + "\n")


if __name__ == "__main__":
    main()
