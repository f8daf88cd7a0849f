"""FP8 oracle for tests/test_fp8.cpp: PyTorch's float8 casts and the FP8 training recipe
(torchao's dynamic scaling: the scale of an operand from its current amax), emulated with
torch's float8 dtypes and float64 matmuls on the CPU.

usage:
  fp8_oracle.py casts IN OUT
    IN: little-endian float32 values; OUT: for each, its torch.float8_e4m3fn byte, then (a
    second block of the same length) its torch.float8_e5m2 byte, then the 256 codes of each
    format decoded to float32 (e4m3 then e5m2), as raw bytes.
  fp8_oracle.py linear IN OUT_DIR
    IN (safetensors, float32): x (M, K), w (N, K), bias (N), dy (M, N). OUT_DIR/RECIPE.safetensors
    for RECIPE tensorwise and rowwise (float64): y = x w^T + bias, dx = dy w, dw = dy^T x,
    dbias = column sums of dy, each GEMM on FP8 operands as the recipe says (ops/fp8_recipe.h).
  fp8_oracle.py grads RECIPE BATCHES OUT_DIR MODEL_DIR...
    For the k-th Qwen3 model folder (tied or untied embedding; fp32 weights, computed in
    float64) and batch k of BATCHES (safetensors: batch0, batch1, ... I64 [B, T]): the mean
    cross-entropy of labels = input_ids and its gradient, with each block's fused qkv, o,
    fused gate_up and down projections in FP8 (RECIPE tensorwise | rowwise, or off: the plain
    model, which gives the fixture's float64 loss and gradients), written to
    OUT_DIR/k.safetensors: loss F64 [1] and grad.<name> F64 under Hugging Face names.

The recipe, written here from its description and torchao's: an operand is scaled by
fp8_max / max(amax, 1e-12) (double, then float32; rowwise: per row along the reduction
dimension, rounded down to a power of two), multiplied in float32, clamped to +-fp8_max,
cast with torch's float8 dtypes; a GEMM is the float64 product of the FP8 values times the
float32 inverse scales. Every operand is E4M3; Recipe's grad_format (bench/fp8_grad_format.py)
can put the gradients in E5M2 instead.
"""
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def casts(src, dst):
    x = torch.from_numpy(np.fromfile(src, dtype="<f4"))
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    with open(dst, "wb") as f:
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            f.write(x.to(dtype).view(torch.uint8).numpy().tobytes())
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            f.write(codes.view(dtype).to(torch.float32).numpy().astype("<f4").tobytes())


class Recipe:
    def __init__(self, name, grad_format=None):
        assert name in ("tensorwise", "rowwise"), name
        self.rowwise = name == "rowwise"
        self.grad = {None: E4M3, "e4m3": E4M3, "e5m2": E5M2}[grad_format]

    def quantize(self, t, dtype):
        """t (rows, k), the reduction along k: its FP8 values (float64) and inverse scales (rows, 1)."""
        t = t.to(torch.float32)
        amax = t.abs().amax(dim=1, keepdim=True) if self.rowwise else t.abs().amax().expand(t.shape[0], 1)
        fmax = torch.finfo(dtype).max
        scale = (fmax / torch.clamp(amax.to(torch.float64), min=1e-12)).to(torch.float32)
        if self.rowwise:
            _, e = torch.frexp(scale)
            scale = torch.ldexp(torch.ones_like(scale), e - 1)
        q = (t * scale).clamp(-fmax, fmax).to(dtype)
        return q.to(torch.float64), scale.reciprocal().to(torch.float64)

    def gemm(self, a, a_dtype, b, b_dtype):
        """a (m, k) . b (n, k)^T with both operands quantized along k."""
        qa, ia = self.quantize(a, a_dtype)
        qb, ib = self.quantize(b, b_dtype)
        return (qa @ qb.T) * ia * ib.T

    def forward(self, x, w):
        return self.gemm(x, E4M3, w, E4M3)

    def backward_input(self, dy, w):
        return self.gemm(dy, self.grad, w.T, E4M3)

    def backward_weight(self, dy, x):
        return self.gemm(dy.T, self.grad, x.T, E4M3)


def linear(src, dst):
    t = load_file(src)
    x, w, bias, dy = t["x"], t["w"], t["bias"], t["dy"]
    for name in ("tensorwise", "rowwise"):
        r = Recipe(name)
        save_file({"y": r.forward(x, w) + bias.to(torch.float64), "dx": r.backward_input(dy, w),
                   "dw": r.backward_weight(dy, x), "dbias": dy.to(torch.float64).sum(0)}, f"{dst}/{name}.safetensors")


