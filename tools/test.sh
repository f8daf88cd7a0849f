#!/usr/bin/env bash
# Builds anvil (tools/setup.sh) and runs every CPU test, the include-layer check
# (tools/check_layers.py) among them, but the kill battery (label "battery", run by hand:
# docs/building.md). GPU tests (label "gpu") run where a GPU is present:
# tools/test.sh --gpu; with ANVIL_REQUIRE_CUDNN=1 (a build with cuDNN on a Hopper or newer GPU)
# the cuDNN attention tests fail where cuDNN cannot run, instead of skipping. The wheel's test
# (label "wheel": a CPU build of its own and the demo) runs apart: ctest --test-dir build -L wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
build=${ANVIL_BUILD_DIR:-build}
if [ "${1:-}" = "--gpu" ]; then
  ctest --test-dir "$build" --output-on-failure -L gpu
else
  ctest --test-dir "$build" --output-on-failure -LE 'gpu|battery|wheel' -j "$(nproc)"
fi
