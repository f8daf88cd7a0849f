#!/usr/bin/env bash
# The loss curve of packed documents beside PyTorch's, in one run: chats prepared once by
# `anvil prepare --packing bfd` (best-fit-decreasing bins, each document whole), Qwen3-0.6B
# with the same random weights (anvil init, loaded by both), one block per step in file
# order, constant learning rate; anvil train on one GPU beside bench/packed_curve_reference.py
# (transformers on the same bins: position_ids per document, SDPA with a block-diagonal
# causal mask, bf16 autocast, AdamW as ref_train.py). Prints both curves, their ends, and the
# largest and mean relative difference; bench/curve_vs_reference.sh's wrapped blocks read
# 2.4e-3 mean and 7.5e-3 largest between the two trainers (README), the bf16 noise to expect.
# Usage:
#   bench/packed_curve.sh TOKENIZER_DIR CHATS [ANVIL_BINARY]
# TOKENIZER_DIR: a Qwen3 tokenizer (tokenizer.json, tokenizer_config.json with its chat
# template); CHATS: any --data source of anvil prepare ({"messages": [...]} rows: JSONL,
# Parquet, a folder, a hub dataset id in the local cache). Environment: STEPS (100), SEQ
# (2048), LR (3e-5), PRESET (qwen3-0.6b), PACKING (bfd), PYTHON (python3, with torch and
# transformers); results in $OUT (default: a new temporary folder).
set -uo pipefail
tok=${1:?usage: bench/packed_curve.sh TOKENIZER_DIR CHATS [ANVIL_BINARY]}
chats=${2:?CHATS}
anvil=$(readlink -f "${3:-build/anvil}")
here=$(dirname "$(readlink -f "$0")")
steps=${STEPS:-100} seq=${SEQ:-2048} lr=${LR:-3e-5} preset=${PRESET:-qwen3-0.6b} packing=${PACKING:-bfd}
py=${PYTHON:-python3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
run() {  # label command...: its output in $out/label.log, the last lines on failure
  local label=$1; shift
  "$@" > "$out/$label.log" 2>&1 || { echo "$label failed:"; tail -5 "$out/$label.log"; exit 1; }
}
run prepare "$anvil" prepare --tokenizer "$tok" --data "$chats" --seq-len "$seq" --packing "$packing" --out "$out/blocks"
grep "^wrote" "$out/prepare.log"
run init "$anvil" init --preset "$preset" --out "$out/model"
run anvil "$anvil" train --model "$out/model" --data "$out/blocks" --packing "$packing" --seq-len "$seq" \
  --steps "$steps" --lr "$lr" --no-shuffle --micro-batch 1 --log-every 1 --metrics "$out/anvil.jsonl"
run reference "$py" "$here/packed_curve_reference.py" --model "$out/model" --blocks "$out/blocks" --steps "$steps" \
  --lr "$lr" --losses "$out/curve_reference.json"
grep "^reference:" "$out/reference.log"
"$py" - "$out" <<'PY'
import json, sys
d = sys.argv[1]
anvil = [json.loads(x)["loss"] for x in open(d + "/anvil.jsonl") if '"loss"' in x]
ref = json.load(open(d + "/curve_reference.json"))
n = min(len(anvil), len(ref))
rel = [abs(a - r) / abs(r) for a, r in zip(anvil[:n], ref[:n])]
k = max(range(n), key=lambda i: rel[i])
print("anvil %.4f -> %.4f, reference %.4f -> %.4f over %d steps" % (anvil[0], anvil[n - 1], ref[0], ref[n - 1], n))
print("relative difference from the reference: largest %.2e (step %d), mean %.2e" % (rel[k], k + 1, sum(rel) / n))
print("the curves, every 5th step from step 5:")
for label, c in (("reference", ref), ("anvil", anvil)):
    print("%-10s %s" % (label, " ".join("%.4f" % x for x in c[4:n:5])))
PY
