#!/usr/bin/env bash
# Builds anvil (tools/setup.sh) and runs every CPU test. GPU tests (label "gpu") run where a
# GPU is present: tools/test.sh --gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${ANVIL_BUILD_DIR:-build}
if [ "${1:-}" = "--gpu" ]; then
  ctest --test-dir "$build" --output-on-failure -L gpu
else
  ctest --test-dir "$build" --output-on-failure -LE gpu -j "$(nproc)"
fi
