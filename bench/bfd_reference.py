"""A small PyTorch reference of training on bfd-packed blocks: transformers on the blocks of an
anvil packed.bin (format v2, --packing bfd or bfd-split) in file order, one block per step,
each token attending only to its own document and its RoPE positions restarting at 0.

The documents come from the file's document table; position_ids restart at each document and
at the padding (one more document), and with attention_mask=None transformers reads the
packed sequences from position_ids and masks attention per document (masking_utils'
find_packed_sequence_indices), as TRL's padding-free training does. Labels: the file's (or
the ids), -100 on padding and on each document's first token, so the last token of one
document never predicts the first of the next (what anvil's targets skip). The loop is
ref_train.py's: fp32 weights, bf16 autocast, AdamW (weight decay 0), clip 1.0, constant
learning rate. Writes every step's loss as a JSON list.

Usage: python bfd_reference.py MODEL_DIR PACKED_DIR STEPS LR LOSSES.json
"""
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a smoke test


def read_packed(path):
    raw = open(path + "/packed.bin", "rb").read()
    h = json.loads(raw[16:16 + int.from_bytes(raw[8:16], "little")])
    assert h["format"] == "anvil-packed-v2", "a bfd or bfd-split file (anvil prepare --packing bfd-split)"
    n, seq, stride = h["num_blocks"], h["seq_len"], h["block_stride"]
    blocks = np.frombuffer(raw, np.int32, n * stride, h["data_offset"]).reshape(n, stride)
    first = np.frombuffer(raw, np.int64, n + 1, h["documents_offset"])
    lengths = np.frombuffer(raw, np.int32, h["documents"], h["documents_offset"] + 8 * (n + 1))
    return h, blocks[:, :seq], blocks[:, seq:] if h["has_labels"] else blocks[:, :seq], first, lengths


def block_tensors(ids, labels, docs):
    seq = len(ids)
    positions, labels = np.zeros(seq, np.int64), labels.astype(np.int64).copy()
    at = 0
    for n in list(docs) + [seq - int(np.sum(docs))]:
        positions[at:at + n] = np.arange(n)
        if n > 0:
            labels[at] = -100
        at += n
    labels[int(np.sum(docs)):] = -100
    return [torch.tensor(a[None]).to(DEVICE) for a in (ids.astype(np.int64), positions, labels)]


def main():
    model_dir, packed, steps, lr, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    h, ids, labels, first, lengths = read_packed(packed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, use_cache=False).to(DEVICE)
    model.gradient_checkpointing_enable()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for step in range(steps):
        b = step % h["num_blocks"]
        x, pos, y = block_tensors(ids[b], labels[b], lengths[first[b]:first[b + 1]])
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = model(input_ids=x, position_ids=pos, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    json.dump(losses, open(out, "w"))
    print("bfd reference: %d steps, loss %.4f -> %.4f" % (steps, losses[0], losses[-1]))


main()
