#!/usr/bin/env bash
# Builds tiergen's CUDA path against a CUDA LibTorch 2.x on a machine without a GPU:
# a Debian trixie root (main, contrib, non-free) with libtorch-cuda-dev 2.6 and
# nvidia-cuda-toolkit 12.4 (about 2.7 GB to download; not part of every CI run).
# Configures with the CUDA path on, compiles and links tiergen, the tests, the tools
# and the kernels, prints what the binary links (ldd), and checks that the binary
# starts and refuses --device cuda cleanly where there is no GPU. Needs root. The root
# (.cache/trixie-cuda, git-ignored) and its build folder are reused by later runs, so
# a re-run after a source change rebuilds only what changed.
#
# Usage: tools/check-cuda-build.sh [--prepare-only]
# Environment: TIERGEN_TRIXIE_CUDA_ROOT (default .cache/trixie-cuda),
#   TIERGEN_DEBIAN_MIRROR (default: this machine's apt archive).
#
# Two parts of the root are stand-ins, good for linking only:
# - nvidia-cudnn is a downloader package: its postinst fetches cuDNN from NVIDIA when
#   its licence question is answered "I Agree". The answer is preseeded "I Decline"
#   and a stub libcudnn.so.9 (empty functions for the cudnn* symbols libtorch_cuda
#   imports) is put where the package's link points, so the link and ldd work.
# - there is no GPU: the binary must refuse --device cuda with a message.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/tools/trixie-root.sh"
trixie_need_root "$0"
root=${TIERGEN_TRIXIE_CUDA_ROOT:-$repo/.cache/trixie-cuda}
prepare_only=0
[ "${1:-}" = --prepare-only ] && prepare_only=1

packages=(libtorch-cuda-dev nvidia-cuda-toolkit g++ cmake ninja-build binutils
  libglpk-dev libcli11-dev libspdlog-dev libgtest-dev nlohmann-json3-dev libpcre2-dev
  libgloo-cuda-dev)  # c10d's Gloo headers; libgloo-dev conflicts with the CUDA LibTorch's libgloo-cuda-0
libdir=/usr/lib/x86_64-linux-gnu

export TRIXIE_TIMINGS
TRIXIE_TIMINGS=$(mktemp)
trap 'trixie_unmount "$root"; rm -f "$TRIXIE_TIMINGS"' EXIT
start=$SECONDS

# A shared library exporting every cudnn* function libtorch_cuda imports (each an
# empty function: never called on a machine without a GPU), under the symbol version
# libtorch_cuda asks for (cudnnCreate@libcudnn.so.9). Rebuilt on every run (< 1 s).
make_cudnn_stub() {
  local target
  target=$(readlink -f "$root$libdir/libcudnn.so.9" 2>/dev/null || true)
  [ -n "$target" ] || target=$root$libdir/libcudnn.so.9
  if [ -e "$target" ] && ! grep -q tiergen-cudnn-stub "$target" 2>/dev/null; then
    echo "a real libcudnn.so.9 is present; no stub"
    return 0
  fi
  local torch_cuda=$libdir/libtorch_cuda.so
  trixie_run "$root" sh -c "nm -D --undefined-only $torch_cuda | awk '{print \$2}' | grep '^cudnn' | sed 's/@.*//' | sort -u" \
    > "$root/tmp/cudnn-symbols.txt"
  {
    echo 'const char tiergen_cudnn_stub[] = "tiergen-cudnn-stub: link checks only";'
    sed 's/.*/void &(void) {}/' "$root/tmp/cudnn-symbols.txt"
  } > "$root/tmp/cudnn-stub.c"
  echo 'libcudnn.so.9 { global: *; };' > "$root/tmp/cudnn-stub.map"
  rm -f "$target"
  trixie_run "$root" gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 -Wl,--version-script=/tmp/cudnn-stub.map \
    -o "${target#"$root"}" /tmp/cudnn-stub.c
  echo "stub libcudnn.so.9 with $(wc -l < "$root/tmp/cudnn-symbols.txt") cudnn symbols at ${target#"$root"}"
}

prepare() {
  trixie_make_root "$root" main,contrib,non-free,non-free-firmware
  trixie_mount "$root"
  echo "nvidia-cudnn nvidia-cudnn/question select I Decline" | trixie_run "$root" debconf-set-selections
  trixie_install "$root" "${packages[@]}"
}
trixie_time root+apt prepare
trixie_time cudnn-stub make_cudnn_stub
if [ "$prepare_only" = 1 ]; then cat "$TRIXIE_TIMINGS"; exit 0; fi

trixie_copy_sources "$repo" "$root" src/tiergen
configure() {
  trixie_run "$root" cmake -S /src/tiergen -B /build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTIERGEN_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DTIERGEN_CUDA_ARCHITECTURES=90 \
    -DTIERGEN_BUILD_FUZZERS=OFF -DTIERGEN_BUILD_BENCHES=OFF > "$root/tmp/configure.log" 2>&1 ||
    { cat "$root/tmp/configure.log"; return 1; }
  grep -E 'tiergen:|Added CUDA NVCC flags|CUDA_ARCHITECTURES|conflicting|nvToolsExt' "$root/tmp/configure.log" || true
}
trixie_time configure configure
trixie_time build trixie_run "$root" cmake --build /build-cuda -j"$(nproc)" --target tiergen tiergen_tests make-tiny-model

echo "== ldd tiergen"
trixie_run "$root" ldd /build-cuda/tiergen | tee "$root/tmp/ldd.txt"
echo "== CUDA libraries linked"
grep -E 'torch_cuda|c10_cuda|cudart|cublas|cudnn|gomp|fmt|spdlog' "$root/tmp/ldd.txt" || true
echo "== kernels in the binary"
trixie_run "$root" sh -c 'command -v cuobjdump >/dev/null && cuobjdump --list-elf /build-cuda/tiergen | head -5' || true

status=0
echo "== tiergen --help"
trixie_run "$root" /build-cuda/tiergen --help > "$root/tmp/help.txt" 2>&1 || { cat "$root/tmp/help.txt"; status=1; }
head -5 "$root/tmp/help.txt"
echo "== tiergen generate --device cuda (no GPU here: must refuse with a message and a non-zero status)"
trixie_run "$root" sh -c 'rm -rf /tmp/tiny && /build-cuda/make-tiny-model --arch opt --out /tmp/tiny --seed 1 \
    --tokenizer /src/tiergen/tests/fixtures/tokenizers/byte_level >/dev/null &&
  printf "hello\n" > /tmp/p.txt &&
  /build-cuda/tiergen generate -m /tmp/tiny -p /tmp/p.txt -n 2 --device cuda -q --overwrite -o /tmp/out.jsonl' \
  > "$root/tmp/generate.txt" 2>&1 && generate_rc=0 || generate_rc=$?
cat "$root/tmp/generate.txt"
if [ "$generate_rc" = 0 ] || [ -s "$root/tmp/out.jsonl" ] || ! grep -qi cuda "$root/tmp/generate.txt"; then
  echo "FAIL: generate --device cuda did not refuse cleanly (status $generate_rc)"; status=1
else
  echo "refused with status $generate_rc"
fi
echo "== CUDA tests without a GPU"
trixie_run "$root" /build-cuda/tiergen_tests --gtest_filter='*Cuda*' 2>&1 | tail -5 || status=1

echo "check-cuda-build: total $((SECONDS - start))s"
cat "$TRIXIE_TIMINGS"
exit $status
