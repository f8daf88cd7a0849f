#!/usr/bin/env bash
# Issue 25's GPU curve: STEPS steps of PRESET (fresh weights, --seed 1) at sequence SEQ on real
# long text: Python's docstrings as chats (bench/docstring_chats.py), concatenated and cut every
# SEQ tokens (`anvil prepare --packing wrapped`), the same blocks in the same order for every run:
#   plain      --recompute full, the MLP untiled, checkpoints on the GPU;
#   plain2     the same run again;
#   tiled      --recompute full --mlp-tile TILE --offload-activations.
# At this length attention's backward runs cuDNN's non-deterministic algorithm (its dP would pass
# the 4 GiB bound), so plain and plain2 differ by the run's own bf16 noise; the script prints
# tiled's mean and largest |loss difference| from plain beside plain2's, and each run's speed.
# Usage: bench/long_curve.sh TOKENIZER_DIR [WORKDIR=$(mktemp -d)]
# Environment: ANVIL (build/anvil), PRESET (qwen3-0.6b), STEPS (50), SEQ (16384), TILE (2048),
# LR (3e-5).
set -euo pipefail
tok=${1:?usage: bench/long_curve.sh TOKENIZER_DIR [WORKDIR]}
work=${2:-$(mktemp -d)}
anvil=${ANVIL:-build/anvil} preset=${PRESET:-qwen3-0.6b} steps=${STEPS:-50} seq=${SEQ:-16384} tile=${TILE:-2048}
lr=${LR:-3e-5}
mkdir -p "$work"
python3 "$(dirname "$0")/docstring_chats.py" "$work/chats.jsonl" 8e6
"$anvil" prepare --tokenizer "$tok" --data "$work/chats.jsonl" --seq-len "$seq" --packing wrapped \
  --out "$work/blocks" 2>&1 | tail -2
run() {
  local name=$1; shift
  if ! "$anvil" train --preset "$preset" --data "$work/blocks" --packing wrapped --seq-len "$seq" --steps "$steps" \
    --lr "$lr" --warmup 5 --schedule constant --seed 1 --log-every 1 --recompute full --metrics "$work/$name.jsonl" \
    "$@" > "$work/$name.log" 2>&1; then
    echo "$name: did not train: $(grep -m1 -iE 'error|refused' "$work/$name.log" || tail -1 "$work/$name.log")"
    exit 1
  fi
  echo "$name ($*): $(grep "done:" "$work/$name.log")"
}
run plain --mlp-tile "$seq"
run plain2 --mlp-tile "$seq"
run tiled --mlp-tile "$tile" --offload-activations
python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def curve(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r and "step" in r}
plain = curve("plain")
print(f"plain: loss {plain[min(plain)]:.4f} -> {plain[max(plain)]:.4f} over {len(plain)} steps")
for name in ("plain2", "tiled"):
    c = curve(name)
    assert sorted(c) == sorted(plain), f"{name} logged other steps than plain"
    d = {s: abs(c[s] - plain[s]) for s in plain}
    worst = max(d, key=d.get)
    print(f"{name} against plain: mean |loss difference| {statistics.mean(d.values()):.2e}, largest {d[worst]:.2e} "
          f"at step {worst} (loss {plain[worst]:.4f})")
PY
