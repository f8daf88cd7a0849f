#!/usr/bin/env bash
# The loss curve of bfd-split training beside transformers trained on the same bins, in one run:
# the same random weights (anvil init), the chats prepared once by anvil prepare --packing
# bfd-split, the blocks in file order, one per step, constant learning rate; anvil train on one
# GPU beside bench/bfd_reference.py (position_ids restarting per document, attention masked per
# document, the first token of each document not a target). Prints each curve's ends and their
# largest and mean relative difference; the bar (issue 24: within bf16 noise, as issue 11's
# curve) is 5e-3.
# Usage: bench/curve_bfd_vs_reference.sh TOKENIZER_DIR CHATS.jsonl [ANVIL_BINARY]
# TOKENIZER_DIR: a Qwen3 tokenizer with its chat template; CHATS.jsonl: {"messages": [...]} rows
# (data/demo/arithmetic.jsonl will do with its own tokenizer folder and PRESET tiny). Settings
# through the environment: STEPS (100), SEQ (512), LR (3e-5), PRESET (qwen3-0.6b); results go
# to $OUT (default: a new temporary folder).
set -uo pipefail
tok=${1:?usage: bench/curve_bfd_vs_reference.sh TOKENIZER_DIR CHATS.jsonl [ANVIL_BINARY]}
chats=${2:?CHATS.jsonl}
anvil=$(readlink -f "${3:-build/anvil}")
here=$(dirname "$(readlink -f "$0")")
steps=${STEPS:-100} seq=${SEQ:-512} lr=${LR:-3e-5} preset=${PRESET:-qwen3-0.6b}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
"$anvil" init --preset "$preset" --out "$out/model" > "$out/init.log" 2>&1 || { tail -3 "$out/init.log"; exit 1; }
"$anvil" prepare --tokenizer "$tok" --data "$chats" --seq-len "$seq" --packing bfd-split --out "$out/packed" || exit 1
"$anvil" train --model "$out/model" --data "$out/packed" --steps "$steps" --lr "$lr" --no-shuffle --micro-batch 1 \
  --log-every 1 --metrics "$out/anvil.jsonl" > "$out/anvil.log" 2>&1 || { tail -3 "$out/anvil.log"; exit 1; }
python3 "$here/bfd_reference.py" "$out/model" "$out/packed" "$steps" "$lr" "$out/curve_reference.json" \
  > "$out/reference.log" 2>&1 || { tail -3 "$out/reference.log"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
anvil = [json.loads(x)["loss"] for x in open(d + "/anvil.jsonl") if '"loss"' in x]
ref = json.load(open(d + "/curve_reference.json"))
assert len(anvil) == len(ref), (len(anvil), len(ref))
rel = [abs(a - r) / abs(r) for a, r in zip(anvil, ref)]
print("anvil     %.4f -> %.4f" % (anvil[0], anvil[-1]))
print("reference %.4f -> %.4f" % (ref[0], ref[-1]))
print("relative difference: max %.2e (step %d), mean %.2e; bar 5e-3" % (max(rel), rel.index(max(rel)) + 1,
                                                                      sum(rel) / len(rel)))
PY
