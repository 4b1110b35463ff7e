#!/usr/bin/env bash
# Unpacks the .deb files in DIR (from tools/fetch-build-deps.sh) into PREFIX, never
# into /, and prints the environment a CMake configure and the built programs need.
# Usage: eval "$(tools/unpack-build-deps.sh DIR PREFIX)"
set -euo pipefail
dir=${1:?usage: unpack-build-deps.sh DIR PREFIX}
prefix=${2:?usage: unpack-build-deps.sh DIR PREFIX}
ls "$dir"/*.deb > /dev/null 2>&1 || { echo "no .deb files in $dir (run tools/fetch-build-deps.sh)" >&2; exit 1; }
mkdir -p "$prefix"
# dpkg-deb where there is one; else ar (binutils) and tar.
unpack() {
  if command -v dpkg-deb > /dev/null; then dpkg-deb -x "$1" "$prefix"; return; fi
  local member
  member=$(ar t "$1" | grep '^data\.tar')
  ar p "$1" "$member" | case $member in
      *.xz) tar -xJ -C "$prefix" ;; *.zst) zstd -dc | tar -x -C "$prefix" ;; *.gz) tar -xz -C "$prefix" ;; *) tar -x -C "$prefix" ;;
    esac
}
for f in "$dir"/*.deb; do unpack "$f"; done
lib="$prefix/usr/lib/x86_64-linux-gnu"
echo "export DEPS_PREFIX='$prefix/usr'"
echo "export PATH='$prefix/usr/bin'\${PATH:+:\$PATH}"
echo "export CMAKE_PREFIX_PATH='$prefix/usr:$lib/cmake:$prefix/usr/share/cmake'\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
echo "export LD_LIBRARY_PATH='$lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export CPATH='$prefix/usr/include'\${CPATH:+:\$CPATH}"
echo "export LIBRARY_PATH='$lib'\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
