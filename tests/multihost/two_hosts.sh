#!/usr/bin/env bash
# Two hosts, each with a network stack of its own: network namespaces joined by a veth
# pair (10.77.0.1 and 10.77.0.2), loopback up in each. A 2-stage pipeline runs with one
# rank on each, from a torchrun-style environment (MASTER_ADDR on the first host) and
# no GLOO_SOCKET_IFNAME: the ranks must find the address the other host reaches them
# on by themselves. The results file equals one process's, and each rank says which
# address its messages use. Needs root and iproute2; exits 77 (skipped) without them.
# Usage: tests/multihost/two_hosts.sh TIERGEN MAKE_TINY_MODEL
set -euo pipefail
tiergen=$1 make_model=$2
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
command -v ip > /dev/null || skip "needs iproute2 (ip)"

tag=tg$$
host_a=${tag}a host_b=${tag}b
work=$(mktemp -d /tmp/tiergen-two-hosts.XXXXXX)
cleanup() {
  ip netns del "$host_a" 2> /dev/null || true
  ip netns del "$host_b" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
{
  ip netns add "$host_a" && ip netns add "$host_b" &&
    ip link add "${tag}va" type veth peer name "${tag}vb" &&
    ip link set "${tag}va" netns "$host_a" && ip link set "${tag}vb" netns "$host_b" &&
    ip -n "$host_a" addr add 10.77.0.1/24 dev "${tag}va" && ip -n "$host_b" addr add 10.77.0.2/24 dev "${tag}vb" &&
    ip -n "$host_a" link set "${tag}va" up && ip -n "$host_b" link set "${tag}vb" up &&
    ip -n "$host_a" link set lo up && ip -n "$host_b" link set lo up
} 2> "$work/netns.log" || skip "could not make network namespaces here: $(head -c 300 "$work/netns.log")"
ip netns exec "$host_a" true 2> "$work/netns.log" ||
  skip "could not run a process in a network namespace here: $(head -c 300 "$work/netns.log")"

"$make_model" --arch llama --out "$work/model" --seed 5 --layers 4 > /dev/null
for i in 0 1 2 3 4 5 6; do
  ids=$(seq -s, $((10 + i)) $((13 + 2 * i)))
  echo "{\"prompt_token_ids\": [$ids], \"max_tokens\": $((3 + i % 4))}"
done > "$work/prompts.jsonl"
flags=(--model "$work/model" --device cpu -p "$work/prompts.jsonl" --gpu-batch-size 2 --num-gpu-batches 2
       --percent 50 50 100 0 100 0)
timeout 120 "$tiergen" generate "${flags[@]}" -o "$work/single.jsonl" 2> "$work/single.log" ||
  { cat "$work/single.log"; echo "FAIL: the single process failed"; exit 1; }

rank() {  # rank host
  ip netns exec "$2" timeout 120 env RANK="$1" WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.77.0.1 \
    MASTER_PORT=29517 OMP_NUM_THREADS=1 "$tiergen" generate "${flags[@]}" --offload-dir "$work/offload$1" \
    -o "$work/pipeline.jsonl" 2> "$work/rank$1.log"
}
rank 0 "$host_a" & first=$!
rank 1 "$host_b" & last=$!
status=0
wait "$first" || status=1
wait "$last" || status=1
if [ $status != 0 ]; then
  tail -n 20 "$work/rank0.log" "$work/rank1.log"
  echo "FAIL: a rank failed"
  exit 1
fi
grep -q "pipeline messages on 10.77.0.1" "$work/rank0.log" || { cat "$work/rank0.log"; echo "FAIL: rank 0's address"; exit 1; }
grep -q "pipeline messages on 10.77.0.2" "$work/rank1.log" || { cat "$work/rank1.log"; echo "FAIL: rank 1's address"; exit 1; }
strip() { grep -v '"tiergen_job"' "$1"; }
if ! cmp -s <(strip "$work/single.jsonl") <(strip "$work/pipeline.jsonl"); then
  diff <(strip "$work/single.jsonl") <(strip "$work/pipeline.jsonl") | head -20
  echo "FAIL: two hosts' results differ from one process's"
  exit 1
fi
echo "PASS: $(strip "$work/pipeline.jsonl" | wc -l) results from two hosts equal one process's"
