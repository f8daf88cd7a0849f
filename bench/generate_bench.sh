#!/usr/bin/env bash
# Decode speed of anvil generate beside transformers' generate, in one run on one GPU:
# Qwen3-1.7B with random weights (anvil init), bf16, batch 1, a 128-token prompt, 256 new
# tokens (EOS ids removed from the folder so both make all 256), and the memory-bandwidth
# bound (every weight byte read once per token, over 4.3 TB/s).
#   bench/generate_bench.sh [ANVIL_BINARY] [PRESET]      (PYTHON: python with torch + transformers)
set -euo pipefail
anvil=${1:-build/anvil}
preset=${2:-qwen3-1.7b}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$anvil" init --preset "$preset" --out "$work/model" > /dev/null
"$py" - "$work" <<'PY'
import json, random, sys
d = sys.argv[1]
for f in ("config.json", "generation_config.json"):
    p = "%s/model/%s" % (d, f)
    try:
        j = json.load(open(p))
    except FileNotFoundError:
        continue
    j["eos_token_id"] = None
    json.dump(j, open(p, "w"), indent=2)
vocab = json.load(open(d + "/model/config.json"))["vocab_size"]
random.seed(0)
json.dump({"input_ids": [random.randrange(vocab) for _ in range(128)]}, open(d + "/prompt.jsonl", "w"))
PY
run_anvil() {  # $@: extra flags; prints decode tokens/s (the prefill line goes to stderr)
  if ! "$anvil" generate --model "$work/model" --input "$work/prompt.jsonl" --max-new-tokens 256 --device cuda "$@" \
    > "$work/out.jsonl" 2> "$work/anvil.log"; then
    echo "anvil generate $* failed:" >&2
    tail -5 "$work/anvil.log" >&2
    exit 1
  fi
  grep -o 'prefill: .*' "$work/anvil.log" >&2
  sed -n 's/.*decode: [0-9,]* tokens* in [^(]*(\([0-9,]*\) tokens\/s).*/\1/p' "$work/anvil.log" | tr -d ,
}
graphs=$(run_anvil)
nographs=$(run_anvil --no-cuda-graphs)
ref=$("$py" "$here/generate_reference.py" "$work/model" "$work/prompt.jsonl" 256)
"$py" - "$work/model" "$graphs" "$nographs" "$ref" <<'PY'
import json, sys
from safetensors import safe_open
model, graphs, nographs, ref = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
n = 0
with safe_open(model + "/model.safetensors", "np") as f:
    for k in f.keys():
        shape = f.get_slice(k).get_shape()
        c = 1
        for s in shape:
            c *= s
        n += c
bound = 4.3e12 / (2 * n)
print("Qwen3 %.2fB parameters, bf16, batch 1, 128-token prompt, 256 new tokens (decode tokens/s)" % (n / 1e9))
print("memory-bandwidth bound (%.2f GB per token / 4.3 TB/s): %8.1f" % (2 * n / 1e9, bound))
for name, v in sorted(ref.items()):
    print("transformers %-22s %8.1f" % (name + ":", v))
best = max(ref.values())
print("anvil, CUDA graphs:                 %8.1f  = %.2fx transformers' best, %.2fx below the bound" % (graphs, graphs / best, bound / graphs))
print("anvil, no CUDA graphs:              %8.1f  = %.2fx transformers' best" % (nographs, nographs / best))
PY
