#!/usr/bin/env python3
"""Reads `tiergen bench --json` records and writes them as CSV rows.

    bench_records.py csv RECORD.json... > out.csv       # one row per record
    bench_records.py table RECORD.json...               # markdown table for bench/RESULTS.md
    bench_records.py ratio A.json B.json                # median total throughput A / B

Only the Python standard library: the suites run on a bare Debian box.
"""
import csv
import json
import sys

# Columns of the CSV, in order: the policy, the sizes, the predicted and measured
# throughputs (medians over the measured runs), the spread and the peaks.
COLUMNS = [
    "name", "model", "device", "dtype", "prompt_len", "gen_len", "num_prompts",
    "gpu_batch_size", "num_gpu_batches",
    "w_gpu_percent", "w_cpu_percent", "cache_gpu_percent", "cache_cpu_percent",
    "act_gpu_percent", "act_cpu_percent", "cpu_cache_compute", "overlap",
    "compress_weight", "compress_cache",
    "predicted_prefill_throughput", "predicted_decode_throughput", "predicted_total_throughput",
    "prefill_throughput", "decode_throughput", "total_throughput",
    "total_throughput_mean", "total_throughput_sd", "repetitions",
    "prefill_latency_s", "decode_latency_s", "total_latency_s",
    "peak_gpu_bytes", "peak_cpu_bytes", "peak_disk_bytes",
]


def load(path):
    with open(path) as f:
        return json.load(f)


def _compressed(policy, key):
    value = policy.get(key, False)
    if isinstance(value, dict):  # {"enabled": true, "num_bits": 4, ...}
        return bool(value.get("enabled", value.get("num_bits", 0)))
    return bool(value)


def row(record, name=""):
    policy = record.get("policy", {})
    predicted = record.get("predicted_vs_measured", {}).get("throughput", {}).get("predicted", {})
    summary = record.get("summary", {}).get("total_throughput", {})
    peaks = record.get("peak_bytes", {})
    out = {
        "name": name,
        "model": record.get("model"),
        "device": record.get("device"),
        "dtype": record.get("dtype"),
        "prompt_len": record.get("prompt_len"),
        "gen_len": record.get("gen_len"),
        "num_prompts": record.get("num_prompts"),
        "gpu_batch_size": record.get("gpu_batch_size"),
        "num_gpu_batches": record.get("num_gpu_batches"),
        "cpu_cache_compute": int(bool(policy.get("cpu_cache_compute", False))),
        "overlap": int(bool(policy.get("overlap", True))),
        "compress_weight": int(_compressed(policy, "compress_weight")),
        "compress_cache": int(_compressed(policy, "compress_cache")),
        "predicted_prefill_throughput": predicted.get("prefill"),
        "predicted_decode_throughput": predicted.get("decode"),
        "predicted_total_throughput": predicted.get("total"),
        "prefill_throughput": record.get("prefill_throughput"),
        "decode_throughput": record.get("decode_throughput"),
        "total_throughput": record.get("total_throughput"),
        "total_throughput_mean": summary.get("mean"),
        "total_throughput_sd": summary.get("sd"),
        "repetitions": record.get("repetitions"),
        "prefill_latency_s": record.get("prefill_latency_s"),
        "decode_latency_s": record.get("decode_latency_s"),
        "total_latency_s": record.get("total_latency_s"),
        "peak_gpu_bytes": peaks.get("gpu"),
        "peak_cpu_bytes": peaks.get("cpu"),
        "peak_disk_bytes": peaks.get("disk"),
    }
    for key in ("w_gpu_percent", "w_cpu_percent", "cache_gpu_percent", "cache_cpu_percent",
                "act_gpu_percent", "act_cpu_percent"):
        out[key] = policy.get(key)
    return out


def _name(path):
    base = path.rsplit("/", 1)[-1]
    return base[:-5] if base.endswith(".json") else base


def write_csv(paths, out=sys.stdout, header=True):
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    if header:
        writer.writeheader()
    for p in paths:
        writer.writerow(row(load(p), _name(p)))


def markdown_table(paths):
    lines = ["| case | model | s | n | N (gbs x ngb) | policy | total tok/s (median) | mean ± sd | "
             "predicted tok/s | prefill tok/s | decode tok/s | peak gpu MiB |",
             "|---|---|--:|--:|---|---|--:|--:|--:|--:|--:|--:|"]
    for p in paths:
        r = load(p)
        s = r["summary"]["total_throughput"]
        predicted = r["predicted_vs_measured"]["throughput"]["predicted"]["total"]
        lines.append(
            f"| {_name(p)} | {r['model']} | {r['prompt_len']} | {r['gen_len']} | {r['num_prompts']} "
            f"({r['gpu_batch_size']} x {r['num_gpu_batches']}) | {r.get('policy_description', '')} | "
            f"{r['total_throughput']:.3f} | {s['mean']:.3f} ± {s['sd']:.3f} | {predicted:.3f} | "
            f"{r['prefill_throughput']:.2f} | {r['decode_throughput']:.3f} | "
            f"{r['peak_bytes']['gpu'] / 2**20:.1f} |")
    return "\n".join(lines)


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2 or argv[0] not in ("csv", "csv-rows", "table", "ratio"):
        print(__doc__, file=sys.stderr)
        return 2
    command, paths = argv[0], argv[1:]
    if command == "csv":
        write_csv(paths)
    elif command == "csv-rows":  # no header (appending to a sweep)
        write_csv(paths, header=False)
    elif command == "table":
        print(markdown_table(paths))
    else:
        a, b = (load(p) for p in paths[:2])
        print(f"{a['total_throughput'] / b['total_throughput']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
