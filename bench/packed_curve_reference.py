"""The PyTorch reference of the packed_curve experiment: transformers trained on the bins of an
anvil packed file (anvil prepare --packing bfd or bfd-split), block after block in file order,
one block per step, as bench/reference_train.py trains (fp32 weights, bf16 autocast, AdamW
without weight decay, gradient norm clipped to 1.0, constant learning rate).

Each block's documents come from the file's document table; a block's tokens after its last
document are padding, one more document whose labels are -100. Attention is per document
(SDPA with a block-diagonal causal mask: token i sees the earlier tokens of its own
document), position_ids restart at 0 at each document, and a document's first token is no
target (labels -100 there: the last token of one document never predicts the next's first),
which is what anvil does with the same file.

usage: packed_curve_reference.py --model DIR --blocks DIR|packed.bin --steps N --lr LR --losses OUT.json
                                [--device cuda] [--fp32]
Prints the first and last losses; writes every step's loss as JSON to --losses.
"""
import argparse
import json
import os
import struct

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def read_packed(path):
    """The header, the blocks (num_blocks, stride) int32 and each block's document lengths."""
    if os.path.isdir(path):
        path = os.path.join(path, "packed.bin")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(raw[:8]) != b"ANVILPK1":
        raise SystemExit(f"{path}: not an anvil packed file")
    (header_len,) = struct.unpack("<Q", bytes(raw[8:16]))
    h = json.loads(bytes(raw[16:16 + header_len]))
    if "documents_offset" not in h:
        raise SystemExit(f"{path}: packed '{h.get('packing', 'wrapped')}', not bfd or bfd-split: prepare it again")
    n, stride = h["num_blocks"], h["block_stride"]
    blocks = np.frombuffer(raw, dtype=np.int32, count=n * stride, offset=h["data_offset"]).reshape(n, stride)
    at = h["documents_offset"]
    first = np.frombuffer(raw, dtype=np.int64, count=n + 1, offset=at)
    lengths = np.frombuffer(raw, dtype=np.int32, count=h["documents"], offset=at + (n + 1) * 8)
    docs = [lengths[first[b]:first[b + 1]].tolist() for b in range(n)]
    return h, blocks, docs


def block_inputs(h, row, docs, device):
    """input_ids, position_ids, labels and the (1, 1, T, T) mask of one block."""
    seq = h["seq_len"]
    ids = torch.from_numpy(row[:seq].astype(np.int64))
    labels = torch.from_numpy(row[seq:2 * seq].astype(np.int64)) if h["has_labels"] else ids.clone()
    pad = seq - sum(docs)
    lengths = docs + ([pad] if pad else [])
    pos = torch.cat([torch.arange(n) for n in lengths])
    doc = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    if pad:
        labels[seq - pad:] = -100
    labels[pos == 0] = -100
    mask = (doc[:, None] == doc[None, :]) & torch.tril(torch.ones(seq, seq, dtype=torch.bool))
    return (ids[None].to(device), pos[None].to(device), labels[None].to(device), mask[None, None].to(device))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--blocks", required=True)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--losses", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast (to check against anvil on the CPU)")
    args = p.parse_args()
    device = torch.device(args.device)
    h, blocks, docs = read_packed(args.blocks)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa",
                                                 use_cache=False).to(device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    losses = []
    for step in range(args.steps):
        b = step % len(docs)
        ids, pos, labels, mask = block_inputs(h, blocks[b], docs[b], device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=not args.fp32):
            loss = model(input_ids=ids, position_ids=pos, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    print("reference: %d blocks of %d (%s), loss %.4f -> %.4f over %d steps"
          % (len(docs), h["seq_len"], h["packing"], losses[0], losses[-1], len(losses)))
    with open(args.losses, "w") as f:
        json.dump(losses, f)


if __name__ == "__main__":
    main()
