#!/usr/bin/env python3
"""Compares two or more `ptune sweep --out` results files of the same config, row by row.

Prints each row's samples/s in every run, the spread between runs ((max - min) / median, in %)
and, for a sweep that ends in a `measure.mode: synthetic` row, the last training row as a share
of that ceiling in each run. Exits 1 when a row's spread passes --tolerance (default 5%).

  python3 scripts/bench/agreement.py run1.json run2.json [--tolerance 5]
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results JSON files of the same sweep")
    ap.add_argument("--tolerance", type=float, default=5.0, help="largest spread allowed, in %%")
    args = ap.parse_args()
    if len(args.results) < 2:
        ap.error("give at least two results files")
    runs = []
    for path in args.results:
        with open(path) as f:
            runs.append(json.load(f))
    names = [[r["name"] for r in run["rows"]] for run in runs]
    if any(n != names[0] for n in names):
        sys.exit(f"agreement.py: error: the files do not hold the same rows: {names}")
    worst = 0.0
    print(f"{'#':>2}  {'row':28s} " + " ".join(f"{'run ' + str(i + 1):>10s}" for i in range(len(runs))) + f" {'spread':>8s}")
    for i, name in enumerate(names[0]):
        values = [run["rows"][i].get("samples_per_s") if run["rows"][i]["status"] == "ok" else None for run in runs]
        if any(v is None for v in values):
            print(f"{i:>2}  {name:28s} " + " ".join(f"{v:10.1f}" if v else f"{'-':>10s}" for v in values))
            continue
        spread = 100.0 * (max(values) - min(values)) / statistics.median(values)
        worst = max(worst, spread)
        print(f"{i:>2}  {name:28s} " + " ".join(f"{v:10.1f}" for v in values) + f" {spread:7.1f}%")
    rows = runs[0]["rows"]
    modes = [r.get("mode", "train") for r in rows]
    if modes and modes[-1] == "synthetic" and len(rows) >= 2:
        shares = []
        for run in runs:
            last, ceiling = run["rows"][-2].get("samples_per_s"), run["rows"][-1].get("samples_per_s")
            if last and ceiling:
                shares.append(100.0 * last / ceiling)
        if shares:
            print(f"end to end / synthetic ceiling: " + ", ".join(f"{s:.1f}%" for s in shares))
    print(f"largest spread between runs: {worst:.1f}% (tolerance {args.tolerance:g}%)")
    return 1 if worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
