"""Long-context oracle for tests/test_long_context.cpp: two small Qwen3 model folders with
transformers' float64 loss, logits and every parameter gradient on the CPU (eager attention),
as model_oracle.py writes them.

usage: long_context_oracle.py SEQ OUT_DIR
OUT_DIR/long: rope_theta 1e6, one sequence of SEQ tokens (RoPE and attention at long
positions; the MLP tiled by the test). OUT_DIR/yarn: YaRN RoPE scaling (rope_parameters
rope_type "yarn", factor 4 over an original context of 64, beta_fast 16, beta_slow 2, and
attention_factor inferred from mscale and mscale_all_dim), two sequences of 200 tokens, so
that positions run past the original context. Prints one line per folder with its config.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from model_oracle import make_model, write_golden  # noqa: E402


def base_config():
    return {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False, "max_position_embeddings": 8192, "initializer_range": 0.05,
            "use_cache": False, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}


def main():
    seq, out_dir = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(2)
    r = random.Random(20261201)
    long_cfg = base_config()
    yarn_cfg = dict(base_config(), max_position_embeddings=256, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.5})
    for name, cfg, shape in (("long", long_cfg, (1, seq)), ("yarn", yarn_cfg, (2, 200))):
        out = os.path.join(out_dir, name)
        make_model("qwen3", cfg, r, out)
        write_golden(out, torch.randint(0, cfg["vocab_size"], shape))
        print(f"{name}: B={shape[0]} T={shape[1]} " + json.dumps(cfg, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
