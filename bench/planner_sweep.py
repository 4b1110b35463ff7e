#!/usr/bin/env python3
"""Summarises a bench/planner_sweep.sh run.

    planner_sweep.py OUTDIR          # writes OUTDIR/sweep.csv, prints the markdown tables
    planner_sweep.py --best OUTDIR MODEL JOB   # prints the case's best grid policy's name

OUTDIR/rROUND/<model>/<job>/ holds one `tiergen bench --json` record per policy (auto.json
is `--policy auto`, auto-lp.json `--policy auto --no-guardrails`) and failed.txt (policies
that did not fit or failed), one folder per round of the sweep. Printed:
- per (model, job): the best grid policy by its median measured throughput over the
  rounds (of those that ran in every round), auto's median and plan, auto over the best (the target: at least 0.95), and
  auto over the best policy of each round alone (runs of one round are minutes apart);
- per plan class: how many grid policies' predicted total throughput fell within the
  class's error band of their median measured one (relative error = predicted / measured
  - 1);
- where the sweep was confirmed (planner_sweep.sh --confirm K: OUTDIR/confirm/<model>/<job>/
  holds best.txt, the best grid policy's name, and auto-pI.json and best-pI.json, pair I
  of auto and that policy run one after the other): auto over the best per pair and the
  median of the pairs. The best of 21 noisy medians is a lucky draw as often as the best
  plan; run again beside auto, minutes apart, it is measured without that luck.
  OUTDIR/confirm.csv gets a row per confirming run.

Only the Python standard library: the suites run on a bare Debian box.
"""
import csv
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_records  # noqa: E402

TARGET = 0.95
SEARCHED = ("auto", "auto-lp")  # the searched runs; the rest are the grid's policies


class Case:
    """One (model, job) of the sweep: each policy's records, one per round it ran in."""

    def __init__(self, model, job):
        self.model, self.job = model, job
        self.rounds = set()  # the rounds that ran this case
        self.runs = {}       # name -> {round: record}
        self.failed = set()  # the names that failed in some round

    def measured(self, name):
        """The policy's median measured total throughput over the rounds it ran in."""
        return statistics.median(r["total_throughput"] for r in self.runs[name].values())

    def record(self, name):
        """One of the policy's records (one profile and plan: every round prices it alike)."""
        return next(iter(self.runs[name].values()))

    def predicted(self, name):
        return predicted_total(self.record(name))

    def grid(self):
        return [n for n in self.runs if n not in SEARCHED]

    def ran_every_round(self, name):
        return name in self.runs and set(self.runs[name]) == self.rounds


def rounds(outdir):
    """The round folders (rN) under outdir, in round order."""
    found = [d for d in os.listdir(outdir) if re.fullmatch(r"r[1-9][0-9]*", d)
             and os.path.isdir(os.path.join(outdir, d))]
    return sorted(found, key=lambda d: int(d[1:]))


def cases(outdir):
    """Every (model, job) case of the sweep's rounds, in sorted order."""
    by_key = {}
    for round_dir in rounds(outdir):
        round_number = int(round_dir[1:])
        round_path = os.path.join(outdir, round_dir)
        for model in sorted(os.listdir(round_path)):
            model_dir = os.path.join(round_path, model)
            if not os.path.isdir(model_dir):
                continue
            for job in sorted(os.listdir(model_dir)):
                job_dir = os.path.join(model_dir, job)
                if not os.path.isdir(job_dir):
                    continue
                case = by_key.setdefault((model, job), Case(model, job))
                case.rounds.add(round_number)
                for f in sorted(os.listdir(job_dir)):
                    if f.endswith(".json"):
                        record = bench_records.load(os.path.join(job_dir, f))
                        case.runs.setdefault(f[:-5], {})[round_number] = record
                failed_path = os.path.join(job_dir, "failed.txt")
                if os.path.exists(failed_path):
                    for line in open(failed_path).read().splitlines():
                        case.failed.add(line.split(":", 1)[0])
    return [by_key[k] for k in sorted(by_key)]


def predicted_total(record):
    pvm = record.get("predicted_vs_measured") or {}
    return ((pvm.get("throughput") or {}).get("predicted") or {}).get("total")


def write_csv(outdir, all_cases):
    columns = (["round", "model_shape", "job", "plan_class", "band", "predicted_over_measured"]
               + bench_records.COLUMNS)
    with open(os.path.join(outdir, "sweep.csv"), "w") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for case in all_cases:
            for name, by_round in case.runs.items():
                for round_number, r in sorted(by_round.items()):
                    row = bench_records.row(r, name)
                    plan_class = r.get("plan_class") or {}
                    predicted = predicted_total(r)
                    row.update({"round": round_number, "model_shape": case.model, "job": case.job,
                                "plan_class": plan_class.get("name"), "band": plan_class.get("band"),
                                "predicted_over_measured": predicted / r["total_throughput"] if predicted else None})
                    writer.writerow(row)


