#!/usr/bin/env bash
# Training-step tokens/s with the blocks' linear layers in FP8 (--fp8 tensorwise, rowwise)
# against bf16 (--fp8 off), one GPU, `anvil bench step` on fresh weights, sequence 2048: Qwen3-
# 1.7B with 4 sequences a step, then Qwen3-8B with 1 (fsdp, no recomputation). Prints each
# run's tokens/s, MFU against the bf16 and the FP8 peak, peak memory, and the ratios to bf16.
# The issue's bars: 1.7B >= 1.25x, 8B >= 1.30x.
# Usage: bench/fp8_speed.sh [WORKDIR=$(mktemp -d)]; ANVIL (build/anvil), STEPS (20), SKIP_8B=1.
set -euo pipefail
work=${1:-$(mktemp -d)}
anvil=${ANVIL:-build/anvil} steps=${STEPS:-20}
run() {  # NAME ARGS...: one JSON line into $work/NAME.json
  local name=$1
  shift
  "$anvil" bench step --seq-len 2048 --steps "$steps" "$@" > "$work/$name.json" 2> "$work/$name.log" ||
    { tail -5 "$work/$name.log"; exit 1; }
}
models=("1.7b --preset qwen3-1.7b --micro-batch 4 --recompute selective")
[ "${SKIP_8B:-0}" = 1 ] || models+=("8b --preset qwen3-8b --micro-batch 1 --recompute none --mode fsdp")
for m in "${models[@]}"; do
  read -r tag args <<< "$m"
  for fp8 in off tensorwise rowwise; do
    # shellcheck disable=SC2086
    run "$tag-$fp8" $args --fp8 "$fp8"
  done
done
python3 - "$work" "${models[@]%% *}" <<'PY'
import json, sys
work, tags = sys.argv[1], sys.argv[2:]
for tag in tags:
    base = json.loads(open(f"{work}/{tag}-off.json").read().splitlines()[-1])
    for fp8 in ("off", "tensorwise", "rowwise"):
        j = json.loads(open(f"{work}/{tag}-{fp8}.json").read().splitlines()[-1])
        mfu8 = j.get("mfu_fp8")
        print(f"{tag:5s} fp8 {fp8:10s} {j['tokens_per_s']:9.0f} tok/s  x{j['tokens_per_s'] / base['tokens_per_s']:.3f}"
              f"  MFU bf16 peak {100 * j['mfu']:.1f}%" + (f", FP8 peak {100 * mfu8:.1f}%" if mfu8 else "") +
              f"  peak {j['peak_allocated_gib']:.1f} GiB (planned {j['planned_gib']:.1f})")
PY
