"""Qwen3-MoE parity oracle for tests/test_moe_oracle.cpp: random small Qwen3MoeForCausalLM
models, their float64 loss, logits and every parameter gradient from transformers on the CPU.

usage: moe_oracle.py COUNT SEED OUT_DIR
For case k it writes OUT_DIR/k/ with a Hugging Face model folder (config.json,
model.safetensors in float32: the per-expert layout save_pretrained writes by default, or in
some cases transformers 5's fused layout, save_original_format=False), tokens.safetensors
(input_ids I64 [B, T]) and golden.safetensors (loss F64 [1], logits F64 [B, T, V], grad.<name>
F64 under the per-expert names: the fused experts' gradients split per expert; for a config
without the auxiliary loss, golden_aux.safetensors too: the same with output_router_logits
passed to the forward, which `anvil grad --router-aux-loss` must give), and prints
one line per case: its config, and the smallest gap between a token's k-th and (k+1)-th
router logit; tokens are redrawn until it is at least 1e-4 (routing decided by float32's
rounding would be no fair test).
It also writes gen.json: transformers' greedy continuations of two prompts, with each step's
margin between the two largest logits.

The configs draw the experts (2-8), top-k (1-4, at most the experts), norm_topk_prob,
decoder_sparse_step (1-2), mlp_only_layers, the auxiliary loss (output_router_logits, with a
coefficient large enough to move the gradients), tied and untied embeddings, 1-4 layers.
Router weights are drawn wider than transformers' init so that the routing is decisive.
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


kNewTokens = 10  # greedy tokens per prompt in gen.json
kMinGap, kDraws = 1e-4, 20  # the least routing gap of a case's tokens, and the draws to find them


def random_config(r):
    kv = r.choice([1, 2])
    layers = r.randint(1, 4)
    experts = r.randint(2, 8)
    cfg = {
        "vocab_size": r.randrange(50, 300) | 1,
        "hidden_size": r.randrange(24, 96),
        "intermediate_size": r.randrange(17, 100) | 1,
        "moe_intermediate_size": r.randrange(8, 48),
        "num_hidden_layers": layers,
        "num_attention_heads": kv * r.choice([1, 2, 4]),
        "num_key_value_heads": kv,
        "head_dim": r.choice([16, 32]),
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": r.random() < 0.3,
        "max_position_embeddings": 512,
        "initializer_range": 0.05,
        "use_cache": False,
        "num_experts": experts,
        "num_experts_per_tok": r.randint(1, min(4, experts)),
        "norm_topk_prob": r.random() < 0.5,
        "decoder_sparse_step": r.choice([1, 1, 2]),
        "mlp_only_layers": sorted(r.sample(range(layers), r.randint(0, layers // 2))),
        "output_router_logits": r.random() < 0.6,
        "router_aux_loss_coef": r.choice([0.001, 0.1, 0.5]),
        "rope_parameters": {"rope_type": "default", "rope_theta": r.choice([10000.0, 1000000.0])},
    }
    # Top-1 renormalised routes with weight 1: without the auxiliary loss the router's gradient
    # is zero, and transformers' float64 rounding noise is no reference for it.
    if cfg["num_experts_per_tok"] == 1 and cfg["norm_topk_prob"]:
        cfg["output_router_logits"] = True
    # At least one sparse layer (transformers' auxiliary loss fails on none).
    if not any(l not in cfg["mlp_only_layers"] and (l + 1) % cfg["decoder_sparse_step"] == 0 for l in range(layers)):
        cfg["mlp_only_layers"], cfg["decoder_sparse_step"] = [], 1
    return cfg



def make_model(cfg, r, out, fused):
    """The model folder: random weights, norms away from 1, router weights wide."""
    torch.manual_seed(r.randrange(1 << 30))
    config = AutoConfig.for_model("qwen3_moe", **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
            if n.endswith("mlp.gate.weight"):
                p.copy_(0.2 * torch.randn(p.shape))
    model.save_pretrained(out, safe_serialization=True, save_original_format=not fused)


def per_expert(name, grad):
    """transformers' fused expert gradients under the per-expert names anvil writes."""
    if name.endswith("mlp.experts.gate_up_proj"):
        prefix, half = name[: -len("gate_up_proj")], grad.shape[1] // 2
        out = {}
        for e in range(grad.shape[0]):
            out[f"{prefix}{e}.gate_proj.weight"] = grad[e, :half]
            out[f"{prefix}{e}.up_proj.weight"] = grad[e, half:]
        return out
    if name.endswith("mlp.experts.down_proj"):
        prefix = name[: -len("down_proj")]
        return {f"{prefix}{e}.down_proj.weight": grad[e] for e in range(grad.shape[0])}
    return {name: grad}


