"""TRL's DPOTrainer as the oracle of `anvil grad --objective dpo` (tests/test_dpo_oracle.cpp).

usage: dpo_oracle.py MODEL_DIR TOKENIZER_DIR OUT_DIR SEED LOSS BETA LABEL_SMOOTHING

Random preference pairs (prompt, chosen and rejected token ids drawn from SEED) on the model of
MODEL_DIR in float64 on the CPU (eager attention):
 1. the policy's log-probs of each completion with transformers alone (log_softmax of the
    logits, summed over the completion's tokens): logps_chosen, logps_rejected;
 2. reference log-probs: those plus noise drawn from SEED (so the loss is away from its value at
    the reference), "precomputed" as TRL's precompute_ref_log_probs makes them;
 3. a DPOTrainer (DPOConfig(loss_type=[LOSS], beta, label_smoothing), precompute_ref_log_probs
    set on the trainer so that compute_loss reads the batch's reference log-probs), the batch
    made by its own collator (DataCollatorForPreference) from the pairs' prompt_ids,
    chosen_ids, rejected_ids and reference log-probs; trainer.compute_loss(model, batch), then
    backward: loss and every parameter's gradient.
Writes OUT_DIR/golden.safetensors (loss, logps_chosen, logps_rejected, grad.<name>, F64) and
OUT_DIR/tokens.safetensors, anvil's layout of the same batch: row k holds pair k's chosen
sequence (prompt + chosen) then its rejected one as two documents (position_ids), then padding
as one more; labels -100 outside the completions; ref_chosen_logps, ref_rejected_logps F64.
"""
import random
import sys
import tempfile

import torch
from datasets import Dataset
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer


def completion_logps(model, seqs, starts):
    """Summed log-probs of tokens starts[k].. of each sequence, each run alone (float64)."""
    out = []
    with torch.no_grad():
        for ids, start in zip(seqs, starts):
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            logp = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
            out.append(logp[start - 1:].sum().item())
    return out


def main():
    model_dir, tok_dir, out_dir = sys.argv[1:4]
    seed, loss_type, beta, smoothing = int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
    torch.set_num_threads(1)
    r = random.Random(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    vocab = model.config.vocab_size
    pairs = []
    for _ in range(3):
        prompt = [r.randrange(vocab) for _ in range(r.randint(2, 7))]
        pairs.append({"prompt_ids": prompt, "chosen_ids": [r.randrange(vocab) for _ in range(r.randint(1, 6))],
                      "rejected_ids": [r.randrange(vocab) for _ in range(r.randint(1, 6))]})
    starts = [len(p["prompt_ids"]) for p in pairs]
    chosen = completion_logps(model, [p["prompt_ids"] + p["chosen_ids"] for p in pairs], starts)
    rejected = completion_logps(model, [p["prompt_ids"] + p["rejected_ids"] for p in pairs], starts)
    for p, c, rj in zip(pairs, chosen, rejected):
        p["ref_chosen_logps"] = c + r.gauss(0, 1.0)
        p["ref_rejected_logps"] = rj + r.gauss(0, 1.0)

    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(0)  # padding inside the tiny model's vocabulary
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False, max_length=None,
                         loss_type=[loss_type], beta=beta, label_smoothing=smoothing)
        # The trainer's own data set is a placeholder: the batch is made from the pairs above.
        placeholder = Dataset.from_list([{"prompt": "a", "chosen": " b", "rejected": " c"}])
        trainer = DPOTrainer(model=model, args=args, train_dataset=placeholder, processing_class=tokenizer)
        trainer.precompute_ref_logps = True  # compute_loss reads the batch's reference log-probs
        batch = trainer.data_collator(pairs)
        model.train()
        loss = trainer.compute_loss(model, batch)
        loss.backward()
    gold = {"loss": loss.detach().reshape(1).double(), "logps_chosen": torch.tensor(chosen, dtype=torch.float64),
            "logps_rejected": torch.tensor(rejected, dtype=torch.float64)}
    gold.update({"grad." + n: p.grad.detach() for n, p in model.named_parameters()})
    save_file({k: v.contiguous() for k, v in gold.items()}, f"{out_dir}/golden.safetensors")

    seqs = [(p["prompt_ids"] + p["chosen_ids"], p["prompt_ids"] + p["rejected_ids"], len(p["prompt_ids"]))
            for p in pairs]
    T = max(len(c) + len(rj) for c, rj, _ in seqs) + 3
    ids, pos, labels = [], [], []
    for c, rj, start in seqs:
        pad = T - len(c) - len(rj)
        ids.append(c + rj + [0] * pad)
        pos.append(list(range(len(c))) + list(range(len(rj))) + list(range(pad)))
        labels.append([-100] * start + c[start:] + [-100] * start + rj[start:] + [-100] * pad)
    save_file({"input_ids": torch.tensor(ids), "position_ids": torch.tensor(pos), "labels": torch.tensor(labels),
               "ref_chosen_logps": torch.tensor([p["ref_chosen_logps"] for p in pairs], dtype=torch.float64),
               "ref_rejected_logps": torch.tensor([p["ref_rejected_logps"] for p in pairs], dtype=torch.float64)},
              f"{out_dir}/tokens.safetensors")
    print(f"{loss_type} beta {beta} label_smoothing {smoothing}: loss {loss.item():.9g}, pairs {len(pairs)}, T {T}")


if __name__ == "__main__":
    main()
