"""Which FP8 format the recipe's gradients should take (ops/fp8_recipe.h): the relative L2
error of the whole model's gradient under each recipe with E4M3 and with E5M2 gradients,
against the same model's float64 gradient without FP8, averaged over batches.

usage: fp8_grad_format.py MODEL_DIR BATCHES
  MODEL_DIR: a Qwen3 folder (the tiny-qwen3 fixture); BATCHES: safetensors of batch0, batch1,
  ... I64 [B, T] (the fixture's golden_adamw.safetensors). Uses tests/oracle/fp8_oracle.py.
"""
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "oracle"))
import fp8_oracle  # noqa: E402


def gradient(model_dir, recipe, ids):
    model = fp8_oracle.Qwen3(model_dir, recipe)
    model.loss(ids).backward()
    return torch.cat([t.grad.flatten() for t in model.params.values()])


def main():
    model_dir, batches = sys.argv[1], load_file(sys.argv[2])
    keys = sorted(k for k in batches if k.startswith("batch"))
    for name in ("tensorwise", "rowwise"):
        for fmt in ("e4m3", "e5m2"):
            errors = []
            for k in keys:
                exact = gradient(model_dir, None, batches[k])
                fp8 = gradient(model_dir, fp8_oracle.Recipe(name, fmt), batches[k])
                errors.append(((fp8 - exact).norm() / exact.norm()).item())
            print(f"{name:10s} gradients {fmt}: relative L2 error {sum(errors) / len(errors):.4f} "
                  f"(min {min(errors):.4f}, max {max(errors):.4f}, {len(errors)} batches)")


if __name__ == "__main__":
    main()
