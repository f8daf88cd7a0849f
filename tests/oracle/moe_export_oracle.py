"""Export round-trip oracle of Qwen3-MoE for tests/test_moe_oracle.cpp: transformers loads
model folders that anvil wrote (train --export, init) and computes their logits on the CPU.

usage: moe_export_oracle.py TOKENS.safetensors FOLDER [FOLDER...]

As export_oracle.py, with the experts run by transformers' eager loop (its default grouped_mm
takes no float64): for each folder, AutoModelForCausalLM.from_pretrained must report no
missing, unexpected or mismatched tensors; the logits of TOKENS' input_ids with the weights in
float64 and in float32 go to FOLDER/oracle.safetensors (logits64, logits32). Prints one JSON
line per folder: {"folder", "dtype", "loading": {...}}.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def main():
    torch.set_num_threads(1)
    ids = load_file(sys.argv[1])["input_ids"]
    for folder in sys.argv[2:]:
        model, info = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager",
                                                           experts_implementation="eager", output_loading_info=True)
        dtype = str(next(model.parameters()).dtype)
        out = {}
        with torch.no_grad():
            for name, dt in (("logits64", torch.float64), ("logits32", torch.float32)):
                out[name] = model.to(dt)(input_ids=ids).logits.contiguous()
        save_file(out, os.path.join(folder, "oracle.safetensors"))
        loading = {k: sorted(map(str, v)) for k, v in info.items() if v}
        print(json.dumps({"folder": folder, "dtype": dtype, "loading": loading}), flush=True)


if __name__ == "__main__":
    main()
