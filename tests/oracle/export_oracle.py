"""Export round-trip oracle for tests/test_export_oracle.cpp: transformers loads model folders
written by anvil (train --export, init) and computes their logits on the CPU.

usage: export_oracle.py TOKENS.safetensors FOLDER [FOLDER...]

For each folder: AutoModelForCausalLM.from_pretrained (no dtype given: the weights' own), which
must report no missing, unexpected or mismatched tensors; then the logits of input_ids from
TOKENS with the weights cast to float64 and to float32, written to FOLDER/oracle.safetensors
(logits64, logits32). Prints one JSON line per folder: {"folder", "dtype", "loading": {...}}.
A mixture-of-experts folder (Qwen3-MoE) runs its experts by transformers' eager loop: its
default grouped_mm takes no float64.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402


def main():
    torch.set_num_threads(1)
    ids = load_file(sys.argv[1])["input_ids"]
    for folder in sys.argv[2:]:
        moe = AutoConfig.from_pretrained(folder).model_type == "qwen3_moe"
        experts = {"experts_implementation": "eager"} if moe else {}
        model, info = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", output_loading_info=True,
                                                           **experts)
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
