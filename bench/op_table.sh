#!/usr/bin/env bash
# The step model's op-cost table (plan/op_costs.h) measured on this GPU, then its predictions
# beside the measured tokens/s (plan/step_model.h).
#  1. Qwen3-1.7B, --recompute none, every op timed with the optimizer alone after the
#     backward: `anvil bench step --op-times --no-overlap-optimizer --write-op-table TABLE` at
#     sequence 1024 and 2048 with one sequence and 2048 with four (1024, 2048 and 8192 rows),
#     each fit merged into the last (default TABLE: src/plan/h200_op_costs.json, the one the
#     binary embeds at its next build; of an unmeasured table there only the rates of ops no
#     step here runs stay, marked not measured: convert, of several GPUs' wire copies). The
#     same three shapes with --fp8 tensorwise go first, so that their linear_fp8_* rows stay
#     and the bf16 steps' fits price every other op.
#  2. One GPU, as training runs (the optimizer overlapped): 0.6B (sequence 1024), 1.7B (one
#     sequence, none; four, selective; four, selective, FP8), 8B (none; two sequences, FP8):
#     measured and predicted with --op-table TABLE.
#  3. With two GPUs or more: the all-reduce bus bandwidth at 256 MB fp32 (`anvil bench`, about
#     a block's gradient), then 1.7B ddp and fsdp on 2 GPUs, predicted with that bandwidth, and
#     the comm_overlap_cost each measured step implies (the table's is 0.3, not measured): the
#     time the step lost beyond the predicted exposed communication, over the hidden one.
# Usage: bench/op_table.sh [TABLE]; ANVIL (build/anvil), STEPS (20).
set -euo pipefail
table=${1:-$(dirname "$0")/../src/plan/h200_op_costs.json}
anvil=${ANVIL:-build/anvil} steps=${STEPS:-20} log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() { "$anvil" "$@" 2> "$log" || { tail -5 "$log" >&2; exit 1; }; }
for fp8 in tensorwise off; do
  for shape in "1024 1" "2048 4" "2048 1"; do
    set -- $shape
    run bench step --preset qwen3-1.7b --seq-len "$1" --micro-batch "$2" --recompute none --fp8 "$fp8" \
      --steps "$steps" --op-times --no-overlap-optimizer --write-op-table "$table" > /dev/null
  done
done
echo "op-cost table written: $table"
row() {  # LABEL, then bench step's flags: measured and predicted tokens/s side by side
  local label=$1
  shift
  run bench step --steps "$steps" --op-table "$table" "$@" | tail -1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read()); p = j["predicted"]
print("%-44s measured %8.0f tokens/s, predicted %8.0f (%+.1f%%); step %.1f / %.1f ms, exposed comm %.1f ms" % (
    sys.argv[1], j["tokens_per_s"], p["tokens_per_s"], 100 * (p["tokens_per_s"] / j["tokens_per_s"] - 1),
    j["step_ms"], p["step_ms"], p["exposed_ms"]))
if j["world"] > 1:
    c, hidden = p["comm_overlap_cost"], p["communication_ms"] - p["exposed_ms"]
    x = (j["step_ms"] - (p["step_ms"] - p["slowed_ms"])) / hidden
    print("%-44s implied comm_overlap_cost %s (the table: %.2f)" % ("", "%.2f" % (x / (1 - x)) if 0 <= x < 1
          else "out of range (x = %.2f)" % x, c))' "$label"
}
row "0.6B seq 1024, 1 seq, none" --preset qwen3-0.6b --seq-len 1024 --recompute none
row "1.7B seq 2048, 1 seq, none" --preset qwen3-1.7b --seq-len 2048 --recompute none
row "1.7B seq 2048, 4 seq, selective" --preset qwen3-1.7b --seq-len 2048 --micro-batch 4 --recompute selective
row "8B seq 2048, 1 seq, none" --preset qwen3-8b --seq-len 2048 --recompute none
row "1.7B seq 2048, 4 seq, selective, fp8" --preset qwen3-1.7b --seq-len 2048 --micro-batch 4 --recompute selective \
  --fp8 tensorwise
row "8B seq 2048, 2 seq, none, fp8" --preset qwen3-8b --seq-len 2048 --micro-batch 2 --recompute none --fp8 tensorwise
gpus=$(nvidia-smi -L 2> /dev/null | wc -l)
if [ "$gpus" -ge 2 ]; then
  bus=$(run bench all_reduce --nproc-per-node 2 -b 256M -e 256M --dtype fp32 --json |
    python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["rows"][-1]["busbw_gbps"])')
  echo "all-reduce bus bandwidth, 2 GPUs, 256 MB fp32: $bus GB/s"
  for mode in ddp fsdp; do
    row "1.7B seq 2048, 1 seq/GPU, none, 2 GPUs $mode" --preset qwen3-1.7b --seq-len 2048 --recompute none \
      --mode "$mode" --nproc-per-node 2 --bus-gbps "$bus"
  done
fi
