"""Packed-documents oracle for tests/test_packed_attention.cpp: random small models of one
family (model_oracle.py's configs), batches whose sequences each hold several documents, and
transformers' float64 loss, logits and gradients of each document run alone.

usage: packed_oracle.py FAMILY COUNT SEED OUT_DIR
For case k it writes OUT_DIR/k/ with the model folder (as model_oracle.py), tokens.safetensors
(input_ids and position_ids I64 [B, T]: each token's position in its document, 0 at its first
token), wrapped.safetensors (the same input_ids only: every sequence one document) and
golden.safetensors: logits F64 [B, T, V], each document's logits in its place; loss F64 [1],
the mean over every document's targets (a token predicts the next of its own document only);
grad.<name> F64, the gradient of that mean. Each document runs alone through transformers
(eager attention, positions from 0), so the golden values know nothing of packing. The
documents' lengths include 1 (a document with no target); the first sequence of every case
holds two documents or more, the others sometimes one. Prints one line per case: its config and documents.
"""
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_oracle import make_model, run_cases  # noqa: E402


def document_lengths(seq, r, several):
    """Lengths of the documents that fill one sequence of `seq` tokens: two or more when
    `several`, else sometimes one."""
    if not several and r.random() < 0.3:
        return [seq]
    cuts = sorted(r.sample(range(1, seq), r.randint(1, min(5, seq - 1))))
    if r.random() < 0.5 and seq - cuts[-1] > 1:  # a document of one token at the end
        cuts.append(seq - 1)
    bounds = [0] + cuts + [seq]
    return [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]


def golden(out, ids, docs):
    """Logits, mean loss and gradients of every document alone, in float64."""
    m64 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager")
    targets = sum(n - 1 for row in docs for n in row)
    logits = torch.zeros(ids.shape[0], ids.shape[1], m64.config.vocab_size, dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64)
    for b, row in enumerate(docs):
        start = 0
        for n in row:
            doc = ids[b:b + 1, start:start + n]
            o = m64(input_ids=doc, labels=doc if n > 1 else None)
            logits[b, start:start + n] = o.logits[0].detach()
            if n > 1:
                part = o.loss * (n - 1) / targets  # the document's summed loss over every target
                part.backward()
                total += part.detach()
            start += n
    gold = {"loss": total.reshape(1), "logits": logits}
    gold.update({"grad." + n: p.grad.detach() for n, p in m64.named_parameters()})
    save_file({k: v.contiguous() for k, v in gold.items()}, f"{out}/golden.safetensors")


def make_case(family, cfg, r, out):
    make_model(family, cfg, r, out)
    batch, seq = r.randint(1, 3), r.randint(6, 64)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
    docs = [document_lengths(seq, r, b == 0) for b in range(batch)]
    positions = torch.tensor([[i for n in row for i in range(n)] for row in docs], dtype=torch.int64)
    save_file({"input_ids": ids, "position_ids": positions}, f"{out}/tokens.safetensors")
    save_file({"input_ids": ids}, f"{out}/wrapped.safetensors")
    golden(out, ids, docs)
    return docs


def main():
    run_cases(make_case, lambda docs: f"documents {docs}")


if __name__ == "__main__":
    main()
