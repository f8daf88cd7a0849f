#!/usr/bin/env bash
# Installs what anvil needs to build (Debian/Ubuntu packages, only those missing), sets up the
# Python test oracles in a virtualenv, and builds anvil into build/ with the CUDA backend
# wherever a CUDA toolkit is found.
# Usage: tools/setup.sh [--no-oracles]   (env: ANVIL_BUILD_DIR, default build; ANVIL_PYENV,
# default $build/pyenv). --no-oracles builds without setting up the test oracles (the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libgtest-dev libzstd-dev zlib1g-dev libpcre2-dev libutf8proc-dev libsimdjson-dev python3-venv libtomlplusplus-dev libsnappy-dev
          chromium)  # chromium: renders anvil report's page in tests/test_report.cpp
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
build=${ANVIL_BUILD_DIR:-build}
# The test oracles (transformers and PyTorch on the CPU, tokenizers, jinja2, safetensors,
# pyarrow): a virtualenv with the pinned versions of tools/requirements-test.txt. pip runs
# only when one of them is missing or at another version. Where that fails (no network),
# the build goes on: the oracle tests then skip, or fail under CI=true, saying why.
pyenv=$(realpath -m "${ANVIL_PYENV:-$build/pyenv}")
if [ "${1:-}" = "--no-oracles" ]; then
  :
elif [ -n "${1:-}" ]; then
  echo "tools/setup.sh: unknown argument '$1' (--no-oracles or nothing)" >&2
  exit 2
else
  [ -x "$pyenv/bin/python" ] || python3 -m venv "$pyenv"
  if ! "$pyenv/bin/python" tools/check_requirements.py tools/requirements-test.txt; then
    echo "installing the test oracles into $pyenv (tools/requirements-test.txt)"
    "$pyenv/bin/python" -m pip install --quiet --no-compile --disable-pip-version-check -r tools/requirements-test.txt ||
      echo "warning: installing the test oracles failed; the oracle tests will skip (fail under CI=true)"
  fi
fi
# cuDNN's fused attention needs the header-only cudnn-frontend (PyPI's nvidia-cudnn-frontend
# wheel carries it under include/), installed into the build folder where a CUDA toolkit
# with cuDNN is present. Without it the build uses anvil's own attention kernel.
frontend="$build/deps/cudnn_frontend"
if [ ! -f "$frontend/include/cudnn_frontend.h" ] &&
   { [ -f /usr/local/cuda/include/cudnn.h ] || [ -f /usr/include/cudnn.h ] || [ -f /usr/include/x86_64-linux-gnu/cudnn.h ]; }; then
  python3 -m pip install -q --no-deps --target "$frontend" nvidia-cudnn-frontend==1.32.0 ||
    echo "warning: could not install the cudnn-frontend headers; attention will use anvil's own kernel"
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANVIL_TEST_PYTHON="$pyenv/bin/python" >/dev/null
cmake --build "$build" -j "$(nproc)"
