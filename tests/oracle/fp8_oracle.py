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

The recipe, written here from its description and torchao's: an operand is scaled by
fp8_max / max(amax, 1e-12) (double, then float32; rowwise: per row along the reduction
dimension, rounded down to a power of two), multiplied in float32, clamped to +-fp8_max,
cast with torch's float8 dtypes; a GEMM is the float64 product of the FP8 values times the
float32 inverse scales. Activations and weights are E4M3; gradients E5M2 (tensorwise) or
E4M3 (rowwise), unless --grad-format says otherwise.
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
        default = E4M3 if self.rowwise else E5M2
        self.grad = {None: default, "e4m3": E4M3, "e5m2": E5M2}[grad_format]

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


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("casts", "linear"):
        sys.exit(__doc__)
    if sys.argv[1] == "casts":
        casts(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "linear":
        linear(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
