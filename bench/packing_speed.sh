#!/usr/bin/env bash
# Tokens/s of real tokens with --packing bfd-split against wrapped, one GPU, Qwen3-1.7B (fresh
# weights), sequence 2048, on the Capybara-shaped chats of bench/packing_padding.sh (which
# prepares them): STEPS steps of each (the first 10 not timed), then the ratio. The issue's
# bar: bfd-split >= 0.97 x wrapped (padding excluded from bfd's count).
# Usage: bench/packing_speed.sh PYTHON TOKENIZER_DIR [WORKDIR=$(mktemp -d)]; ANVIL, STEPS (40).
set -euo pipefail
py=$1 tok=$2 work=${3:-$(mktemp -d)}
anvil=${ANVIL:-build/anvil} steps=${STEPS:-40}
ANVIL=$anvil "$(dirname "$0")/packing_padding.sh" "$py" "$tok" "$work" | grep capybara_like
for packing in wrapped bfd-split; do
  "$anvil" train --preset qwen3-1.7b --data "$work/out-capybara_like-$packing" --seq-len 2048 --steps "$steps" \
    --lr 1e-5 --log-every 10 > "$work/train-$packing.log" 2>&1 || { tail -5 "$work/train-$packing.log"; exit 1; }
  grep "done:" "$work/train-$packing.log" | sed "s/^/$packing: /"
done
"$py" - "$work" <<'PY'
import re, sys
tps = {p: float(re.search(r"done: \d+ steps, ([\d,]+) tokens/s", open(f"{sys.argv[1]}/train-{p}.log").read())
                 .group(1).replace(",", "")) for p in ("wrapped", "bfd-split")}
print("bfd-split / wrapped real tokens/s: %.3f (bar 0.97)" % (tps["bfd-split"] / tps["wrapped"]))
PY
