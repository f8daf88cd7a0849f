"""FP8 oracle for tests/test_fp8.cpp: PyTorch's float8 casts and the FP8 training recipe
(torchao's dynamic scaling: the scale of an operand from its current amax), emulated with
torch's float8 dtypes and float64 matmuls on the CPU.

usage:
  fp8_oracle.py casts IN OUT
    IN: little-endian float32 values; OUT: for each, its torch.float8_e4m3fn byte, then (a
    second block of the same length) its torch.float8_e5m2 byte, then the 256 codes of each
    format decoded to float32 (e4m3 then e5m2), as raw bytes.
"""
import sys

import numpy as np
import torch


def casts(src, dst):
    x = torch.from_numpy(np.fromfile(src, dtype="<f4"))
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    with open(dst, "wb") as f:
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            f.write(x.to(dtype).view(torch.uint8).numpy().tobytes())
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            f.write(codes.view(dtype).to(torch.float32).numpy().astype("<f4").tobytes())


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("casts",):
        sys.exit(__doc__)
    if sys.argv[1] == "casts":
        casts(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
