#!/usr/bin/env bash
# Side by side on one GPU machine, in one run: anvil's training step against the reference
# PyTorch trainer (ref_train.py: the seed's loop, DDP, recomputation on), same model shape,
# sequence length 2048, one sequence per step; prints both figures and the ratio.
#   bench/compare_reference.sh DIR_WITH_REF_TRAIN_PY [ANVIL_BINARY] [PRESET]
set -euo pipefail
ref_dir=${1:?usage: bench/compare_reference.sh DIR_WITH_REF_TRAIN_PY [ANVIL_BINARY] [PRESET]}
anvil=${2:-build/anvil}
preset=${3:-qwen3-1.7b}
export NCCL_NVLS_ENABLE=0
out=$(mktemp -d)
"$anvil" bench step --preset "$preset" --seq-len 2048 --micro-batch 1 --recompute none --steps 20 --warmup 5 | tail -1 > "$out/none.json"
"$anvil" bench step --preset "$preset" --seq-len 2048 --micro-batch 1 --recompute full --steps 20 --warmup 5 | tail -1 > "$out/full.json"
torchrun --standalone --nproc-per-node=1 "$ref_dir/ref_train.py" --mode ddp --model "$preset" --steps 30 2>/dev/null \
  | grep '^RESULT ' | cut -c8- > "$out/ref.json"
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
ref = json.load(open(d + "/ref.json"))
print("reference (seed default): %8.0f tokens/s, peak %.2f GiB" % (ref["tokens_per_s"], ref["peak_allocated_gib"]))
for name in ("none", "full"):
    a = json.load(open("%s/%s.json" % (d, name)))
    print("anvil recompute %-4s:      %8.0f tokens/s, peak %.2f GiB (planned %.2f), MFU %.1f%%  -> %.2fx the reference"
          % (name, a["tokens_per_s"], a["peak_allocated_gib"], a["planned_gib"], 100 * (a["mfu"] or 0),
             a["tokens_per_s"] / ref["tokens_per_s"]))
PY
rm -rf "$out"
