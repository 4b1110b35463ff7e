#!/usr/bin/env bash
# The layering DESIGN.md fixes, checked on every include: the model's math (src/model,
# include/tiergen/model) never depends on the runtime, the policy or the CLI, and the
# kernels (kernels/) depend on none of them nor on the model. Prints every offending
# include with its file and line; exits 1 if there is one.
# Usage: check_layering.sh TIERGEN_ROOT
set -uo pipefail
root=${1:?tiergen root}
cd "$root" || exit 2
status=0
# check LABEL PATTERN DIR...: no include matching PATTERN under the DIRs.
check() {
  local label=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+[\"<]($pattern)" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "FAIL: $label"
    echo "$hits"
    status=1
  fi
}
check "the model includes the runtime, the policy or the CLI" "tiergen/(runtime|policy|cli)/|src/(runtime|cli)/|policy/" \
  src/model include/tiergen/model
check "a kernel includes the model, the runtime, the policy or the CLI" \
  "tiergen/(model|runtime|policy|cli)/|src/(model|runtime|cli)/|policy/" kernels
[ $status -eq 0 ] && echo "layering: ok"
exit $status