def per_round_text(case, name):
    """name's throughput over the best grid policy's in each round ("-" where either is missing)."""
    parts = []
    for round_number in sorted(case.rounds):
        run = case.runs.get(name, {}).get(round_number)
        grid = [case.runs[g][round_number]["total_throughput"] for g in case.grid()
                if round_number in case.runs[g]]
        ratio = f"{run['total_throughput'] / max(grid):.2f}" if run and grid else "-"
        parts.append(f"r{round_number} {ratio}")
    return ", ".join(parts)


def best_grid_policy(case):
    """The best grid policy by median among those that ran in every round (a median of
    fewer runs is not weighed against theirs), or None."""
    complete = [n for n in case.grid() if case.ran_every_round(n)]
    return max(complete, key=case.measured) if complete else None


def auto_table(all_cases):
    lines = ["| model | job (s:n:prompts) | policies run in every round / failed in some | best policy | "
             "best tok/s | auto's plan | auto tok/s | auto / best | per round | auto predicted / measured | "
             "auto-lp / best |",
             "|---|---|--:|---|--:|---|--:|--:|---|--:|--:|"]
    met = total = 0
    for case in all_cases:
        complete = [n for n in case.grid() if case.ran_every_round(n)]
        failed = [n for n in case.failed if n not in SEARCHED]
        total += 1
        counts = f"{len(complete)} / {len(failed)}"
        if not complete:
            lines.append(f"| {case.model} | {case.job} | {counts} | - | - | - | - | - | - | - | - |")
            continue
        best_name = best_grid_policy(case)
        best = case.measured(best_name)
        lp = f"{case.measured('auto-lp') / best:.2f}" if "auto-lp" in case.runs else "-"
        rounds_text = per_round_text(case, "auto")
        if "auto" not in case.runs:
            lines.append(f"| {case.model} | {case.job} | {counts} | {best_name} | "
                         f"{best:.1f} | (auto failed) | - | - | {rounds_text} | - | {lp} |")
            continue
        auto = case.record("auto")
        ratio = case.measured("auto") / best
        met += ratio >= TARGET
        predicted = case.predicted("auto")
        plan = f"{auto['gpu_batch_size']}x{auto['num_gpu_batches']}: {auto.get('policy_description', '')}"
        if not case.ran_every_round("auto"):
            plan += f" (ran in {len(case.runs['auto'])} of {len(case.rounds)} rounds)"
        lines.append(f"| {case.model} | {case.job} | {counts} | {best_name} | {best:.1f} | "
                     f"{plan} | {case.measured('auto'):.1f} | {ratio:.2f} | {rounds_text} | "
                     f"{(predicted / case.measured('auto')) if predicted else float('nan'):.2f} | {lp} |")
    lines.append("")
    lines.append(f"auto at least {TARGET}x the best policy (medians over the rounds): {met} of {total} cases")
    return "\n".join(lines)


class Confirmation:
    """One case's confirming pairs: auto and the sweep's best grid policy, run one after
    the other K times (planner_sweep.sh --confirm K)."""

    def __init__(self, model, job, best, pairs):
        self.model, self.job, self.best = model, job, best
        self.pairs = pairs  # pair number -> {"auto": record or None, "best": record or None}

    def ratios(self):
        """auto over the best in each pair where both ran, in pair order (None where not)."""
        out = []
        for number in sorted(self.pairs):
            pair = self.pairs[number]
            both = pair.get("auto") and pair.get("best")
            out.append(pair["auto"]["total_throughput"] / pair["best"]["total_throughput"] if both else None)
        return out

    def pair_texts(self):
        """Each pair's ratio, or which side of it failed."""
        texts = []
        for number, ratio in zip(sorted(self.pairs), self.ratios()):
            if ratio is not None:
                texts.append(f"{ratio:.2f}")
                continue
            failed = [role for role in ("auto", "best") if not self.pairs[number].get(role)]
            texts.append("both failed" if len(failed) == 2 else f"{failed[0]} failed")
        return texts


def confirmations(outdir):
    """The confirmed cases under OUTDIR/confirm/<model>/<job>/ by (model, job); a case
    folder without best.txt (its sweep had no best) maps to None."""
    root = os.path.join(outdir, "confirm")
    found = {}
    if not os.path.isdir(root):
        return found
    for model in sorted(os.listdir(root)):
        model_dir = os.path.join(root, model)
        if not os.path.isdir(model_dir):
            continue
        for job in sorted(os.listdir(model_dir)):
            job_dir = os.path.join(model_dir, job)
            best_path = os.path.join(job_dir, "best.txt")
            if not os.path.isdir(job_dir):
                continue
            if not os.path.isfile(best_path):
                found[(model, job)] = None
                continue
            pairs = {}
            failed_path = os.path.join(job_dir, "failed.txt")
            if os.path.exists(failed_path):
                for line in open(failed_path).read().splitlines():
                    m = re.fullmatch(r"(auto|best)-p([1-9][0-9]*)", line.split(":", 1)[0])
                    if m:
                        pairs.setdefault(int(m.group(2)), {})[m.group(1)] = None
            # A record on disk is a run that finished, whatever a failed line says.
            for f in os.listdir(job_dir):
                m = re.fullmatch(r"(auto|best)-p([1-9][0-9]*)\.json", f)
                if m:
                    pairs.setdefault(int(m.group(2)), {})[m.group(1)] = bench_records.load(os.path.join(job_dir, f))
            found[(model, job)] = Confirmation(model, job, open(best_path).read().strip(), pairs)
    return found


