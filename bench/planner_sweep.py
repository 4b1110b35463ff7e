#!/usr/bin/env python3
"""Summarises a bench/planner_sweep.sh run.

    planner_sweep.py OUTDIR          # writes OUTDIR/sweep.csv, prints the markdown tables

OUTDIR/<model>/<job>/ holds one `tiergen bench --json` record per policy (auto.json is
`--policy auto`, auto-lp.json `--policy auto --no-guardrails`) and failed.txt (policies that did not fit or failed). Printed:
- per (model, job): the best grid policy measured, auto's measured throughput and plan,
  auto over the best (the target: at least 0.95);
- per plan class: how many grid runs' predicted total throughput fell within the class's
  error band of the measured one (relative error = predicted / measured - 1).

Only the Python standard library: the suites run on a bare Debian box.
"""
import csv
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_records  # noqa: E402

TARGET = 0.95
SEARCHED = ("auto", "auto-lp")  # the searched runs; the rest are the grid's policies


def cases(outdir):
    """(model, job, {name: record}, [failed lines]) for each case folder, in sorted order."""
    for model in sorted(os.listdir(outdir)):
        model_dir = os.path.join(outdir, model)
        if not os.path.isdir(model_dir):
            continue
        for job in sorted(os.listdir(model_dir)):
            job_dir = os.path.join(model_dir, job)
            if not os.path.isdir(job_dir):
                continue
            records = {}
            for f in sorted(os.listdir(job_dir)):
                if f.endswith(".json"):
                    records[f[:-5]] = bench_records.load(os.path.join(job_dir, f))
            failed_path = os.path.join(job_dir, "failed.txt")
            failed = open(failed_path).read().splitlines() if os.path.exists(failed_path) else []
            yield model, job, records, failed


def predicted_total(record):
    pvm = record.get("predicted_vs_measured") or {}
    return ((pvm.get("throughput") or {}).get("predicted") or {}).get("total")


def write_csv(outdir, all_cases):
    columns = ["model_shape", "job", "plan_class", "band", "predicted_over_measured"] + bench_records.COLUMNS
    with open(os.path.join(outdir, "sweep.csv"), "w") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for model, job, records, _ in all_cases:
            for name, r in records.items():
                row = bench_records.row(r, name)
                plan_class = r.get("plan_class") or {}
                predicted = predicted_total(r)
                row.update({"model_shape": model, "job": job, "plan_class": plan_class.get("name"),
                            "band": plan_class.get("band"),
                            "predicted_over_measured": predicted / r["total_throughput"] if predicted else None})
                writer.writerow(row)


def auto_table(all_cases):
    lines = ["| model | job (s:n:prompts) | policies run / failed | best policy | best tok/s | "
             "auto's plan | auto tok/s | auto / best | auto predicted / measured | auto-lp / best |",
             "|---|---|--:|---|--:|---|--:|--:|--:|--:|"]
    met = total = 0
    for model, job, records, failed in all_cases:
        grid = {n: r for n, r in records.items() if n not in SEARCHED}
        grid_failed = [f for f in failed if f.split(":", 1)[0] not in SEARCHED]
        auto = records.get("auto")
        lp = records.get("auto-lp")
        if not grid:
            continue
        best_name = max(grid, key=lambda n: grid[n]["total_throughput"])
        best = grid[best_name]["total_throughput"]
        if auto is None:
            lines.append(f"| {model} | {job} | {len(grid)} / {len(grid_failed)} | {best_name} | {best:.1f} | "
                         f"(auto failed) | - | - | - | "
                         f"{(lp['total_throughput'] / best) if lp else float('nan'):.2f} |")
            total += 1
            continue
        ratio = auto["total_throughput"] / best
        predicted = predicted_total(auto)
        total += 1
        met += ratio >= TARGET
        plan = f"{auto['gpu_batch_size']}x{auto['num_gpu_batches']}: {auto.get('policy_description', '')}"
        lines.append(f"| {model} | {job} | {len(grid)} / {len(grid_failed)} | {best_name} | {best:.1f} | {plan} | "
                     f"{auto['total_throughput']:.1f} | {ratio:.2f} | "
                     f"{(predicted / auto['total_throughput']) if predicted else float('nan'):.2f} | "
                     f"{(lp['total_throughput'] / best) if lp else float('nan'):.2f} |")
    lines.append("")
    lines.append(f"auto at least {TARGET}x the best policy: {met} of {total} cases")
    return "\n".join(lines)


def class_table(all_cases):
    by_class = {}
    # The grid's runs only: auto's plan is often one of them, and counting it twice
    # would weigh its class.
    for _, _, records, _ in all_cases:
        for name, r in records.items():
            if name in SEARCHED:
                continue
            predicted = predicted_total(r)
            plan_class = r.get("plan_class") or {}
            if not predicted or "name" not in plan_class:
                continue
            errors = by_class.setdefault(plan_class["name"], (plan_class["band"], []))[1]
            errors.append(predicted / r["total_throughput"] - 1)
    lines = ["| plan class | band | runs | within band | median predicted/measured | range |",
             "|---|--:|--:|--:|--:|---|"]
    for name, (band, errors) in sorted(by_class.items()):
        within = sum(abs(e) <= band for e in errors)
        lines.append(f"| {name} | ±{band * 100:.0f}% | {len(errors)} | {within} | "
                     f"{1 + statistics.median(errors):.2f} | {1 + min(errors):.2f}-{1 + max(errors):.2f} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr if len(argv) != 1 else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    outdir = argv[0]
    all_cases = list(cases(outdir))
    if not all_cases:
        print(f"planner_sweep.py: no case folders under {outdir}", file=sys.stderr)
        return 1
    write_csv(outdir, all_cases)
    print(auto_table(all_cases))
    print()
    print(class_table(all_cases))
    print(f"\nrows: {os.path.join(outdir, 'sweep.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
