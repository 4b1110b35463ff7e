#!/usr/bin/env bash
# Installs the Debian packages tiergen builds and tests against, skipping those
# already present. Needs root (or sudo) on a Debian 12 machine.
set -euo pipefail
packages=(
  g++ cmake ninja-build ccache
  libtorch-dev libglpk-dev libcli11-dev libspdlog-dev libgtest-dev nlohmann-json3-dev libpcre2-dev
  clang libclang-rt-dev   # libFuzzer and sanitizer runtimes for the fuzz targets
  # Debian's LibTorch calls whatever provides libblas.so.3; without this package that
  # is netlib's reference sgemm (OPT-125M on --device cpu: 14x slower prefill compute,
  # 7x lower throughput). The OpenMP build shares LibTorch's OpenMP runtime, so
  # threads are not oversubscribed.
  libopenblas0-openmp
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The tokenizer reference tests run JavaScript tokenizers with node and npm.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