def confirm_table(all_cases, confirmed):
    """One row per case of the sweep: its confirming pairs, or why it has none."""
    lines = ["| model | job (s:n:prompts) | best policy of the sweep | pairs (both ran) | auto / best per pair | "
             "median of the pairs |",
             "|---|---|---|--:|---|--:|"]
    met = 0
    keys = sorted({(c.model, c.job) for c in all_cases} | set(confirmed))
    for model, job in keys:
        c = confirmed.get((model, job))
        if c is None:
            why = "(no grid policy ran in every round)" if (model, job) in confirmed else "(not confirmed)"
            lines.append(f"| {model} | {job} | {why} | 0 (0) | - | - |")
            continue
        ran = [r for r in c.ratios() if r is not None]
        median = statistics.median(ran) if ran else None
        met += median is not None and median >= TARGET
        lines.append(f"| {model} | {job} | {c.best} | {len(c.pairs)} ({len(ran)}) | {', '.join(c.pair_texts())} | "
                     f"{'-' if median is None else f'{median:.2f}'} |")
    lines.append("")
    lines.append(f"auto at least {TARGET}x the sweep's best policy, confirmed in interleaved pairs (median of "
                 f"the pairs): {met} of {len(keys)} cases")
    return "\n".join(lines)


def write_confirm_csv(outdir, confirmed):
    columns = ["pair", "model_shape", "job", "role"] + bench_records.COLUMNS
    with open(os.path.join(outdir, "confirm.csv"), "w") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for c in confirmed:
            if c is None:
                continue
            for number, pair in sorted(c.pairs.items()):
                for role in ("auto", "best"):
                    r = pair.get(role)
                    if not r:
                        continue
                    row = bench_records.row(r, "auto" if role == "auto" else c.best)
                    row.update({"pair": number, "model_shape": c.model, "job": c.job, "role": role})
                    writer.writerow(row)


def class_table(all_cases):
    by_class = {}
    # The grid's policies only: auto's plan is often one of them, and counting it twice
    # would weigh its class. One error per policy and case, against its median.
    for case in all_cases:
        for name in case.grid():
            predicted = case.predicted(name)
            plan_class = case.record(name).get("plan_class") or {}
            if not predicted or "name" not in plan_class:
                continue
            errors = by_class.setdefault(plan_class["name"], (plan_class["band"], []))[1]
            errors.append(predicted / case.measured(name) - 1)
    lines = ["| plan class | band | policies x cases | within band | median predicted/measured | range |",
             "|---|--:|--:|--:|--:|---|"]
    for name, (band, errors) in sorted(by_class.items()):
        within = sum(abs(e) <= band for e in errors)
        lines.append(f"| {name} | ±{band * 100:.0f}% | {len(errors)} | {within} | "
                     f"{1 + statistics.median(errors):.2f} | {1 + min(errors):.2f}-{1 + max(errors):.2f} |")
    return "\n".join(lines)


def print_best(argv):
    """--best OUTDIR MODEL JOB: the case's best grid policy, for planner_sweep.sh --confirm."""
    if len(argv) != 3:
        print("planner_sweep.py --best OUTDIR MODEL JOB", file=sys.stderr)
        return 2
    outdir, model, job = argv
    case = next((c for c in cases(outdir) if (c.model, c.job) == (model, job)), None) if os.path.isdir(outdir) else None
    best = best_grid_policy(case) if case else None
    if not best:
        print(f"planner_sweep.py: no grid policy of {model} {job} ran in every round under {outdir}", file=sys.stderr)
        return 1
    print(best)
    return 0


def main(argv):
    if argv and argv[0] == "--best":
        return print_best(argv[1:])
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr if len(argv) != 1 else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    outdir = argv[0]
    if not os.path.isdir(outdir):
        print(f"planner_sweep.py: {outdir} is not a folder", file=sys.stderr)
        return 1
    all_cases = cases(outdir)
    if not all_cases:
        print(f"planner_sweep.py: no round folders with cases (rN/MODEL/JOB/) under {outdir} (a sweep from "
              "before --rounds: move its MODEL folders under r1/)", file=sys.stderr)
        return 1
    write_csv(outdir, all_cases)
    print(auto_table(all_cases))
    print()
    print(class_table(all_cases))
    print(f"\nrows: {os.path.join(outdir, 'sweep.csv')}")
    confirmed = confirmations(outdir)
    if confirmed:
        write_confirm_csv(outdir, [confirmed[k] for k in sorted(confirmed)])
        print()
        print(confirm_table(all_cases, confirmed))
        print(f"\nrows: {os.path.join(outdir, 'confirm.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
