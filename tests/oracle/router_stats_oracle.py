"""Router statistics oracle for tests/test_router_stats.cpp: transformers' routing of a
Qwen3-MoE model folder on the rows of a blocks file, in float64 on the CPU.

usage: router_stats_oracle.py MODEL_DIR BLOCKS OUT_JSON
The forward of every row of BLOCKS (input_ids I64 [rows, T]) as one batch, with
output_router_logits: per sparse layer, each expert's count of the tokens' top-k choices
(torch.topk of the softmax, as Qwen3MoeTopKRouter picks them); transformers' aux_loss
(load_balancing_loss_func, before router_aux_loss_coef); and the smallest gap between a
token's k-th and (k+1)-th router logit (below float32's error, the count is no fair test).
Writes {"counts": [[...] per sparse layer], "aux_loss": x, "min_gap": g}.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def main(model_dir, blocks, out):
    ids = load_file(blocks)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager",
                                                 experts_implementation="eager")
    top_k, experts = model.config.num_experts_per_tok, model.config.num_experts
    with torch.no_grad():
        o = model(input_ids=ids, output_router_logits=True)
    counts, gap = [], float("inf")
    for logits in o.router_logits:
        probs = torch.softmax(logits, dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices
        counts.append(torch.bincount(chosen.reshape(-1), minlength=experts).tolist())
        if experts > top_k:
            v = logits.sort(dim=-1, descending=True).values
            gap = min(gap, float((v[:, top_k - 1] - v[:, top_k]).min()))
    with open(out, "w") as f:
        json.dump({"counts": counts, "aux_loss": float(o.aux_loss), "min_gap": gap}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
