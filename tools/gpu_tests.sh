#!/usr/bin/env bash
# Runs every GPU test binary (gpu_test_*) of a folder, one after another, and prints one line
# per binary with its counts (passed, failed, skipped, seconds), then the totals. Exit 1 when
# a binary failed or crashed, 2 when the folder holds none.
#
# Usage: tools/gpu_tests.sh BIN_DIR [BINARY...]   (default: every gpu_test_* in BIN_DIR)
# Env: ANVIL_GPU_TEST_LOGS (default: a temporary folder): each binary's whole output, BINARY.log.
# tools/test.sh --gpu runs it on the build's tests/ folder; the GPU tests read ANVIL_TEST_BINARY,
# ANVIL_TEST_SHARED_DIR and ANVIL_TEST_DATA_DIR where the binaries run away from a build.
set -uo pipefail
dir=${1:?usage: tools/gpu_tests.sh BIN_DIR [BINARY...]}
shift
binaries=("$@")
if [ ${#binaries[@]} -eq 0 ]; then
  mapfile -t binaries < <(cd "$dir" && ls | grep -E '^gpu_test_[a-z0-9_]+$')
fi
[ ${#binaries[@]} -gt 0 ] || { echo "tools/gpu_tests.sh: no gpu_test_* binaries in $dir" >&2; exit 2; }
logs=${ANVIL_GPU_TEST_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
# gtest's summary lines: "[  PASSED  ] 12 tests.", "[  FAILED  ] 1 test, listed below:",
# "[  SKIPPED ] 2 tests, listed below:".
count() { grep -E "^\[  $1 *\] [0-9]+ test" "$2" | head -1 | grep -Eo '[0-9]+' | head -1; }
printf '%-30s %7s %7s %8s %9s\n' binary passed failed skipped seconds
total_pass=0 total_fail=0 total_skip=0 bad=()
for b in "${binaries[@]}"; do
  log=$logs/$b.log
  start=$(date +%s%N)
  "$dir/$b" --gtest_color=no >"$log" 2>&1
  rc=$?
  tenths=$((($(date +%s%N) - start) / 100000000))
  pass=$(count PASSED "$log"); fail=$(count FAILED "$log"); skip=$(count SKIPPED "$log")
  pass=${pass:-0} fail=${fail:-0} skip=${skip:-0}
  # A binary that died before gtest's summary (a crash, an abort) counts as failed.
  if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail="exit$rc"; fi
  printf '%-30s %7s %7s %8s %7d.%d\n' "$b" "$pass" "$fail" "$skip" $((tenths / 10)) $((tenths % 10))
  total_pass=$((total_pass + pass)); total_skip=$((total_skip + skip))
  if [ "$fail" != 0 ]; then
    bad+=("$b")
    case "$fail" in exit*) ;; *) total_fail=$((total_fail + fail)) ;; esac
    grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | sed 's/^/    /'
  fi
done
printf '%-30s %7s %7s %8s\n' "total (${#binaries[@]} binaries)" "$total_pass" "$total_fail" "$total_skip"
echo "logs: $logs"
[ ${#bad[@]} -eq 0 ] || { echo "failed: ${bad[*]}" >&2; exit 1; }
