#!/usr/bin/env bash
# Installs what anvil needs to build (Debian/Ubuntu packages, only those missing) and
# builds it into build/ with the CUDA backend wherever a CUDA toolkit is found.
# Usage: tools/setup.sh   (env: ANVIL_BUILD_DIR, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libgtest-dev libzstd-dev zlib1g-dev libpcre2-dev libutf8proc-dev libsimdjson-dev libsnappy-dev)
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
# The data tests' parity oracles (npm packages of Hugging Face's reference tokenizer and Jinja),
# when node is present; without them those tests are skipped and say why.
if command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/oracle/node_modules/@huggingface/jinja ]; then
    (cd tests/oracle && npm ci --no-audit --no-fund --loglevel=error) ||
      echo "warning: npm ci in tests/oracle failed; the oracle parity tests will be skipped"
  fi
else
  echo "note: node/npm not found; the oracle parity tests (tests/test_data_oracle.cpp) will be skipped"
fi
build=${ANVIL_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
