#!/usr/bin/env bash
# Issue 26's loss goal on one GPU: the same blocks trained STEPS steps with the blocks' linear
# layers in bf16 (--fp8 off) and in FP8 (tensorwise; rowwise where the GPU runs it), same
# fresh weights (--seed), same order. The text is real English prose found on any machine
# with Python: the docstrings of its installed modules as chats (bench/docstring_chats.py, up
# to 4 M characters), packed at sequence SEQ by `anvil prepare` with the Qwen3 tokenizer.
# Prints, per FP8 mode, the mean |loss difference| over the last 100 steps as a fraction of
# bf16's mean loss there (the issue's bar: <= 1%), the largest step difference, and
# gradient-norm spikes (steps whose norm is over 3x the median of the 20 before it), for each
# run.
# Usage: bench/fp8_curve.sh TOKENIZER_DIR [WORKDIR=$(mktemp -d)]
# Environment: ANVIL (build/anvil), PRESET (qwen3-0.6b), STEPS (300), SEQ (2048), LR (3e-5),
# MODES ("tensorwise rowwise").
set -euo pipefail
tok=${1:?usage: bench/fp8_curve.sh TOKENIZER_DIR [WORKDIR]}
work=${2:-$(mktemp -d)}
anvil=${ANVIL:-build/anvil} preset=${PRESET:-qwen3-0.6b} steps=${STEPS:-300} seq=${SEQ:-2048} lr=${LR:-3e-5}
mkdir -p "$work"
python3 "$(dirname "$0")/docstring_chats.py" "$work/chats.jsonl"
"$anvil" prepare --tokenizer "$tok" --data "$work/chats.jsonl" --seq-len "$seq" --out "$work/blocks" 2>&1 | tail -3
modes=(off ${MODES:-tensorwise rowwise})
for fp8 in "${modes[@]}"; do
  if ! "$anvil" train --preset "$preset" --data "$work/blocks" --seq-len "$seq" --steps "$steps" --lr "$lr" \
    --warmup 10 --schedule constant --seed 1 --log-every 1 --fp8 "$fp8" --metrics "$work/$fp8.jsonl" \
    > "$work/$fp8.log" 2>&1; then
    echo "--fp8 $fp8: did not train: $(grep -m1 -iE 'error|refused|unsupported' "$work/$fp8.log" || tail -1 "$work/$fp8.log")"
    rm -f "$work/$fp8.jsonl"
  fi
  grep "done:" "$work/$fp8.log" | sed "s/^/--fp8 $fp8: /" || true
done
python3 - "$work" "${modes[@]}" <<'PY'
import json, os, statistics, sys
work, modes = sys.argv[1], sys.argv[2:]
def curve(mode):
    path = f"{work}/{mode}.jsonl"
    if not os.path.exists(path):
        return None
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return {r["step"]: r for r in rows if "loss" in r and "grad_norm" in r}
def spikes(c):
    steps = sorted(c)
    norms = [c[s]["grad_norm"] for s in steps]
    return [(steps[i], norms[i]) for i in range(20, len(norms)) if norms[i] > 3 * statistics.median(norms[i - 20:i])]
base = curve("off")
last = sorted(base)[-100:]
bl = statistics.mean(base[s]["loss"] for s in last)
print(f"bf16: loss {base[min(base)]['loss']:.4f} -> {base[max(base)]['loss']:.4f}, mean over the last 100 steps "
      f"{bl:.4f}; grad-norm spikes: {spikes(base) or 'none'}")
for mode in modes[1:]:
    c = curve(mode)
    if c is None:
        print(f"{mode}: no curve")
        continue
    d = [abs(c[s]["loss"] - base[s]["loss"]) for s in last]
    worst = max(sorted(base), key=lambda s: abs(c[s]["loss"] - base[s]["loss"]))
    print(f"{mode}: loss {c[min(c)]['loss']:.4f} -> {c[max(c)]['loss']:.4f}; mean |difference| over the last 100 "
          f"steps {statistics.mean(d):.5f} = {100 * statistics.mean(d) / bl:.3f}% of bf16's loss (bar 1%); largest "
          f"{abs(c[worst]['loss'] - base[worst]['loss']):.4f} at step {worst}; grad-norm spikes: {spikes(c) or 'none'}")
PY
