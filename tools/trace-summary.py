#!/usr/bin/env python3
"""Where one token's time goes, from a `tiergen generate|bench --trace` file.

    tools/trace-summary.py TRACE [--block B] [--token N] [--json OUT] [--check]
    tools/trace-summary.py TRACE --cpu-attention-batches MAX_RATIO

A trace's "block" is a run of the schedule (a block and the gpu batches that refill
its slots) and its "token" a pass of that run: every running gpu batch's next token.
For the chosen token of the chosen block (default: the first block's middle decode
token), per weight layer (0 is the embedding, the last one the LM head): the time its
weights took on the loader stream, its KV cache and hidden-state loads and stores
(summed over gpu batches), its compute on the compute stream and its CPU attention
(both summed over gpu batches), and the compute stream's gap: how long it sat idle
before each of the layer's compute steps (waiting for loads, or for the host). The totals line gives the token's wall time on
the compute stream (first compute start to last compute end), the sum of each column
and the gap share. On CUDA the times are the streams' (CUDA events); on the CPU, host
times.

--check verifies the trace's invariants instead (used by the test suite): within each
block, every gpu batch computed at a token computes every layer of the prefill, once
(batches whose sequences have all finished leave the schedule); spans have
non-negative durations; compute spans never overlap (one compute stream); every CPU
attention span lies inside the compute step of its block, token, layer and gpu batch.
Exit status 1 names the first violation.

--cpu-attention-batches MAX_RATIO prints each gpu batch's median CPU attention over
the decode instead, and fails (exit status 1) when the slowest batch's median is over
MAX_RATIO times the fastest's. The gpu batches of a token attend over the same number
of keys, so a batch that takes several times longer is waiting on something else: a
copy it needs queued behind the next layer's weights, for one.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

LOADS = ("load_weight", "load_cache", "load_hidden", "store_cache", "store_hidden")
COLUMNS = LOADS + ("compute", "cpu_attention", "gap")


def spans_of(path):
    try:
        with open(path) as f:
            trace = json.load(f)
        return [e for e in trace["traceEvents"] if e.get("ph") == "X"], trace.get("otherData", {})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a readable tiergen trace ({e})")


def step(s):
    a = s["args"]
    return a.get("block", -1), a["token"], a["layer"], a["batch"]


def attribute_unlabelled(spans):
    """Traces written before CPU attention carried its step: such a span takes the
    block and token of the compute step of its layer and batch that contains it."""
    computes = defaultdict(list)
    for s in spans:
        if s["name"] == "compute":
            computes[(s["args"]["layer"], s["args"]["batch"])].append(s)
    for s in spans:
        if s["name"] != "cpu_attention" or s["args"]["token"] >= 0:
            continue
        for c in computes[(s["args"]["layer"], s["args"]["batch"])]:
            if c["ts"] <= s["ts"] + 1e-3 and s["ts"] + s["dur"] <= c["ts"] + c["dur"] + 1e-3:
                s["args"]["token"], s["args"]["block"] = c["args"]["token"], c["args"].get("block", -1)
                break


def summarize(spans, block, token):
    rows = defaultdict(lambda: defaultdict(float))
    mine = [s for s in spans if s["args"].get("block", -1) == block and s["args"]["token"] == token]
    computes = sorted((s for s in mine if s["name"] == "compute"), key=lambda s: s["ts"])
    if not computes:
        raise SystemExit(f"no compute spans for block {block} token {token}")
    for s in mine:
        if s["name"] in COLUMNS:
            rows[s["args"]["layer"]][s["name"]] += s["dur"]
    # The compute stream's idle time before each compute step (after the token's first).
    previous_end = None
    for s in computes:
        if previous_end is not None and s["ts"] > previous_end:
            rows[s["args"]["layer"]]["gap"] += s["ts"] - previous_end
        previous_end = s["ts"] + s["dur"] if previous_end is None else max(previous_end, s["ts"] + s["dur"])
    wall = max(s["ts"] + s["dur"] for s in computes) - computes[0]["ts"]
    totals = {c: sum(r[c] for r in rows.values()) for c in COLUMNS}
    return rows, totals, wall


def check(spans):
    computes = {}
    layers = defaultdict(set)  # (block, token, batch) -> layers computed
    for s in spans:
        if s["dur"] < 0:
            return f"{s['name']} span at {s['ts']} us has a negative duration"
        if s["name"] == "compute":
            block, token, layer, batch = step(s)
            if step(s) in computes:
                return f"block {block} token {token} computes layer {layer} batch {batch} twice"
            computes[step(s)] = s
            layers[(block, token, batch)].add(layer)
    if not computes:
        return "no compute spans"
    prefill_layers = {}
    for (block, token, batch), have in layers.items():
        if token == 0:
            prefill_layers[block] = prefill_layers.get(block, set()) | have
    for (block, token, batch), have in sorted(layers.items()):
        missing = prefill_layers.get(block, set()) - have
        if missing:
            return f"block {block} token {token} batch {batch} misses the compute of layers {sorted(missing)}"
    ordered = sorted(computes.values(), key=lambda s: s["ts"])
    for a, b in zip(ordered, ordered[1:]):
        if b["ts"] < a["ts"] + a["dur"] - 1e-3:
            return (f"compute of block {step(b)[0]} token {step(b)[1]} layer {step(b)[2]} starts before the one "
                    f"of block {step(a)[0]} token {step(a)[1]} layer {step(a)[2]} ends")
    for s in spans:
        if s["name"] != "cpu_attention":
            continue
        c = computes.get(step(s))
        if c is None or not (c["ts"] <= s["ts"] + 1e-3 and s["ts"] + s["dur"] <= c["ts"] + c["dur"] + 1e-3):
            return f"cpu attention of block {step(s)[0]} token {step(s)[1]} layer {step(s)[2]} is outside its compute step"
    return None


def cpu_attention_batches(spans, max_ratio):
    """Per gpu batch, the median decode CPU attention; None, or the failure."""
    by_batch = defaultdict(list)
    for s in spans:
        if s["name"] == "cpu_attention" and s["args"]["token"] > 0:
            by_batch[s["args"]["batch"]].append(s["dur"])
    if not by_batch:
        return "no decode CPU attention spans (was the run's --cpu-attention on?)"
    medians = {b: statistics.median(d) for b, d in sorted(by_batch.items())}
    for b, m in medians.items():
        print(f"gpu batch {b}: median cpu attention {m / 1000:.3f} ms over {len(by_batch[b])} decode steps")
    fastest, slowest = min(medians, key=medians.get), max(medians, key=medians.get)
    ratio = medians[slowest] / max(medians[fastest], 1e-9)
    print(f"slowest / fastest: {ratio:.2f}x (batch {slowest} / batch {fastest}; at most {max_ratio}x)")
    if ratio > max_ratio:
        return (f"gpu batch {slowest}'s CPU attention takes {ratio:.1f}x batch {fastest}'s: it waits on something "
                "besides its own keys")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--block", type=int, help="block number (default the first)")
    ap.add_argument("--token", type=int, help="token index (0 is the prefill); default the middle decode token")
    ap.add_argument("--json", help="also write the table as JSON here")
    ap.add_argument("--check", action="store_true", help="check the trace's invariants, print nothing else")
    ap.add_argument("--cpu-attention-batches", type=float, metavar="MAX_RATIO",
                    help="print each gpu batch's median decode CPU attention; fail past MAX_RATIO slowest / fastest")
    a = ap.parse_args()
    spans, other = spans_of(a.trace)
    attribute_unlabelled(spans)
    if a.cpu_attention_batches is not None:
        problem = cpu_attention_batches(spans, a.cpu_attention_batches)
        if problem:
            print(f"{a.trace}: {problem}", file=sys.stderr)
            return 1
        return 0
    if a.check:
        problem = check(spans)
        if problem:
            print(f"{a.trace}: {problem}", file=sys.stderr)
            return 1
        print(f"{a.trace}: {len(spans)} spans, invariants hold")
        return 0
    computes = [s for s in spans if s["name"] == "compute"]
    if not computes:
        raise SystemExit(f"{a.trace}: no compute spans")
    block = a.block if a.block is not None else min(step(s)[0] for s in computes)
    tokens = sorted({step(s)[1] for s in computes if step(s)[0] == block})
    decode = [t for t in tokens if t > 0]
    token = a.token if a.token is not None else (decode[len(decode) // 2] if decode else tokens[0] if tokens else 0)
    rows, totals, wall = summarize(spans, block, token)
    wall = max(wall, 1e-9)
    ms = lambda us: f"{us / 1000:9.3f}"  # noqa: E731
    print(f"block {block} token {token} of {a.trace} ({other.get('clock', '?')}, {other.get('device', '?')}); "
          "milliseconds")
    print(f"{'layer':>5} " + " ".join(f"{c:>13}" for c in COLUMNS))
    for layer in sorted(rows):
        print(f"{layer:>5} " + " ".join(f"{ms(rows[layer][c]):>13}" for c in COLUMNS))
    print(f"{'sum':>5} " + " ".join(f"{ms(totals[c]):>13}" for c in COLUMNS))
    print(f"compute-stream wall time {wall / 1000:.3f} ms: compute {100 * totals['compute'] / wall:.1f}%, "
          f"idle gaps {100 * totals['gap'] / wall:.1f}%; weight loads {totals['load_weight'] / wall:.2f}x and "
          f"cpu attention {totals['cpu_attention'] / wall:.2f}x of it")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"block": block, "token": token, "wall_us": wall, "totals_us": totals,
                       "layers": {str(k): dict(v) for k, v in sorted(rows.items())}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
