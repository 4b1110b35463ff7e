#!/usr/bin/env bash
# Installs the Debian packages tiergen builds and tests against, skipping those
# already present. Needs root (or sudo) on a Debian 12 machine.
# Not for a GPU host building against a pip torch: Debian's libtorch-dev (1.13) puts
# ATen/c10/torch headers in /usr/include, behind the wheel's include folders, where
# they fill in any header the wheel lacks and mix two versions. There, use
# tools/fetch-build-deps.sh (which leaves LibTorch out) and tools/gpu-check.sh, or set
# TIERGEN_NO_LIBTORCH_DEV=1 here.
set -euo pipefail
libtorch=libtorch-dev
[ "${TIERGEN_NO_LIBTORCH_DEV:-0}" = 1 ] && libtorch=""
packages=(
  g++ cmake ninja-build ccache
  $libtorch libglpk-dev libcli11-dev libspdlog-dev libgtest-dev nlohmann-json3-dev libpcre2-dev
  libgloo-dev   # c10d's Gloo headers: multi-process pipelines (src/dist)
  python3       # tools/trace-summary.py, run by the timeline tests
  python3-jinja2   # the chat template reference (tests/chat/render_reference.py)
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
