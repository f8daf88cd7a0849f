"""Model parity oracle for tests/test_model_oracle.cpp: random small models of one family,
their float64 loss, logits and every parameter gradient from transformers on the CPU.

usage: model_oracle.py FAMILY COUNT SEED OUT_DIR
FAMILY: qwen3 | qwen2 | llama. For case k it writes OUT_DIR/k/ with a Hugging Face model
folder (config.json, model.safetensors in float32), tokens.safetensors (input_ids I64 [B, T])
and golden.safetensors (loss F64 [1], logits F64 [B, T, V], grad.<name> F64: the float32
weights computed in float64, eager attention, labels = input_ids), and prints one line per
case describing its config.

The configs: head_dim 16-128, 1-8 query heads per key/value head, tied or untied embeddings,
odd vocabulary, hidden and intermediate sizes, 1-3 layers; qwen2 has q/k/v biases, llama has
llama3 RoPE scaling. Norm weights and biases are drawn away from 1 and 0, so that a model that
ignored them would show.
"""
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402


def random_config(family, r):
    kv = r.choice([1, 1, 2, 3])
    ratio = r.choice([1, 2, 3, 4, 8])
    cfg = {
        "vocab_size": r.randrange(50, 700) | 1,
        "hidden_size": r.randrange(24, 160),
        "intermediate_size": r.randrange(17, 200) | 1,
        "num_hidden_layers": r.randint(1, 3),
        "num_attention_heads": kv * ratio,
        "num_key_value_heads": kv,
        "head_dim": r.choice([16, 24, 32, 48, 64, 80, 96, 128]),
        "rms_norm_eps": r.choice([1e-6, 1e-5]),
        "tie_word_embeddings": r.random() < 0.5,
        "max_position_embeddings": 512,
        "initializer_range": 0.05,
        "use_cache": False,
    }
    if family != "qwen3":  # transformers asks hidden_size to be a multiple of the head count here
        cfg["hidden_size"] = cfg["num_attention_heads"] * r.randint(3, 24)
    theta = r.choice([10000.0, 500000.0, 1000000.0])
    if family == "llama":
        cfg["rope_parameters"] = {
            "rope_type": "llama3", "rope_theta": theta, "factor": r.choice([2.0, 8.0, 32.0]),
            "low_freq_factor": r.choice([1.0, 2.0]), "high_freq_factor": r.choice([4.0, 8.0]),
            "original_max_position_embeddings": r.choice([16, 64, 256])}
    else:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    return cfg


def make_model(family, cfg, r, out):
    """The model folder of one config: random weights, norms and biases away from 1 and 0."""
    torch.manual_seed(r.randrange(1 << 30))
    config = AutoConfig.for_model(family, **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
            if n.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape))
    model.save_pretrained(out, safe_serialization=True)


def write_golden(out, ids):
    """tokens.safetensors and golden.safetensors of the model folder `out` on input_ids `ids`."""
    save_file({"input_ids": ids}, f"{out}/tokens.safetensors")
    m64 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager")
    o = m64(input_ids=ids, labels=ids)
    o.loss.backward()
    gold = {"loss": o.loss.detach().reshape(1), "logits": o.logits.detach()}
    gold.update({"grad." + n: p.grad.detach() for n, p in m64.named_parameters()})
    save_file({k: v.contiguous() for k, v in gold.items()}, f"{out}/golden.safetensors")


def make_case(family, cfg, r, out):
    make_model(family, cfg, r, out)
    batch, seq = r.randint(1, 3), r.randint(3, 48)
    write_golden(out, torch.randint(0, cfg["vocab_size"], (batch, seq)))
    return batch, seq


def run_cases(make, describe):
    """An oracle's main: FAMILY COUNT SEED OUT_DIR from the command line, make(family, cfg, r,
    out) for each case's folder, and one line per case: describe(what make returned), the config."""
    family, count, seed, out_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    r = random.Random(seed)
    for k in range(count):
        cfg = random_config(family, r)
        made = make(family, cfg, r, os.path.join(out_dir, str(k)))
        print(f"case {k}: {family} {describe(made)} " + json.dumps(cfg, sort_keys=True), flush=True)


def main():
    run_cases(make_case, lambda made: "B=%d T=%d" % made)


if __name__ == "__main__":
    main()
