"""Which FP8 format the recipe's gradients take: E4M3 against E5M2, against float64.

bench/fp8_grad_format.py: the relative L2 error of the whole model's gradient under each FP8
recipe with E4M3 and with E5M2 gradients, against the same model's float64 gradient without
FP8, averaged over the batches (runs on the CPU).
"""
INPUTS = [("MODEL_DIR", "a Qwen3 folder (tests/data/tiny-qwen3)"),
          ("BATCHES", "safetensors of batch0, batch1, ... (the fixture's golden_adamw.safetensors)")]
SETTINGS = {}


def runs(x):
    x.python("grad_format", "fp8_grad_format.py", x.inputs["MODEL_DIR"], x.inputs["BATCHES"])


def table(x):
    print(x.runs["grad_format"].out)
