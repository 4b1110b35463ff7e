#!/usr/bin/env python3
"""Prints bench/gpu-evidence/side-by-side.csv as one table per machine run, with the
ratios that pair rows of that machine only: tiergen with FlexGen's policy against
FlexGen (same-as-flexgen / flexgen-hand), tiergen --policy auto against FlexGen
(auto / flexgen-hand) and against tiergen with FlexGen's policy (auto / same-as-flexgen);
the plan searched on the profile calibrated to that window's runs (auto-calibrated)
against auto and against FlexGen's policy.
Rows of different machine runs are never divided: machines of one kind differ run to run.

Usage: tools/gpu-evidence-table.py [CSV]   (default: bench/gpu-evidence/side-by-side.csv)
Exits 1 with the file and line on a malformed row."""
import csv
import os
import sys

COLUMNS = ["date", "gpu", "cpu", "machine_run", "model", "gpu_cap_gib", "prompt_len", "gen_len", "system",
           "policy_kind", "policy", "total_tok_s", "decode_tok_s", "prefill_tok_s", "peak_gpu_gib",
           "roofline_s_per_token", "decode_s_per_token"]
KINDS = {("flexgen", "flexgen-hand"), ("tiergen", "same-as-flexgen"), ("tiergen", "auto"),
         ("tiergen", "auto-calibrated")}
NUMERIC = ["gpu_cap_gib", "prompt_len", "gen_len", "total_tok_s", "decode_tok_s", "prefill_tok_s", "peak_gpu_gib",
           "roofline_s_per_token", "decode_s_per_token"]
RATIOS = [("same-as-flexgen", "flexgen-hand", "tiergen, FlexGen's policy / FlexGen"),
          ("auto", "flexgen-hand", "tiergen auto / FlexGen"),
          ("auto", "same-as-flexgen", "tiergen auto / tiergen, FlexGen's policy"),
          ("auto-calibrated", "auto", "tiergen auto on the calibrated profile / tiergen auto"),
          ("auto-calibrated", "same-as-flexgen", "tiergen auto on the calibrated profile / tiergen, FlexGen's policy")]


def fail(path, line, message):
    sys.exit(f"{path}:{line}: {message}")


def read_rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            fail(path, 1, f"the header must be {','.join(COLUMNS)}")
        rows, seen = [], {}
        for line, row in enumerate(reader, start=2):
            if None in row or any(v is None for v in row.values()):
                fail(path, line, f"{len(COLUMNS)} fields expected")
            if (row["system"], row["policy_kind"]) not in KINDS:
                fail(path, line, f"system/policy_kind {row['system']}/{row['policy_kind']} is not one of "
                                 f"{sorted(KINDS)}")
            for key in NUMERIC:
                if row[key] == "":
                    continue
                try:
                    value = float(row[key])
                except ValueError:
                    fail(path, line, f"{key} is not a number: {row[key]!r}")
                if value < 0:
                    fail(path, line, f"{key} is negative: {row[key]}")
            if row["total_tok_s"] == "":
                fail(path, line, "total_tok_s is empty")
            key = (row["machine_run"], case_of(row), row["system"], row["policy_kind"])
            if key in seen:
                fail(path, line, f"a second {row['system']} {row['policy_kind']} row for {row['model']} on "
                                 f"{row['machine_run']} (line {seen[key]}): one per machine run and case")
            seen[key] = line
            rows.append(row)
    return rows


def case_of(row):
    return (row["model"], row["gpu_cap_gib"], row["prompt_len"], row["gen_len"])


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "bench", "gpu-evidence", "side-by-side.csv")
    rows = read_rows(path)
    runs = {}
    for row in rows:
        runs.setdefault(row["machine_run"], []).append(row)
    for run, members in runs.items():
        first = members[0]
        print(f"## {run}: {first['gpu']}, {first['cpu']}, {first['date']}\n")
        print("| model | GPU cap GiB | prompt/gen | system | policy kind | policy | total tok/s |")
        print("|---|--:|---|---|---|---|--:|")
        for r in members:
            print(f"| {r['model']} | {r['gpu_cap_gib']} | {r['prompt_len']}/{r['gen_len']} | {r['system']} | "
                  f"{r['policy_kind']} | {r['policy']} | {float(r['total_tok_s']):.2f} |")
        by_case = {}
        for r in members:
            by_case.setdefault(case_of(r), {})[r["policy_kind"]] = float(r["total_tok_s"])
        lines = []
        for case, kinds in by_case.items():
            for top, bottom, name in RATIOS:
                if top in kinds and bottom in kinds and kinds[bottom] > 0:
                    lines.append(f"- {case[0]} at {case[1]} GiB: {name} = {kinds[top] / kinds[bottom]:.2f}x")
        print()
        print("\n".join(lines) if lines else "- no ratio: no two systems or policies of one case on this machine")
        print()


if __name__ == "__main__":
    main()
