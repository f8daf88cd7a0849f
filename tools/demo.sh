#!/usr/bin/env bash
# The demo: builds anvil (tools/setup.sh) and trains the tiny preset from fresh weights on
# the bundled arithmetic conversations (data/demo), on the GPU when there is one, else on
# the CPU. The loss falls from about 5.8 to well under half of that; the trained model is
# written to build/demo-model as a Hugging Face folder. Extra flags go to `anvil train`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --no-oracles  # the test oracles' 5 GB virtualenv is for tools/test.sh
build=${ANVIL_BUILD_DIR:-build}
exec "$build/anvil" train --preset tiny --tokenizer data/demo --data data/demo/arithmetic.jsonl \
  --seq-len 128 --micro-batch 8 --steps 100 --lr 3e-3 --warmup 10 --schedule cosine --log-every 10 \
  --data-cache "$build/demo-cache" --export "$build/demo-model" "$@"
