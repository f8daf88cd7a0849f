#!/usr/bin/env bash
# The wheel (pip install .; docs/building.md): builds the CPU wheel with pip, installs it into a
# fresh virtualenv without the network, and checks that the anvil on the virtualenv's PATH is a
# native program, that the binary it runs loads no library from outside the wheel but the C and
# C++ runtimes (a machine without Debian's pcre2, simdjson, toml++, ... runs it: the GPU
# machine is one), and that the demo passes with it (tools/demo.sh with ANVIL_BIN).
# Usage: tests/test_wheel.sh WORK_DIR PYTHON; PYTHON (env ANVIL_TEST_PYTHON overrides it) builds
# the wheel and needs scikit-build-core (tools/requirements-test.txt): exit 77 (a skip) without
# it, a failure under CI=true. A ctest label of its own, "wheel", outside tools/test.sh's run:
# ctest --test-dir build -L wheel. CMAKE_ARGS reaches the build
# (CMAKE_ARGS=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache).
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=$1
python=${ANVIL_TEST_PYTHON:-$2}

if ! "$python" -c "import scikit_build_core" 2>/dev/null; then
  echo "scikit-build-core is not installed in $python (tools/setup.sh installs it)"
  if [ "${CI:-}" = "true" ] || [ "${CI:-}" = "1" ]; then exit 1; fi
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/demo"

SECONDS=0
ANVIL_CUDA=OFF "$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/dist" \
  -Cbuild-dir="$work/build" "$source_dir"
wheel=$(echo "$work"/dist/anvil-*.whl)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in ${SECONDS}s"

SECONDS=0
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$wheel"
echo "installed in ${SECONDS}s"
anvil=$work/venv/bin/anvil

if [ "$(head -c 4 "$anvil")" != $'\x7fELF' ]; then
  echo "FAIL: $anvil is not a native program:"
  head -n 3 "$anvil"
  exit 1
fi
binary=$(echo "$work"/venv/lib/python3*/site-packages/anvil/bin/anvil)
bundled=$(realpath "$(dirname "$binary")/../lib")
outside=$(ldd "$binary" | awk '$2 == "=>" { print $3 }' | xargs -r realpath -m |
  grep -v "^$bundled/" | grep -Ev '/lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so' || true)
if [ -n "$outside" ]; then
  echo "FAIL: the installed binary loads libraries from outside the wheel:"
  echo "$outside"
  exit 1
fi
ldd "$binary" | awk '$2 == "=>" { print "  " $1 " => " $3 }'

ANVIL_BIN=$anvil ANVIL_BUILD_DIR=$work/demo "$source_dir/tools/demo.sh"
