#!/usr/bin/env python3
"""Appends measured runs to bench/gpu-evidence/side-by-side.csv, and names the GPU suite
case the next GPU window should measure.

  gpu-evidence-add.py add --machine-run ID --gpu NAME --cpu NAME --gpu-cap-gib N
                          --policy-kind same-as-flexgen|auto BENCH_JSON [--csv CSV]
      one tiergen row from a `tiergen bench --json` record
  gpu-evidence-add.py add --machine-run ID --gpu NAME --cpu NAME --gpu-cap-gib N
                          --comparison COMPARISON_CSV [--csv CSV]
      the rows of bench/compare/compare.py's comparison.csv that finished: FlexGen's as
      flexgen-hand, tiergen's as same-as-flexgen
  gpu-evidence-add.py next-case [--csv CSV]
      the bench/compare/gpu_suite.sh case with the fewest tiergen rows (ties: suite order),
      so that consecutive windows cover different cases

A record that lacks what a row needs is refused with the file named, and nothing is
written; rows are appended whole, so a window cut short keeps the rows it finished."""
import argparse
import csv
import datetime
import importlib.util
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CSV = os.path.join(ROOT, "bench", "gpu-evidence", "side-by-side.csv")


def load_table_tool():
    """tools/gpu-evidence-table.py, whose COLUMNS define the file (one list for both tools)."""
    spec = importlib.util.spec_from_file_location("gpu_evidence_table",
                                                  os.path.join(ROOT, "tools", "gpu-evidence-table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COLUMNS = load_table_tool().COLUMNS
# The cases of bench/compare/gpu_suite.sh: (name, model, gpu cap GiB), in its order.
SUITE = [("opt-6.7b-16g", "opt-6.7b", "16"), ("opt-13b-16g", "opt-13b", "16"), ("opt-6.7b-24g", "opt-6.7b", "24"),
         ("opt-13b-24g", "opt-13b", "24"), ("opt-30b-16g", "opt-30b", "16")]


def refuse(path, message):
    sys.exit(f"gpu-evidence-add: {path}: {message}")


def number(value, digits=2):
    return "" if value is None or value == "" else f"{float(value):.{digits}f}"


def model_name(model):
    return os.path.basename(str(model).rstrip("/")).lower()


def fraction(prefix, gpu, cpu, disk):
    """w70/30, or w20/70/10 where a share is on disk (the replay test reads both)."""
    disk = round(float(disk), 6)  # 100 - 70.1 - 29.9 is 7e-15, not a share on disk
    parts = [gpu, cpu] + ([disk] if abs(disk) > 1e-6 else [])
    return prefix + "/".join(f"{float(x):g}" for x in parts)


def short_policy(p):
    """The policy as the rows spell it: "24x2 w70/30 c0/100 a0/100 cpu-attention"; the
    record's JSON keeps everything else (threads, compression groups)."""
    words = [f"{p['gpu_batch_size']}x{p['num_gpu_batches']}",
             fraction("w", p["w_gpu_percent"], p["w_cpu_percent"], 100 - p["w_gpu_percent"] - p["w_cpu_percent"]),
             fraction("c", p["cache_gpu_percent"], p["cache_cpu_percent"],
                      100 - p["cache_gpu_percent"] - p["cache_cpu_percent"]),
             fraction("a", p["act_gpu_percent"], p["act_cpu_percent"], 100 - p["act_gpu_percent"] - p["act_cpu_percent"])]
    if p.get("cpu_cache_compute"):
        words.append("cpu-attention")
    if p.get("cpu_weight_compute_decode") or p.get("cpu_weight_compute_prefill"):
        words.append(f"cpu-weight-compute-{float(p.get('cpu_weight_compute_layer_percent', 100)):g}%")
    if p.get("compress_weight"):
        words.append("compress-weight")
    if p.get("compress_cache"):
        words.append("compress-cache")
    if p.get("overlap") is False:
        words.append("overlap-off")
    return " ".join(words)


def row_from_bench(path, a):
    try:
        d = json.load(open(path))
    except (OSError, ValueError) as e:
        refuse(path, f"not a tiergen bench --json record: {e}")
    for key in ("model", "prompt_len", "gen_len", "total_throughput", "policy_description"):
        if d.get(key) in (None, ""):
            refuse(path, f"the record has no {key}")
    if not str(d.get("device") or "cuda").startswith("cuda"):
        refuse(path, f"the run was on device {d.get('device')}, not a GPU")
    peak = d.get("peak_gpu_mem_bytes")
    return {"date": str(d.get("date", ""))[:10] or datetime.date.today().isoformat(), "model": model_name(d["model"]),
            "prompt_len": d["prompt_len"], "gen_len": d["gen_len"], "system": "tiergen",
            "policy_kind": a.policy_kind,
            "policy": short_policy(d["policy"]) if isinstance(d.get("policy"), dict) else
            d["policy_description"].replace(",", ";"),
            "total_tok_s": number(d["total_throughput"]), "decode_tok_s": number(d.get("decode_throughput")),
            "prefill_tok_s": number(d.get("prefill_throughput"), 0),
            "peak_gpu_gib": number(peak / 2**30 if peak else None)}


def rows_from_comparison(path):
    try:
        records = list(csv.DictReader(open(path, newline="")))
    except OSError as e:
        refuse(path, str(e))
    out = []
    for r in records:
        if r.get("status") != "ok" or not r.get("total_throughput"):
            continue
        kind = {"flexgen": "flexgen-hand", "tiergen": "same-as-flexgen"}.get(r.get("system"))
        if kind is None:
            continue
        peak = r.get("peak_gpu_mem_gb")
        out.append({"date": datetime.date.today().isoformat(), "model": model_name(r["model"]),
                    "prompt_len": r["prompt_len"], "gen_len": r["gen_len"], "system": r["system"],
                    "policy_kind": kind, "policy": r.get("policy", "").replace(",", ";"),
                    "total_tok_s": number(r["total_throughput"]), "decode_tok_s": number(r.get("decode_throughput")),
                    "prefill_tok_s": number(r.get("prefill_throughput"), 0),
                    "peak_gpu_gib": number(peak)})  # FlexGen's and compare.py's "GB" is 2^30 bytes
    if not out:
        refuse(path, "no finished FlexGen or tiergen row")
    return out


def key(r):
    return (r["machine_run"], r["model"], str(r["gpu_cap_gib"]), str(r["prompt_len"]), str(r["gen_len"]), r["system"],
            r["policy_kind"])


def add(a):
    rows = rows_from_comparison(a.comparison) if a.comparison else [row_from_bench(a.bench_json, a)]
    with open(a.csv, newline="") as f:
        if next(csv.reader(f), None) != COLUMNS:
            refuse(a.csv, "its header is not the side-by-side columns")
        f.seek(0)
        present = {key(r) for r in csv.DictReader(f)}
    for r in rows:
        r.update({"machine_run": a.machine_run, "gpu_cap_gib": a.gpu_cap_gib})
    # compare.py runs tiergen with FlexGen's policy again: a machine run keeps the row it
    # already has for that (the window's traced run) and gains FlexGen's.
    rows = [r for r in rows if key(r) not in present or not a.comparison]
    for r in rows:
        if key(r) in present:
            refuse(a.csv, f"already has a {r['system']} {r['policy_kind']} row for {r['model']} on {a.machine_run}")
    with open(a.csv, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        for r in rows:
            r.update({"gpu": a.gpu, "cpu": a.cpu, "machine_run": a.machine_run, "gpu_cap_gib": a.gpu_cap_gib,
                      "roofline_s_per_token": "", "decode_s_per_token": ""})
            w.writerow(r)
            print(f"added: {r['machine_run']} {r['model']} {r['gpu_cap_gib']} GiB {r['system']} "
                  f"{r['policy_kind']} {r['total_tok_s']} tok/s")


def next_case(a):
    counts = {name: 0 for name, _, _ in SUITE}
    for r in csv.DictReader(open(a.csv, newline="")):
        for name, model, cap in SUITE:
            if r["system"] == "tiergen" and r["model"] == model and r["gpu_cap_gib"] == cap:
                counts[name] += 1
    print(min(SUITE, key=lambda c: counts[c[0]])[0])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pa = sub.add_parser("add")
    pa.add_argument("bench_json", nargs="?")
    pa.add_argument("--comparison")
    pa.add_argument("--machine-run", required=True)
    pa.add_argument("--gpu", required=True)
    pa.add_argument("--cpu", required=True)
    pa.add_argument("--gpu-cap-gib", required=True)
    pa.add_argument("--policy-kind", choices=["same-as-flexgen", "auto", "auto-calibrated"])
    pa.add_argument("--csv", default=DEFAULT_CSV)
    pn = sub.add_parser("next-case")
    pn.add_argument("--csv", default=DEFAULT_CSV)
    a = p.parse_args()
    if a.command == "add":
        if bool(a.bench_json) == bool(a.comparison):
            p.error("add takes either a bench JSON or --comparison")
        if a.bench_json and not a.policy_kind:
            p.error("a bench JSON needs --policy-kind")
        add(a)
    else:
        next_case(a)


if __name__ == "__main__":
    main()
