#!/usr/bin/env python3
"""Summarises a bench/planner_sweep.sh run.

    planner_sweep.py OUTDIR          # writes OUTDIR/sweep.csv, prints the markdown tables
    planner_sweep.py --best OUTDIR MODEL JOB [N]   # prints the case's N best grid policies

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
  holds policies.txt, the grid policies confirmed (the sweep's best first, one name a
  line), and auto-pI.json and NAME-pI.json, set I of auto and those policies run one
  after the other): auto over each policy per set and the median of the sets. The best
  of 21 noisy medians is a lucky draw as often as the best plan; run again beside auto,
  minutes apart, it is measured without that luck. OUTDIR/confirm.csv gets a row per
  confirming run, with its set and its place in the set.

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

    def ranked(self):
        """The grid policies that ran in every round, best median first (a median of fewer
        runs is not weighed against theirs)."""
        return sorted((n for n in self.grid() if self.ran_every_round(n)), key=self.measured, reverse=True)


def rounds(outdir):
    """The round folders (rN) under outdir, in round order."""
    found = [d for d in os.listdir(outdir) if re.fullmatch(r"r[1-9][0-9]*", d)
             and os.path.isdir(os.path.join(outdir, d))]
    return sorted(found, key=lambda d: int(d[1:]))


def case_folders(root):
    """(model, job, folder) of every root/<model>/<job>/ folder, in sorted order."""
    for model in sorted(os.listdir(root)):
        model_dir = os.path.join(root, model)
        if not os.path.isdir(model_dir):
            continue
        for job in sorted(os.listdir(model_dir)):
            job_dir = os.path.join(model_dir, job)
            if os.path.isdir(job_dir):
                yield model, job, job_dir


def cases(outdir):
    """Every (model, job) case of the sweep's rounds, in sorted order."""
    by_key = {}
    for round_dir in rounds(outdir):
        round_number = int(round_dir[1:])
        for model, job, job_dir in case_folders(os.path.join(outdir, round_dir)):
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


def auto_table(all_cases):
    lines = ["| model | job (s:n:prompts) | policies run in every round / failed in some | best policy | "
             "best tok/s | auto's plan | auto tok/s | auto / best | per round | auto predicted / measured | "
             "auto-lp / best |",
             "|---|---|--:|---|--:|---|--:|--:|---|--:|--:|"]
    met = total = 0
    for case in all_cases:
        complete = case.ranked()
        failed = [n for n in case.failed if n not in SEARCHED]
        total += 1
        counts = f"{len(complete)} / {len(failed)}"
        if not complete:
            lines.append(f"| {case.model} | {case.job} | {counts} | - | - | - | - | - | - | - | - |")
            continue
        best_name = complete[0]
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
    """One case's confirming sets: auto and grid policies (the sweep's best first), run
    one after the other K times (planner_sweep.sh --confirm K)."""

    def __init__(self, model, job, policies, sets):
        self.model, self.job, self.policies = model, job, policies
        self.sets = sets  # set number -> {"auto" or a policy: record, or None where it failed}

    def ratios(self, policy):
        """auto over the policy in each set where both ran, in set order (None where not)."""
        out = []
        for number in sorted(self.sets):
            runs = self.sets[number]
            both = runs.get("auto") and runs.get(policy)
            out.append(runs["auto"]["total_throughput"] / runs[policy]["total_throughput"] if both else None)
        return out

    def median(self, policy):
        ran = [r for r in self.ratios(policy) if r is not None]
        return statistics.median(ran) if ran else None

    def set_texts(self, policy):
        """Each set's ratio, or which side of it failed."""
        texts = []
        for number, ratio in zip(sorted(self.sets), self.ratios(policy)):
            if ratio is not None:
                texts.append(f"{ratio:.2f}")
                continue
            failed = [name for name in ("auto", policy) if not self.sets[number].get(name)]
            texts.append("both failed" if len(failed) == 2 else f"{'auto' if failed[0] == 'auto' else 'policy'} failed")
        return texts


RUN_FILE = re.compile(r"(.+)-p([1-9][0-9]*)")  # NAME-pI: a confirming run of set I


