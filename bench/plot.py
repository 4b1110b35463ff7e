#!/usr/bin/env python3
"""PNG figures from the benchmark outputs (matplotlib; Debian: apt-get install python3-matplotlib).

    bench/plot.py --sweep SWEEP.csv [--bench RECORD.json ...] [-o OUTDIR]

Figures:
  throughput_per_policy.png   measured (median, with sd) and predicted total throughput
                              per policy of a sweep (bench/sweep_policies.sh)
  predicted_vs_measured.png   predicted against measured throughput (total, prefill,
                              decode), one point per policy, with the y = x line
  time_breakdown.png          per-task seconds (load weight, cache, hidden, compute,
                              CPU attention, ...) for prefill and decode of each bench
                              record (`tiergen bench --json`, or the sweep's records)
"""
import argparse
import csv
import json
import os
import sys

plt = None  # matplotlib.pyplot, imported once the arguments are parsed (--help needs none)


def load_matplotlib():
    global plt
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot
        plt = matplotlib.pyplot
    except ImportError:
        # A pyenv/venv python without matplotlib: use Debian's python3, which has it.
        if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit("plot.py: matplotlib is missing: apt-get install python3-matplotlib (or pip install matplotlib)")

TASKS = ["load_weight", "load_cache", "store_cache", "load_hidden", "store_hidden", "compute", "cpu_attention",
         "sample"]


def read_sweep(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            try:
                r[k] = float(v)
            except (TypeError, ValueError):
                pass
    return rows


def plot_throughput_per_policy(rows, out):
    names = [r["name"] for r in rows]
    measured = [r["total_throughput"] for r in rows]
    sd = [r.get("total_throughput_sd") or 0 for r in rows]
    predicted = [r["predicted_total_throughput"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(rows) + 2), 4.5))
    w = 0.4
    ax.bar([i - w / 2 for i in x], measured, w, yerr=sd, capsize=3, label="measured (median, ± sd)")
    ax.bar([i + w / 2 for i in x], predicted, w, label="predicted (cost model)", alpha=0.7)
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("total throughput (token/s)")
    values = [v for v in measured + predicted if v]
    if values and max(values) / min(values) > 30:  # e.g. a GPU profile's predictions for a CPU run
        ax.set_yscale("log")
        ax.set_ylabel("total throughput (token/s, log scale)")
    r0 = rows[0]
    ax.set_title(f"{os.path.basename(str(r0.get('model')))} s={int(r0.get('prompt_len', 0))} n={int(r0.get('gen_len', 0))} "
                 f"on {r0.get('device')}: throughput per policy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_predicted_vs_measured(rows, out):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.3))
    for ax, phase in zip(axes, ["total", "prefill", "decode"]):
        pred = [r[f"predicted_{phase}_throughput"] for r in rows]
        meas = [r[f"{phase}_throughput"] for r in rows]
        ax.scatter(pred, meas)
        for r, p, m in zip(rows, pred, meas):
            ax.annotate(r["name"], (p, m), fontsize=6, xytext=(2, 2), textcoords="offset points")
        hi = max(pred + meas) * 1.1 if pred else 1
        lo = max(min(pred + meas) * 0.9, 1e-6) if pred else 0.1
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"predicted {phase} token/s")
        ax.set_ylabel(f"measured {phase} token/s")
        ax.set_title(phase)
        ax.legend(fontsize=7)
    fig.suptitle("cost model: predicted versus measured throughput")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_time_breakdown(records, out):
    """Stacked per-task seconds per record, prefill and decode side by side (per run)."""
    labels, prefill, decode = [], [], []
    for name, rec in records:
        runs = rec["runs"]
        labels.append(name)
        prefill.append([sum(r["task_seconds"][t]["prefill"] for r in runs) / len(runs) for t in TASKS])
        decode.append([sum(r["task_seconds"][t]["decode"] for r in runs) / len(runs) for t in TASKS])
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 1.0 * len(labels) + 5), 5.5), sharey=False)
    colors = plt.get_cmap("tab10").colors
    for ax, data, phase in zip(axes, [prefill, decode], ["prefill", "decode"]):
        bottom = [0.0] * len(labels)
        for t_index, task in enumerate(TASKS):
            values = [d[t_index] for d in data]
            ax.bar(range(len(labels)), values, bottom=bottom, label=task, color=colors[t_index % len(colors)])
            bottom = [b + v for b, v in zip(bottom, values)]
        latency = [rec["summary"][f"{phase}_latency_s"]["mean"] for _, rec in records]
        ax.scatter(range(len(labels)), latency, marker="_", s=400, color="k", label=f"{phase} latency", zorder=3)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("seconds per run")
        ax.set_title(phase)
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("time per task, mean over measured runs (tasks on overlapped workers can add up past the "
                 "latency, the black mark)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", help="CSV from bench/sweep_policies.sh")
    ap.add_argument("--bench", nargs="*", default=[], help="`tiergen bench --json` records (time breakdown)")
    ap.add_argument("-o", "--out", default="bench/out/plots", help="output directory for the PNGs")
    args = ap.parse_args()
    if not args.sweep and not args.bench:
        ap.error("give --sweep CSV and/or --bench RECORD.json ...")
    load_matplotlib()
    os.makedirs(args.out, exist_ok=True)
    written = []
    records = [(os.path.basename(p)[:-5] if p.endswith(".json") else p, json.load(open(p))) for p in args.bench]
    if args.sweep:
        rows = read_sweep(args.sweep)
        if not rows:
            sys.exit(f"plot.py: {args.sweep} has no rows")
        p = os.path.join(args.out, "throughput_per_policy.png")
        plot_throughput_per_policy(rows, p)
        written.append(p)
        p = os.path.join(args.out, "predicted_vs_measured.png")
        plot_predicted_vs_measured(rows, p)
        written.append(p)
        if not records:  # the sweep's own records, beside the CSV
            d = args.sweep[:-4] + ".d" if args.sweep.endswith(".csv") else args.sweep + ".d"
            for r in rows:
                path = os.path.join(d, f"{r['name']}.json")
                if os.path.exists(path):
                    records.append((r["name"], json.load(open(path))))
    if records:
        p = os.path.join(args.out, "time_breakdown.png")
        plot_time_breakdown(records, p)
        written.append(p)
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
