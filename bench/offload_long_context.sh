#!/usr/bin/env bash
# Issue 25's offload goal in one call on a GPU machine: Qwen3-8B (fresh weights from the
# preset, random tokens) at sequence 65,536 with --recompute full --offload-activations on one
# GPU (an H200): the plan (which does not fit without offload), then anvil bench step's
# tokens/s, peak allocated device memory beside the plan's total and the pinned host memory
# the offloaded checkpoints take. The goal: it trains (the steps finish: a non-finite gradient
# norm would stop it with an error), the peak within 3% of the plan.
# Usage: bench/offload_long_context.sh [ANVIL_BINARY]
# Environment: STEPS (timed steps, default 3).
set -uo pipefail
anvil=$(readlink -f "${1:-build/anvil}")

echo "$anvil"
"$anvil" plan --preset qwen3-8b --seq-len 65536 --recompute full
"$anvil" plan --preset qwen3-8b --seq-len 65536 --recompute full --offload-activations
"$anvil" bench step --preset qwen3-8b --seq-len 65536 --recompute full --offload-activations --steps "${STEPS:-3}" \
  --warmup 1 | tail -n 1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
print("seq %d recompute %s offload %s mlp tile %s: %.0f tokens/s, step %.0f ms, peak %.2f GiB, plan %.2f GiB "
      "(peak/plan %.3f), pinned host %.2f GiB" % (
    j["seq_len"], j["recompute"], j["offload_activations"], j["mlp_tile"], j["tokens_per_s"], j["step_ms"],
    j["peak_allocated_gib"], j["planned_gib"], j["peak_allocated_gib"] / j["planned_gib"], j["host_activations_gib"]))'
