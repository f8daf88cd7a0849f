#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, clang's libFuzzer with ASan and UBSan) and runs each for a
# time, then prints per target its executions, seconds and the inputs that crashed it.
#
# Usage: tools/fuzz.sh [--seconds N] [--jobs J] [TARGET...]   fuzz (default: every target, 60 s, 1 job)
#        tools/fuzz.sh --build                                 only build the targets
#        tools/fuzz.sh --pack FILE.tar.gz                      build, then pack them to fuzz elsewhere
# Env: ANVIL_FUZZ_BUILD_DIR (default build-fuzz), ANVIL_FUZZ_OUT (default $build/fuzz-runs).
#
# Each target runs in libFuzzer's fork mode with J processes (-fork=J), which goes on past
# a crash, a timeout or running out of memory (-ignore_*), so that one run collects every
# finding; inputs the runs find interesting grow $out/corpus/TARGET (seeded from
# fuzz/corpus/TARGET), findings land in $out/crashes/TARGET. A finding is fixed in the parser
# and its input kept as fuzz/corpus/TARGET/regress-<what>, which the corpus tests replay.
#
# A pack is self-contained for another Linux machine (glibc 2.36 and libstdc++ 12 or newer):
# the binaries, the shared libraries they load beyond glibc's and the C++ runtime (libpcre2-8,
# libutf8proc, libsimdjson, libtomlplusplus, libsnappy, libzstd, libz), the corpora,
# dictionaries and fixtures, and this script, which runs them from there:
#     tar xzf anvil-fuzz.tar.gz && anvil-fuzz/fuzz.sh --seconds 3600 --jobs 16
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=60
jobs=1
mode=fuzz
pack=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --build) mode=build; shift ;;
    --pack) mode=pack; pack=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "tools/fuzz.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds$jobs" in *[!0-9]*) echo "tools/fuzz.sh: --seconds and --jobs take whole numbers" >&2; exit 2 ;; esac

if [ -d "$here/bin" ]; then  # a pack: the binaries, libraries and corpora beside this script
  bin=$here/bin
  fuzz_dir=$here/fuzz
  export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ANVIL_FUZZ_FIXTURES=$fuzz_dir/fixtures
  out=${ANVIL_FUZZ_OUT:-$here/runs}
else
  cd "$here/.."
  build=${ANVIL_FUZZ_BUILD_DIR:-build-fuzz}
  command -v clang++ >/dev/null || { echo "tools/fuzz.sh: needs clang++ (with libFuzzer)" >&2; exit 2; }
  CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_FUZZ=ON -DANVIL_TESTS=OFF \
    -DANVIL_CUDA=OFF >/dev/null
  cmake --build "$build" --target fuzz_targets
  bin=$build/fuzz
  fuzz_dir=$PWD/fuzz
  out=${ANVIL_FUZZ_OUT:-$build/fuzz-runs}
fi
[ ${#targets[@]} -gt 0 ] || targets=($(cd "$bin" && ls fuzz_* | sed 's/^fuzz_//'))
for t in "${targets[@]}"; do
  [ -x "$bin/fuzz_$t" ] || { echo "tools/fuzz.sh: no target '$t' (targets: $(cd "$bin" && ls fuzz_* | sed 's/^fuzz_//' | tr '\n' ' '))" >&2; exit 2; }
done
[ "$mode" = build ] && exit 0

if [ "$mode" = pack ]; then
  stage=$(mktemp -d)
  dest=$stage/anvil-fuzz
  mkdir -p "$dest/bin" "$dest/lib" "$dest/fuzz"
  for t in "${targets[@]}"; do cp "$bin/fuzz_$t" "$dest/bin/"; done
  # The shared libraries beyond glibc's (libc, libm, libpthread, libdl, librt, ld-linux) and the
  # C++ runtime's (libstdc++, libgcc_s), which every machine that runs C++ has, as new or newer.
  ldd "$dest"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    xargs -r -I{} cp -L {} "$dest/lib/"
  cp -r "$fuzz_dir/corpus" "$fuzz_dir/dict" "$fuzz_dir/fixtures" "$dest/fuzz/"
  cp "$here/fuzz.sh" "$dest/"
  tar czf "$pack" -C "$stage" anvil-fuzz
  rm -rf "$stage"
  echo "packed ${#targets[@]} targets into $pack ($(du -h "$pack" | cut -f1))"
  exit 0
fi

mkdir -p "$out"
printf '%-16s %14s %9s %8s  %s\n' target executions seconds corpus findings
for t in "${targets[@]}"; do
  corpus=$out/corpus/$t
  crashes=$out/crashes/$t
  mkdir -p "$corpus" "$crashes"
  cp -n "$fuzz_dir/corpus/$t"/* "$corpus/" 2>/dev/null || true
  dict=()
  [ -f "$fuzz_dir/dict/$t.dict" ] && dict=(-dict="$fuzz_dir/dict/$t.dict")
  log=$out/$t.log
  start=$(date +%s)
  # -timeout: an input that takes 10 s is a hang; the 2 GB memory limit is libFuzzer's default.
  "$bin/fuzz_$t" "$corpus" "${dict[@]}" -fork="$jobs" -max_total_time="$seconds" -timeout=10 -print_funcs=0 \
    -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -artifact_prefix="$crashes/" >"$log" 2>&1 || true
  took=$(($(date +%s) - start))
  # Fork mode's status lines read "#<executions>: cov: ... corp: <n> ...".
  execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  findings=$(ls "$crashes" | wc -l)
  printf '%-16s %14s %9s %8s  %s\n' "$t" "${execs:-?}" "$took" "$(ls "$corpus" | wc -l)" "$findings"
  ls "$crashes" | sed "s|^|    $crashes/|"
done
echo "logs: $out/TARGET.log; replay a finding: $bin/fuzz_TARGET FILE"
