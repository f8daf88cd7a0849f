"""Greedy continuations of the tiny golden models by transformers' generate, for
tests/test_generate.cpp.

For each model folder, a few prompts of random token ids (lengths 1 to 70, so the llama3
fixture's RoPE scaling past 64 positions is exercised) are continued with
generate(do_sample=False) in float64, stopping at the model's EOS ids (generation_config)
or after max_new_tokens. With every new token the file records the margin between the
top two logits of its step: where it is tiny, fp32 and fp64 may pick different tokens and
the test stops comparing that prompt.

usage: python make_generate_golden.py OUT.json MODEL_DIR
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM

LENGTHS = [1, 5, 17, 40, 70]
MAX_NEW = 24


def main():
    out_path, model_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    vocab = model.config.vocab_size
    eos = model.generation_config.eos_token_id
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    gen = torch.Generator().manual_seed(1234)
    cases = []
    for n in LENGTHS:
        prompt = torch.randint(0, vocab, (1, n), generator=gen)
        with torch.no_grad():
            r = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                               max_new_tokens=MAX_NEW, output_logits=True, return_dict_in_generate=True,
                               pad_token_id=eos[0] if eos else 0)
        new = r.sequences[0, n:].tolist()
        margins = []
        for step in r.logits:
            top = torch.topk(step[0], 2).values
            margins.append(float(top[0] - top[1]))
        cases.append({"prompt": prompt[0].tolist(), "ids": new, "margins": margins[:len(new)]})
    json.dump({"max_new_tokens": MAX_NEW, "eos": eos, "cases": cases}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
