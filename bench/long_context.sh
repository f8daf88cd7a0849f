#!/usr/bin/env bash
# Issue 25's single-GPU goal in one call on a GPU machine: Qwen3-8B (fresh weights from the
# preset, random tokens) at sequence 32,768 with --recompute full on one GPU (an H200): anvil
# bench step's tokens/s and peak allocated memory beside the plan's total (the goal: a peak of
# at most 132 GiB, within 3% of the plan; --mlp-tile auto leaves the MLP untiled on an H200,
# 127.5 GiB planned, and `--mlp-tile 4096` plans 124.1; attention's backward is cuDNN's
# non-deterministic one). Then sequence 2,048 (--recompute none), where nothing may get
# slower: this binary, and BASE_BINARY (a build without the change) when given, beside it.
# Usage: bench/long_context.sh [ANVIL_BINARY [BASE_BINARY]]
# Environment: STEPS (timed steps, default 4).
set -uo pipefail
anvil=$(readlink -f "${1:-build/anvil}")
base=${2:+$(readlink -f "$2")}

# One bench step call: its JSON line, summarised.
step() {
  local bin=$1; shift
  "$bin" bench step --preset qwen3-8b --steps "${STEPS:-4}" --warmup 1 "$@" | tail -n 1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
print("seq %d recompute %s mlp tile %s: %.0f tokens/s, step %.0f ms, peak %.2f GiB, plan %.2f GiB (peak/plan %.3f)" % (
    j["seq_len"], j["recompute"], j.get("mlp_tile", "-"), j["tokens_per_s"], j["step_ms"], j["peak_allocated_gib"],
    j["planned_gib"], j["peak_allocated_gib"] / j["planned_gib"]))'
}

echo "$anvil"
"$anvil" plan --preset qwen3-8b --seq-len 32768 --recompute full
step "$anvil" --seq-len 32768 --recompute full || exit 1
step "$anvil" --seq-len 2048 --recompute none || exit 1
if [ -n "$base" ]; then
  echo "$base"
  step "$base" --seq-len 2048 --recompute none || exit 1
fi
