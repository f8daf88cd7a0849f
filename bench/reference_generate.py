"""transformers' generate on the folder and prompt of the generate_bench experiment: bf16, sdpa,
greedy, with the dynamic cache and the static cache. Decode tokens/s is measured as
(new_tokens - 1) over the time of generate(new_tokens) minus generate(1) (the prefill and
first token), after a warm-up. Prints one JSON object {setting: tokens/s}.

usage: python generate_reference.py MODEL_DIR PROMPT.jsonl NEW_TOKENS
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def timed(model, ids, new, **kw):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new, pad_token_id=0, **kw)
    torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + new
    return time.perf_counter() - t


def main():
    model_dir, prompt, new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ids = torch.tensor([json.loads(open(prompt).readline())["input_ids"]], device="cuda")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    model.eval()
    result = {}
    for name, kw in (("dynamic cache", {}), ("static cache", {"cache_implementation": "static"})):
        with torch.no_grad():
            timed(model, ids, 8, **kw)  # warm-up
            first = min(timed(model, ids, 1, **kw) for _ in range(2))
            full = min(timed(model, ids, new, **kw) for _ in range(2))
        result[name] = (new - 1) / (full - first)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