def confirmations(outdir):
    """The confirmed cases under OUTDIR/confirm/<model>/<job>/ by (model, job); a case
    folder without policies.txt (not confirmed by this version of the script) maps to None."""
    root = os.path.join(outdir, "confirm")
    found = {}
    if not os.path.isdir(root):
        return found
    for model, job, job_dir in case_folders(root):
        policies_path = os.path.join(job_dir, "policies.txt")
        if not os.path.isfile(policies_path):
            found[(model, job)] = None
            continue
        policies = open(policies_path).read().split()
        sets = {}
        failed_path = os.path.join(job_dir, "failed.txt")
        if os.path.exists(failed_path):
            for line in open(failed_path).read().splitlines():
                m = RUN_FILE.fullmatch(line.split(":", 1)[0])
                if m:
                    sets.setdefault(int(m.group(2)), {})[m.group(1)] = None
        # A record on disk is a run that finished, whatever a failed line says.
        for f in os.listdir(job_dir):
            m = RUN_FILE.fullmatch(f[:-5]) if f.endswith(".json") else None
            if m:
                sets.setdefault(int(m.group(2)), {})[m.group(1)] = bench_records.load(os.path.join(job_dir, f))
        found[(model, job)] = Confirmation(model, job, policies, sets)
    return found


def confirm_table(all_cases, confirmed):
    """One row per confirmed policy of each case of the sweep, or why a case has none; a
    case counts when auto's median is at least TARGET against every policy confirmed."""
    lines = ["| model | job (s:n:prompts) | policy (the sweep's best first) | sets (both ran) | auto / policy per set | "
             "median of the sets |",
             "|---|---|---|--:|---|--:|"]
    met = 0
    keys = sorted({(c.model, c.job) for c in all_cases} | set(confirmed))
    for model, job in keys:
        c = confirmed.get((model, job))
        if c is None:
            lines.append(f"| {model} | {job} | (not confirmed) | 0 (0) | - | - |")
            continue
        medians = [c.median(p) for p in c.policies]
        met += bool(medians) and all(m is not None and m >= TARGET for m in medians)
        for policy, median in zip(c.policies, medians):
            ran = sum(r is not None for r in c.ratios(policy))
            lines.append(f"| {model} | {job} | {policy} | {len(c.sets)} ({ran}) | {', '.join(c.set_texts(policy)) or '-'} | "
                         f"{'-' if median is None else f'{median:.2f}'} |")
    lines.append("")
    lines.append(f"auto at least {TARGET}x every confirmed policy, in interleaved sets (median of the sets): "
                 f"{met} of {len(keys)} cases")
    return "\n".join(lines)


def write_confirm_csv(outdir, confirmed):
    """A row per confirming run; `position` is its place in its set (1: ran first), as
    planner_sweep.sh orders a set: auto and policies.txt, turned by one place per set."""
    columns = ["set", "position", "model_shape", "job", "role"] + bench_records.COLUMNS
    with open(os.path.join(outdir, "confirm.csv"), "w") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for c in confirmed:
            if c is None:
                continue
            members = ["auto"] + c.policies
            for number, runs in sorted(c.sets.items()):
                for name, r in sorted(runs.items()):
                    if not r:
                        continue
                    row = bench_records.row(r, name)
                    position = (members.index(name) - (number - 1)) % len(members) + 1 if name in members else ""
                    row.update({"set": number, "position": position, "model_shape": c.model, "job": c.job,
                                "role": "auto" if name == "auto" else "policy"})
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
    """--best OUTDIR MODEL JOB [N]: the case's N best grid policies (by median, among those
    that ran in every round), one a line, for planner_sweep.sh --confirm."""
    if len(argv) not in (3, 4) or (len(argv) == 4 and not argv[3].isdigit()):
        print("planner_sweep.py --best OUTDIR MODEL JOB [N]", file=sys.stderr)
        return 2
    outdir, model, job = argv[:3]
    top = int(argv[3]) if len(argv) == 4 else 1
    case = next((c for c in cases(outdir) if (c.model, c.job) == (model, job)), None) if os.path.isdir(outdir) else None
    ranked = case.ranked() if case else []
    if not ranked:
        print(f"planner_sweep.py: no grid policy of {model} {job} ran in every round under {outdir}", file=sys.stderr)
        return 1
    for name in ranked[:top]:
        print(name)
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
