#!/usr/bin/env bash
# Builds anvil with AddressSanitizer and UndefinedBehaviorSanitizer (-DANVIL_SANITIZE=
# address,undefined, CPU only) and runs CPU tests under them; the first report fails the test
# (no recovery, halt_on_error), leaks included.
#
# Usage: tools/sanitize.sh [TEST...]   the given tests/test_*.cpp binaries (default: the
#                                      parsers': data, tokenizer, templates, Parquet, config,
#                                      model and checkpoint files)
#        tools/sanitize.sh --all       every CPU test, as tools/test.sh runs them, but the demo's
#                                      three-minute bound (about 20 min of two cores to build)
#        tools/sanitize.sh --thread    ThreadSanitizer instead (a build of its own): the tests
#                                      whose code runs threads and processes against each other,
#                                      the comm, the launcher, the rendezvous and the asynchronous
#                                      save (or the tests named after --thread)
# Env: ANVIL_ASAN_BUILD_DIR (default build-asan), ANVIL_TSAN_BUILD_DIR (default build-tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ANVIL_ASAN_BUILD_DIR:-build-asan}
tests=()
all=false
thread=false
for a in "$@"; do
  case "$a" in
    --all) all=true ;;
    --thread) thread=true ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "tools/sanitize.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
    *) tests+=("$a") ;;
  esac
done
if $thread; then
  $all && { echo "tools/sanitize.sh: --all and --thread are separate runs" >&2; exit 2; }
  build=${ANVIL_TSAN_BUILD_DIR:-build-tsan}
  [ ${#tests[@]} -gt 0 ] || tests=(test_comm test_comm_launcher test_comm_rendezvous test_async_save)
  sanitizers=thread
else
  sanitizers=address,undefined
fi
[ ${#tests[@]} -gt 0 ] || tests=(test_data_parquet test_data_tokenizer test_data_tokenizer_load test_data_chat_template
                                 test_data_shapes test_data_cli test_config test_model_io test_checkpoint)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_CUDA=OFF -DANVIL_SANITIZE=$sanitizers -DANVIL_TEST_TIMEOUT=1800 \
  -DANVIL_TEST_PYTHON="${ANVIL_TEST_PYTHON:-$PWD/build/pyenv/bin/python}" >/dev/null
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if $all; then
  cmake --build "$build"
  # Not the demo's test: it holds the demo to three minutes of two cores, a bound on time that
  # the sanitizers' slowdown breaks (its code runs under them in the train, data and generate
  # tests). Each test gets 30 minutes (ANVIL_TEST_TIMEOUT), not CI's 10: the multi-rank tests
  # run several times slower.
  ctest --test-dir "$build" --output-on-failure -LE 'gpu|battery|wheel' \
    -E '^Demo\.AnswersHeldOutSumsAfterUnderThreeMinutes$' -j "$(nproc)"
  exit
fi
cmake --build "$build" --target anvil "${tests[@]}"
failed=()
for t in "${tests[@]}"; do
  echo "== $t"
  "$build/tests/$t" --gtest_brief=1 || failed+=("$t")
done
[ ${#failed[@]} -eq 0 ] || { echo "failed under $sanitizers: ${failed[*]}" >&2; exit 1; }
$thread && echo "passed under TSan: ${tests[*]}" || echo "passed under ASan and UBSan: ${tests[*]}"
