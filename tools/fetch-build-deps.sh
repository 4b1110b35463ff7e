#!/usr/bin/env bash
# Downloads the .deb files of the Debian packages tiergen builds against (everything
# but LibTorch and CUDA) into DIR (default .deps), for a GPU host without package
# access, which brings its own LibTorch (pip torch) and CUDA toolkit. Run it on a
# Debian 12 machine that reaches the archive, then copy the project with DIR to the
# GPU host, where tools/gpu-check.sh (or tools/unpack-build-deps.sh) unpacks them.
# libtorch-dev is deliberately absent: its 1.13 headers in /usr/include would fill in
# any header pip torch's include folders lack and mix two LibTorch versions.
# Usage: tools/fetch-build-deps.sh [DIR] [MORE_DEBIAN_PACKAGES...]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "${1:-$repo/.deps}" && cd "${1:-$repo/.deps}" && pwd)
[ $# -gt 0 ] && shift
packages=(
  libglpk-dev libglpk40 libamd2 libcolamd2 libsuitesparseconfig5 libgmp10 libltdl7
  libcli11-dev
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev googletest
  nlohmann-json3-dev
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  ninja-build
  "$@"
)
[ -n "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -v lock | head -1)" ] || apt-get update -q
(cd "$dir" && apt-get download -q "${packages[@]}")
cp "$repo/tools/unpack-build-deps.sh" "$dir/"
echo "$(ls -1 "$dir"/*.deb | wc -l) packages in $dir, with unpack-build-deps.sh beside them"
