"""Training-step tokens/s with the blocks' linear layers in FP8 against bf16, one GPU.

`anvil bench step` on fresh weights, sequence 2048, --fp8 off, tensorwise and rowwise: Qwen3-1.7B
with 4 sequences a step (selective recomputation), then Qwen3-8B with 1 (fsdp, no
recomputation). Prints each run's tokens/s, MFU against the bf16 and the FP8 peak, peak memory,
and the ratio to bf16 (bars: 1.7B >= 1.25x, 8B >= 1.30x).
"""
import results as R

INPUTS = []
SETTINGS = {"STEPS": 20, "SKIP_8B": 0}
MODELS = {"1.7b": ["--preset", "qwen3-1.7b", "--micro-batch", "4", "--recompute", "selective"],
          "8b": ["--preset", "qwen3-8b", "--micro-batch", "1", "--recompute", "none", "--mode", "fsdp"]}
FP8 = ("off", "tensorwise", "rowwise")


def models(x):
    return [m for m in MODELS if not (m == "8b" and x.s["SKIP_8B"])]


def runs(x):
    for tag in models(x):
        for fp8 in FP8:
            j = x.step("%s-%s" % (tag, fp8), "--seq-len", "2048", "--steps", x.s["STEPS"], *MODELS[tag], "--fp8", fp8)
            if not x.dry and not R.ok(j):
                x.stop("%s-%s: %s" % (tag, fp8, j["error"]))


def table(x):
    for tag in models(x):
        base = x.results[tag + "-off"]
        for fp8 in FP8:
            j = x.results["%s-%s" % (tag, fp8)]
            mfu8 = j.get("mfu_fp8")
            print(f"{tag:5s} fp8 {fp8:10s} {j['tokens_per_s']:9.0f} tok/s  x{j['tokens_per_s'] / base['tokens_per_s']:.3f}"
                  f"  MFU bf16 peak {100 * j['mfu']:.1f}%" + (f", FP8 peak {100 * mfu8:.1f}%" if mfu8 else "") +
                  f"  peak {j['peak_allocated_gib']:.1f} GiB (planned {j['planned_gib']:.1f})")
