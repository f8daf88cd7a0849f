#!/usr/bin/env python3
"""anvil's attention beside PyTorch's scaled_dot_product_attention, in one run on one GPU.

Runs `anvil_bench_ops --attention` (anvil's paths: the mma.sync kernel, cuDNN's fused
attention with the deterministic backward that anvil uses by default, and cuDNN's
non-deterministic backward for reference), then times torch.nn.functional.
scaled_dot_product_attention on its cuDNN and flash backends (torch.nn.attention.sdpa_kernel)
at the same shapes (head_dim 128, causal, 16/8 and 32/8 heads, batch 1
and 4, 2048 and 4096 tokens), the same way (host-clock median of 5 batches of back-to-back
calls, each batch ending with a synchronize, after warm-up) and with the same FLOP count
(causal: forward 2 * 2 * B * H * T * T * hd / 2, backward 2.5x the forward), and prints a
Markdown table of TFLOP/s for bench/NOTES.md.

    python3 bench/attention_vs_sdpa.py [--anvil-bench build/anvil_bench_ops]

PyTorch gets contiguous (B, H, T, hd) bf16 tensors; where its cuDNN backend refuses grouped
k/v (enable_gqa), k and v are expanded to H heads first (marked "kv expanded"; the FLOPs
are the same).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

SHAPES = [(1, 2048, 16, 8), (4, 2048, 16, 8), (1, 4096, 16, 8), (4, 4096, 16, 8),
          (1, 2048, 32, 8), (4, 2048, 32, 8), (1, 4096, 32, 8), (4, 4096, 32, 8)]
HEAD_DIM = 128


def flops_forward(b, t, h, hd=HEAD_DIM):
    return 2.0 * b * h * t * t * hd  # 2 products of 2 B H T^2 hd flops each, half of them (causal)


def timed(fn, sync):
    """Seconds per call: median of 5 batches of back-to-back calls (as anvil_bench_ops)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - t0
    reps = max(1, min(200, int(2e-3 / max(once, 1e-6))))
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        per.append((time.perf_counter() - t0) / reps)
    return statistics.median(per)


def run_anvil(binary):
    out = subprocess.run([binary, "--attention"], capture_output=True, text=True)
    sys.stderr.write(out.stderr)  # anvil's log: which path ran, or why cuDNN refused a shape
    if out.returncode != 0:
        sys.stdout.write(out.stdout)
        sys.exit(f"{binary} --attention failed (exit code {out.returncode})")
    rows, version = {}, ""
    for line in out.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "cudnn_version" in r:
            version = r["cudnn_version"]
            continue
        rows[(r["impl"], r["batch"], r["seq"], r["heads"], r["kv_heads"])] = r
    return rows, version


def run_torch(backend_name):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend_name]
    rows = {}
    for b, t, h, kv in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        mk = lambda heads: torch.randn(b, heads, t, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
        q, k, v, dout = mk(h), mk(kv), mk(kv), mk(h)
        note = ""
        with sdpa_kernel([backend]):
            try:
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=True)
            except RuntimeError:
                note = "kv expanded"
                k, v = (x.repeat_interleave(h // kv, dim=1) for x in (k, v))
                qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
                out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
            gqa = not note
            fwd = timed(lambda: F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=gqa),
                        torch.cuda.synchronize)
            bwd = timed(lambda: torch.autograd.grad(out, (qq, kk, vv), dout, retain_graph=True),
                        torch.cuda.synchronize)
        fl = flops_forward(b, t, h)
        rows[(b, t, h, kv)] = {"fwd_tflops": fl / fwd / 1e12, "bwd_tflops": 2.5 * fl / bwd / 1e12,
                               "fwd_ms": fwd * 1e3, "bwd_ms": bwd * 1e3, "note": note}
        del q, k, v, dout, qq, kk, vv, out
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anvil-bench", default="build/anvil_bench_ops")
    args = ap.parse_args()

    anvil, anvil_cudnn = run_anvil(args.anvil_bench)
    import torch
    torch_rows = {"cudnn": run_torch("cudnn"), "flash": run_torch("flash")}

    print(f"{torch.cuda.get_device_name()}; anvil's cuDNN {anvil_cudnn or 'absent'}, "
          f"PyTorch {torch.__version__} with cuDNN {torch.backends.cudnn.version()}")
    print("TFLOP/s forward / backward (causal FLOPs: fwd 2*B*H*T^2*hd, bwd 2.5x); "
          "ratio: PyTorch cuDNN time / anvil default time (>= 1.00 meets goal 5)\n")
    print("| shape B x T, heads q/kv | anvil (cuDNN, det. bwd) | anvil kernel | anvil cuDNN non-det. bwd "
          "| torch cuDNN | torch flash | ratio fwd / bwd |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for b, t, h, kv in SHAPES:
        def cell(r, ran=True):
            if r is None:
                return "-"
            s = f"{r['fwd_tflops']:.0f} / {r['bwd_tflops']:.0f}"
            if ran and "fwd_ran" in r and (r["fwd_ran"] != "cudnn" or r["bwd_ran"] != "cudnn"):
                s += f" (ran {r['fwd_ran']} / {r['bwd_ran']})"
            if r.get("note"):
                s += f" ({r['note']})"
            return s
        ours = anvil.get(("cudnn", b, t, h, kv))
        tc = torch_rows["cudnn"][(b, t, h, kv)]
        ratio = f"{tc['fwd_ms'] / ours['fwd_ms']:.2f} / {tc['bwd_ms'] / ours['bwd_ms']:.2f}" if ours else "-"
        print(f"| {b} x {t}, {h}/{kv} | {cell(ours)} | {cell(anvil.get(('kernel', b, t, h, kv)), False)} "
              f"| {cell(anvil.get(('cudnn-nondeterministic', b, t, h, kv)))} | {cell(tc)} "
              f"| {cell(torch_rows['flash'][(b, t, h, kv)])} | {ratio} |")


if __name__ == "__main__":
    main()
