#!/usr/bin/env bash
# tools/gpu-evidence-table.py on the committed side-by-side.csv (ratios only within one
# machine run) and on malformed copies (refused with the file and line).
# Usage: tests/tools/test_gpu_evidence_table.sh SOURCE_DIR
set -euo pipefail
src=$1
tool="$src/tools/gpu-evidence-table.py"
csv="$src/bench/gpu-evidence/side-by-side.csv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(python3 "$tool" "$csv")
grep -qF "opt-13b at 16 GiB: tiergen, FlexGen's policy / FlexGen = 3.98x" <<<"$out" || fail "the H100 OPT-13B ratio: $out"
grep -qF "opt-30b at 16 GiB: tiergen auto / tiergen, FlexGen's policy = 0.48x" <<<"$out" || fail "the H200 auto ratio"
# FlexGen's OPT-30B run and tiergen's were on two machines: no ratio pairs them.
if grep -q "opt-30b at 16 GiB: tiergen, FlexGen's policy / FlexGen" <<<"$out"; then
  fail "rows of two machine runs were paired"
fi

# A row with an unknown policy kind, a non-number, a missing field: each refused, naming the line.
head -1 "$csv" >"$tmp/bad.csv"
sed -n 2p "$csv" | sed 's/flexgen-hand/hand/' >>"$tmp/bad.csv"
if msg=$(python3 "$tool" "$tmp/bad.csv" 2>&1); then fail "an unknown policy kind was accepted"; fi
grep -q "bad.csv:2: system/policy_kind" <<<"$msg" || fail "unknown kind message: $msg"
head -1 "$csv" >"$tmp/nan.csv"
sed -n 3p "$csv" | sed 's/,104.67,/,fast,/' >>"$tmp/nan.csv"
if msg=$(python3 "$tool" "$tmp/nan.csv" 2>&1); then fail "a non-number was accepted"; fi
grep -q "nan.csv:2: total_tok_s is not a number" <<<"$msg" || fail "non-number message: $msg"
head -1 "$csv" >"$tmp/short.csv"
echo "2026-11-23,H100" >>"$tmp/short.csv"
if msg=$(python3 "$tool" "$tmp/short.csv" 2>&1); then fail "a short row was accepted"; fi
grep -q "short.csv:2:" <<<"$msg" || fail "short row message: $msg"
# A second row of the same system, policy kind, case and machine run: refused.
head -3 "$csv" >"$tmp/dup.csv"
sed -n 3p "$csv" >>"$tmp/dup.csv"
if msg=$(python3 "$tool" "$tmp/dup.csv" 2>&1); then fail "a duplicate row was accepted"; fi
grep -q "dup.csv:4: a second tiergen same-as-flexgen row for opt-6.7b on h100-2026-11-23-a (line 3)" <<<"$msg" ||
  fail "duplicate message: $msg"
echo "gpu-evidence-table: ok"
