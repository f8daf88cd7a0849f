"""Decode speed of anvil generate beside transformers' generate, on one GPU.

PRESET (Qwen3-1.7B) with random weights (anvil init), bf16, batch 1, a 128-token prompt, 256 new
tokens (the eos ids removed from the folder so that both make all 256), with and without CUDA
graphs, beside transformers' generate with the dynamic and the static cache
(bench/reference_generate.py), and the memory-bandwidth bound (every weight byte read once per
token, over 4.3 TB/s).
"""
import json
import re

import make_inputs

INPUTS = []
SETTINGS = {"PRESET": "qwen3-1.7b"}
DECODE = re.compile(r"decode: [0-9,]* tokens? in [^(]*\(([0-9,]*) tokens/s\)")


def runs(x):
    out = x.out
    x.anvil("init", "init", "--preset", x.s["PRESET"], "--out", out / "model")
    x.call("prompt", make_inputs.decode_prompt, out / "model", out / "prompt.jsonl", 128)
    gen = ["generate", "--model", out / "model", "--input", out / "prompt.jsonl", "--max-new-tokens", "256",
           "--device", "cuda"]
    x.anvil("graphs", *gen)
    x.anvil("no_graphs", *gen, "--no-cuda-graphs")
    x.python("transformers", "reference_generate.py", out / "model", out / "prompt.jsonl", "256")


def table(x):
    from safetensors import safe_open
    tps = {k: float(DECODE.search((x.out / (k + ".log")).read_text()).group(1).replace(",", ""))
           for k in ("graphs", "no_graphs")}
    ref = json.loads((x.out / "transformers.log").read_text().strip().splitlines()[-1])
    n = 0
    with safe_open(str(x.out / "model/model.safetensors"), "np") as f:
        for k in f.keys():
            c = 1
            for s in f.get_slice(k).get_shape():
                c *= s
            n += c
    bound = 4.3e12 / (2 * n)
    print("Qwen3 %.2fB parameters, bf16, batch 1, 128-token prompt, 256 new tokens (decode tokens/s)" % (n / 1e9))
    print("memory-bandwidth bound (%.2f GB per token / 4.3 TB/s): %8.1f" % (2 * n / 1e9, bound))
    for name, v in sorted(ref.items()):
        print("transformers %-22s %8.1f" % (name + ":", v))
    best = max(ref.values())
    print("anvil, CUDA graphs:                 %8.1f  = %.2fx transformers' best, %.2fx below the bound"
          % (tps["graphs"], tps["graphs"] / best, bound / tps["graphs"]))
    print("anvil, no CUDA graphs:              %8.1f  = %.2fx transformers' best" % (tps["no_graphs"],
                                                                                   tps["no_graphs"] / best))
