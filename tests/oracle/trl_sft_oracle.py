"""TRL's SFTTrainer dataset preparation as the oracle of anvil's row shapes
(tests/test_data_shapes.cpp): the ids and labels TRL makes of each row.

usage: trl_sft_oracle.py MODEL_DIR TOKENIZER_DIR IN.jsonl OUT.jsonl

The rows (prompt-completion, plain or conversational) go through
SFTTrainer's own preparation (EOS on plain completions, tokenization),
without packing; one output line per row: {"input_ids": [...], "labels": [...]} (labels:
-100 where no loss is taken, present when TRL builds them: prompt-completion rows).
"""
import json
import sys
import tempfile

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer


def main():
    model_dir, tokenizer_dir, src, dst = sys.argv[1:5]
    rows = [json.loads(line) for line in open(src, encoding="utf-8")]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as out_dir:
        args = SFTConfig(output_dir=out_dir, report_to=[], completion_only_loss=True, max_length=None,
                         use_cpu=True, bf16=False)
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
        prepared = trainer.train_dataset
        with open(dst, "w", encoding="utf-8") as out:
            for example in prepared:
                result = {"input_ids": example["input_ids"]}
                if "labels" in example:
                    result["labels"] = example["labels"]
                out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