class Fp8Linear(torch.autograd.Function):
    """y = x w^T with the recipe's three GEMMs; x (rows, K), w (N, K)."""

    @staticmethod
    def forward(ctx, x, w, recipe):
        ctx.save_for_backward(x, w)
        ctx.recipe = recipe
        return recipe.forward(x, w)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return ctx.recipe.backward_input(dy, w), ctx.recipe.backward_weight(dy, x), None


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Qwen3:
    """Qwen3 in float64 with the q/k/v and gate/up projections fused as anvil runs them."""

    def __init__(self, model_dir, recipe):
        import json
        self.cfg = json.load(open(f"{model_dir}/config.json"))
        weights = load_file(f"{model_dir}/model.safetensors")
        c, self.recipe = self.cfg, recipe
        self.params = {}
        for n, t in weights.items():
            self.params[n] = t.to(torch.float64)
        for i in range(c["num_hidden_layers"]):  # the fused layouts, as anvil's units hold them
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            self.params[a + "qkv.weight"] = torch.cat([self.params.pop(a + n + "_proj.weight") for n in "qkv"])
            self.params[m + "gate_up.weight"] = torch.cat([self.params.pop(m + n + "_proj.weight") for n in ("gate", "up")])
        for t in self.params.values():
            t.requires_grad_(True)
        hd = c["head_dim"]
        theta = c["rope_parameters"]["rope_theta"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float32) / hd))

    def linear(self, x, w):
        if self.recipe is None:
            return x @ w.T
        return Fp8Linear.apply(x.reshape(-1, x.shape[-1]), w, self.recipe).reshape(*x.shape[:-1], w.shape[0])

    def named_hf(self, of):
        """of(parameter) for every parameter under Hugging Face names, the fused ones split back."""
        c, out = self.cfg, {}
        for n, p in self.params.items():
            t = of(p)
            if n.endswith("qkv.weight"):
                base, q = n[: -len("qkv.weight")], c["num_attention_heads"] * c["head_dim"]
                kv = c["num_key_value_heads"] * c["head_dim"]
                for name, part in zip("qkv", torch.split(t, [q, kv, kv])):
                    out[f"{base}{name}_proj.weight"] = part
            elif n.endswith("gate_up.weight"):
                base = n[: -len("gate_up.weight")]
                for name, part in zip(("gate", "up"), torch.split(t, c["intermediate_size"])):
                    out[f"{base}{name}_proj.weight"] = part
            else:
                out[n] = t
        return out

    def loss(self, ids):
        c, p = self.cfg, self.params
        B, T = ids.shape
        H, KV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        angles = torch.outer(torch.arange(T, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(torch.float64), emb.sin().to(torch.float64)
        x = p["model.embed_tokens.weight"][ids]
        mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
        for i in range(c["num_hidden_layers"]):
            a, m, L = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp.", f"model.layers.{i}."
            h = rms_norm(x, p[L + "input_layernorm.weight"], eps)
            q, k, v = torch.split(self.linear(h, p[a + "qkv.weight"]), [H * hd, KV * hd, KV * hd], dim=-1)
            q = rms_norm(q.view(B, T, H, hd), p[a + "q_norm.weight"], eps).transpose(1, 2)
            k = rms_norm(k.view(B, T, KV, hd), p[a + "k_norm.weight"], eps).transpose(1, 2)
            v = v.view(B, T, KV, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            att = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5 + mask, dim=-1) @ v
            x = x + self.linear(att.transpose(1, 2).reshape(B, T, H * hd), p[a + "o_proj.weight"])
            h = rms_norm(x, p[L + "post_attention_layernorm.weight"], eps)
            gate, up = torch.split(self.linear(h, p[m + "gate_up.weight"]), c["intermediate_size"], dim=-1)
            x = x + self.linear(torch.nn.functional.silu(gate) * up, p[m + "down_proj.weight"])
        x = rms_norm(x, p["model.norm.weight"], eps)
        head = p.get("lm_head.weight", p["model.embed_tokens.weight"])
        logits = x @ head.T
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def grads(recipe, batches, out_dir, *model_dirs):
    data = load_file(batches)
    for k, model_dir in enumerate(model_dirs):
        model = Qwen3(model_dir, None if recipe == "off" else Recipe(recipe))
        loss = model.loss(data[f"batch{k}"])
        loss.backward()
        named = model.named_hf(lambda t: t.grad)
        out = {"loss": loss.detach().reshape(1)}
        out.update({f"grad.{n}": g.contiguous() for n, g in named.items()})
        save_file(out, f"{out_dir}/{k}.safetensors")


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("casts", "linear", "grads"):
        sys.exit(__doc__)
    if sys.argv[1] == "casts":
        casts(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "linear":
        linear(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "grads":
        grads(*sys.argv[2:])


if __name__ == "__main__":
    main()
