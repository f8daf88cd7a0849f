#!/usr/bin/env bash
# Context parallelism's goal (issue 25), measured in one call on a machine of two GPUs:
# anvil bench step of a preset (fresh weights, random tokens) at sequence SEQ (131072) with
# --context-parallel 2 on both GPUs, against one GPU at SEQ/2 (65536), the same recompute;
# each run's JSON line, then the ratio of their MFU (the goal: at least 0.9). MFU counts
# attention's flops at each run's own sequence length, per GPU, so the two are comparable.
# Usage: bench/context_parallel_mfu.sh [ANVIL_BINARY]
# Environment: PRESET (qwen3-1.7b), SEQ (131072), RECOMPUTE (full), MODE (fsdp), STEPS (6),
# WARMUP (2). Logs stay in $OUT (default: a new temporary folder).
set -uo pipefail
anvil=$(readlink -f "${1:-build/anvil}")
preset=${PRESET:-qwen3-1.7b} seq=${SEQ:-131072} recompute=${RECOMPUTE:-full}
steps=${STEPS:-6} warmup=${WARMUP:-2}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
common=(bench step --preset "$preset" --recompute "$recompute" --steps "$steps" --warmup "$warmup")

"$anvil" plan --preset "$preset" --nproc 2 --context-parallel 2 --seq-len "$seq" --recompute "$recompute" \
  --mode "${MODE:-fsdp}" > "$out/plan_cp.txt" 2>&1
"$anvil" "${common[@]}" --seq-len $((seq / 2)) > "$out/one.log" 2>&1 || { tail -5 "$out/one.log"; exit 1; }
"$anvil" "${common[@]}" --seq-len "$seq" --context-parallel 2 --nproc-per-node 2 --mode "${MODE:-fsdp}" \
  > "$out/cp.log" 2>&1 || { tail -5 "$out/cp.log"; exit 1; }
one=$(grep '^{' "$out/one.log" | tail -1) cp=$(grep '^{' "$out/cp.log" | tail -1)
echo "one GPU, sequence $((seq / 2)): $one"
echo "context parallel 2, sequence $seq: $cp"
python3 - "$one" "$cp" <<'PY'
import json, sys
one, cp = (json.loads(a) for a in sys.argv[1:3])
print(f"MFU {cp['mfu']:.3f} (context parallel 2, {cp['seq_len']} tokens) / {one['mfu']:.3f} (one GPU, "
      f"{one['seq_len']} tokens) = {cp['mfu'] / one['mfu']:.3f} (goal: >= 0.9); peak "
      f"{cp['peak_allocated_gib']:.1f} GiB per GPU against {cp['planned_gib']:.1f} planned")
PY
echo "logs: $out"
