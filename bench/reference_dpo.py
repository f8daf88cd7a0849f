"""TRL's DPOTrainer on one GPU, the trainer `anvil train --objective dpo` is compared with.

Its best settings without flash-attn: the reference log-probs precomputed before training
(precompute_ref_log_probs, no reference model held), bf16 autocast over fp32 weights (bf16=True),
PyTorch's SDPA attention (the fastest transformers has without the flash-attn package), fused
AdamW (optim adamw_torch_fused), gradient checkpointing unless --no-gc. The rest as anvil's run:
a constant learning rate, no warm-up, no weight decay, the gradient norm clipped to 1.0, TRL's
sigmoid loss with --beta, --batch pairs a step (x --accum), sequences of at most --max-length
tokens, the rows in file order (train_sampling_strategy "sequential").

The model is a Hugging Face folder holding its tokenizer; the data a JSONL of TRL's preference
rows. One JSON line on stdout: pairs_per_s and tokens_per_s (the completions' sequences' real
tokens, prompt included) over the steps after --warmup, peak_allocated_gib and
peak_reserved_gib of the training (the reference pass's peak apart), ref_precompute_s (the
reference pass), and every step's loss, logps/chosen and rewards/accuracies.

    python bench/reference_dpo.py --model DIR --data pairs.jsonl --steps 60 --lr 1e-6
"""
import argparse
import json
import os
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import DPOConfig, DPOTrainer


class Timed(DPOTrainer):
    """DPOTrainer with its reference pass timed (it runs inside __init__)."""

    ref_precompute_s = 0.0

    def _precompute_ref_logps(self, dataset, name, batch_size):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = super()._precompute_ref_logps(dataset, name, batch_size)
        torch.cuda.synchronize()
        Timed.ref_precompute_s += time.perf_counter() - start
        Timed.ref_peak_gib = torch.cuda.max_memory_allocated() / 2**30
        return out


class Record(TrainerCallback):
    """Each step's end time (after a synchronize) and its logged loss and metrics."""

    def __init__(self):
        self.ends, self.logs = [], []

    def on_train_begin(self, args, state, control, **kw):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        torch.cuda.synchronize()
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.logs.append(dict(logs, step=state.global_step))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a Hugging Face model folder with its tokenizer")
    ap.add_argument("--data", required=True, help="JSONL of preference rows (prompt/chosen/rejected)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the timing")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=4, help="pairs per micro-batch")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    ap.add_argument("--max-length", type=int, default=2048)
    ap.add_argument("--ref-batch", type=int, default=8, help="pairs per batch of the reference pass")
    ap.add_argument("--no-gc", action="store_true", help="no gradient checkpointing")
    a = ap.parse_args()

    with open(a.data) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa").cuda()
    record = Record()
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(
            output_dir=tmp, report_to=[], save_strategy="no", logging_steps=1, max_steps=a.steps,
            per_device_train_batch_size=a.batch, gradient_accumulation_steps=a.accum, learning_rate=a.lr,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
            optim="adamw_torch_fused", bf16=True, gradient_checkpointing=not a.no_gc, max_length=a.max_length,
            beta=a.beta, loss_type=["sigmoid"], precompute_ref_log_probs=True, precompute_ref_batch_size=a.ref_batch,
            train_sampling_strategy="sequential", dataloader_drop_last=True, disable_tqdm=True, seed=0)
        trainer = Timed(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                        callbacks=[record])
        trainer.train()

    ends, w = record.ends, min(a.warmup, a.steps - 1)
    pairs_step = a.batch * a.accum
    seconds = ends[-1] - ends[w - 1] if w > 0 else ends[-1] - record.start
    ds = trainer.train_dataset  # tokenized: prompt_ids, chosen_ids, rejected_ids
    tokens = sum(2 * len(ds[k]["prompt_ids"]) + len(ds[k]["chosen_ids"]) + len(ds[k]["rejected_ids"])
                 for k in range(w * pairs_step, len(ends) * pairs_step))
    by_step = {r["step"]: r for r in record.logs}
    steps = sorted(by_step)
    result = {
        "trainer": "trl DPOTrainer", "trl": __import__("trl").__version__, "attention": "sdpa",
        "gradient_checkpointing": not a.no_gc, "micro_batch": a.batch, "grad_accum": a.accum,
        "steps": len(ends), "timed_steps": len(ends) - w,
        "pairs_per_s": (len(ends) - w) * pairs_step / seconds, "tokens_per_s": tokens / seconds,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
        "ref_precompute_s": Timed.ref_precompute_s, "ref_peak_allocated_gib": getattr(Timed, "ref_peak_gib", None),
        "losses": [by_step[s]["loss"] for s in steps],
        "logps_chosen": [by_step[s].get("logps/chosen") for s in steps],
        "rewards_accuracies": [by_step[s].get("rewards/accuracies") for s in steps],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
