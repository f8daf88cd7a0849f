"""TRL's DPOTrainer dataset preparation as the oracle of anvil's preference rows
(tests/test_dpo_data.cpp): the ids TRL makes of each pair.

usage: dpo_data_oracle.py TOKENIZER_DIR IN.jsonl OUT.jsonl [MAX_LENGTH]

The rows (preference pairs: prompt, chosen and rejected as strings or conversations, or the
implicit-prompt form) go through DPOTrainer._prepare_dataset itself (extract_prompt, the EOS
appended to plain completions, tokenization, the completion split where the prompt's ids part).
Without MAX_LENGTH, no truncation (max_length None); one output line per row: {"prompt_ids",
"chosen_ids", "rejected_ids"}. The chosen sequence is prompt_ids + chosen_ids and its completion
mask covers chosen_ids (TRL's DataCollatorForPreference); the same for the rejected one.
With MAX_LENGTH (DPOConfig.max_length, truncation_mode "keep_start"): _prepare_dataset drops the
rows whose prompt alone holds MAX_LENGTH tokens, and TRL's DataCollatorForPreference cuts each
sequence of the others; one output line per row kept: {"row" (its index in IN.jsonl), "chosen",
"chosen_mask", "rejected", "rejected_mask"}, the collator's sequences and completion masks
without their padding.
"""
import json
import sys
import tempfile
import types

from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig
from trl.trainer.dpo_trainer import DataCollatorForPreference, DPOTrainer


def main():
    tokenizer_dir, src, dst = sys.argv[1:4]
    max_length = int(sys.argv[4]) if len(sys.argv) > 4 else None
    rows = [dict(json.loads(line), row=i) for i, line in enumerate(open(src, encoding="utf-8"))]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with tempfile.TemporaryDirectory() as out_dir:
        args = DPOConfig(output_dir=out_dir, report_to=[], max_length=max_length, use_cpu=True, bf16=False)
        # _prepare_dataset reads the tokenizer (for its eos token) from the trainer alone.
        trainer = types.SimpleNamespace(_tokenizer=tokenizer)
        prepared = DPOTrainer._prepare_dataset(trainer, Dataset.from_list(rows), tokenizer, args, "train")
        collate = DataCollatorForPreference(pad_token_id=0, max_length=max_length)
        with open(dst, "w", encoding="utf-8") as out:
            for example in prepared:
                if max_length is None:
                    line = {k: example[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}
                else:
                    batch = collate([{k: example[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")}])
                    line = {"row": example["row"]}
                    for i, name in enumerate(("chosen", "rejected")):
                        n = int(batch["attention_mask"][i].sum())
                        line[name] = batch["input_ids"][i][:n].tolist()
                        line[name + "_mask"] = batch["completion_mask"][i][:n].tolist()
                out.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