def load64(out):
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager",
                                                experts_implementation="eager")


def routing_gap(m64, ids, top_k):
    """The smallest gap between the k-th and (k+1)-th router logit of any token and layer: the
    ranking's margin (float32's error in a logit is about 1e-6)."""
    gaps = []
    hooks = [mod.register_forward_hook(lambda _m, _i, o: gaps.append(o[0].detach()))
             for name, mod in m64.named_modules() if name.endswith("mlp.gate")]
    with torch.no_grad():
        m64(input_ids=ids)
    for h in hooks:
        h.remove()
    least = float("inf")
    for logits in gaps:
        v = logits.sort(dim=-1, descending=True).values
        if v.shape[-1] > top_k:
            least = min(least, float((v[:, top_k - 1] - v[:, top_k]).min()))
    return least


def write_golden(out, ids, path, **kwargs):
    """transformers' float64 loss, logits and gradients of the folder `out` on `ids`."""
    m64 = load64(out)
    o = m64(input_ids=ids, labels=ids, **kwargs)
    o.loss.backward()
    gold = {"loss": o.loss.detach().reshape(1), "logits": o.logits.detach()}
    for n, p in m64.named_parameters():
        gold.update({"grad." + k: v for k, v in per_expert(n, p.grad.detach()).items()})
    save_file({k: v.contiguous() for k, v in gold.items()}, path)


def make_case(cfg, r, out):
    fused = r.random() < 0.3
    make_model(cfg, r, out, fused)
    batch, seq = r.randint(1, 3), r.randint(3, 32)
    m64 = load64(out)
    # Tokens whose routing float32 decides: redrawn while some token's k-th and (k+1)-th
    # router logits lie closer than kMinGap.
    for _ in range(kDraws):
        ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
        gap = routing_gap(m64, ids, cfg["num_experts_per_tok"])
        if gap >= kMinGap:
            break
    else:
        sys.exit(f"{out}: no tokens in {kDraws} draws route with a gap of {kMinGap} (smallest {gap:.1e})")
    save_file({"input_ids": ids}, f"{out}/tokens.safetensors")
    write_golden(out, ids, f"{out}/golden.safetensors")
    if not cfg["output_router_logits"]:  # what anvil grad --router-aux-loss must give
        write_golden(out, ids, f"{out}/golden_aux.safetensors", output_router_logits=True)
    write_generate(m64, cfg, r, out)
    return batch, seq, fused, gap


def write_generate(m64, cfg, r, out):
    """gen.json: two prompts, transformers' greedy continuation of each (float64, no EOS) and
    each step's margin between the two largest logits."""
    cases = []
    for _ in range(2):
        prompt = [r.randrange(cfg["vocab_size"]) for _ in range(r.randint(2, 8))]
        with torch.no_grad():
            ids = torch.tensor([prompt])
            g = m64.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=kNewTokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
        margins = []
        for step in g.logits:
            top = step[0].topk(2).values
            margins.append(float(top[0] - top[1]))
        cases.append({"prompt": prompt, "ids": g.sequences[0, len(prompt):].tolist(), "margins": margins})
    with open(f"{out}/gen.json", "w") as f:
        json.dump({"max_new_tokens": kNewTokens, "cases": cases}, f)


def main():
    count, seed, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)
    r = random.Random(seed)
    for k in range(count):
        cfg = random_config(r)
        batch, seq, fused, gap = make_case(cfg, r, os.path.join(out_dir, str(k)))
        print(f"case {k}: qwen3_moe B={batch} T={seq} {'fused' if fused else 'per-expert'} experts, "
              f"routing gap {gap:.1e} " + json.dumps(cfg, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
