#!/usr/bin/env bash
# Builds anvil (tools/setup.sh) and runs every CPU test, the include-layer check
# (tools/check_layers.py) among them, but the kill battery (label "battery", run by hand:
# docs/building.md). The wheel's test (label "wheel": a CPU build of its own and the demo) runs
# apart: ctest --test-dir build -L wheel.
#
# Usage: tools/test.sh              the CPU tests (what CI runs)
#        tools/test.sh --gpu        every GPU test binary, one line each with its counts
#                                   (tools/gpu_tests.sh); with ANVIL_REQUIRE_CUDNN=1 (a build with
#                                   cuDNN on a Hopper or newer GPU) the cuDNN attention tests
#                                   fail where cuDNN cannot run, instead of skipping
#        tools/test.sh --sanitize   the CPU tests under ASan and UBSan, then the comm, launcher,
#                                   rendezvous and asynchronous-save tests under TSan
#                                   (tools/sanitize.sh --all, then --thread; builds of their own)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ;;
  --gpu|--sanitize) ;;
  *) echo "tools/test.sh: unknown option '$1' (--gpu, --sanitize or nothing)" >&2; exit 2 ;;
esac
if [ "${1:-}" = "--sanitize" ]; then
  tools/sanitize.sh --all
  exec tools/sanitize.sh --thread
fi
tools/setup.sh
build=${ANVIL_BUILD_DIR:-build}
if [ "${1:-}" = "--gpu" ]; then
  exec tools/gpu_tests.sh "$build/tests"
fi
ctest --test-dir "$build" --output-on-failure -LE 'gpu|battery|wheel' -j "$(nproc)"
