"""anvil's attention beside PyTorch's scaled_dot_product_attention, on one GPU.

bench/attention_vs_sdpa.py: `anvil_bench_ops --attention` (the mma.sync kernel, cuDNN's fused
attention with the deterministic and the non-deterministic backward) beside torch's cuDNN and
flash SDPA backends at 8 shapes (head_dim 128, causal, 16/8 and 32/8 heads, batch 1 and 4, 2048
and 4096 tokens), the same timing and FLOP count; prints a Markdown table of TFLOP/s.
"""
INPUTS = []
SETTINGS = {"BENCH_OPS": "build/anvil_bench_ops"}


def runs(x):
    x.python("attention", "attention_vs_sdpa.py", "--anvil-bench", x.s["BENCH_OPS"])


def table(x):
    print(x.runs["attention"].out)
