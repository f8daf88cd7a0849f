"""PyTorch's own bf16-against-fp64 deviation over a golden fixture's 8 AdamW steps.

bench/bf16_adamw_deviation.py: the figures the GPU test EightAdamWSteps (tests/cuda/
test_cuda_model.cpp) derives its tolerances from: the worst per-step relative error of loss and
gradient norm against the fp64 curve, the final parameters' relative L2 error, and the same for
a no-op update (lr 0), which the tolerances must reject. One JSON object.
"""
INPUTS = [("FIXTURE_DIR", "a golden fixture (tests/data/tiny-qwen3)")]
SETTINGS = {"DEVICE": "cuda"}


def runs(x):
    x.python("deviation", "bf16_adamw_deviation.py", x.inputs["FIXTURE_DIR"], "--device", x.s["DEVICE"])


def table(x):
    print(x.runs["deviation"].out)
