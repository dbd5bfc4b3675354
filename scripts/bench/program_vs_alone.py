#!/usr/bin/env python3
"""Sweeping a program of your own: does pausing it slow what ptune measures, and how soon does
ptune decide a 10% change, against two plain runs compared by their averages?

1. Alone against ptune: the example training script (scripts/examples/train.py) run alone for
   --alone-steps steps, its own per-step times read from its lines (median ms/step after the first
   quarter), against `ptune sweep` of the same command as one row (samples/s with its 95%
   interval). The ratio should be 1.00x, the plain run's rate inside ptune's interval.
2. A 10% change: the same command with EXAMPLE_EXTRA_MS set to 10% of its step (known work added to
   each step) as a second row. ptune's time to its verdict (the sweep's wall time) and its verdict;
   against --pairs pairs of plain runs (base then slower, each --plain-steps steps), how often the
   plain comparison gets the direction wrong (calls the slower one faster).

  python3 scripts/bench/program_vs_alone.py [--ptune build/apps/ptune/ptune] [--python python3]

Everything runs on this machine in this one command; run it on a quiet machine, or beside a
busy process to see both kinds of comparison under load.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "scripts", "examples", "train.py")
LINE = re.compile(r"^step (\d+)/\S+ loss \S+ ([0-9.]+) ms/step")


def plain_run(python, args, steps, extra_ms=0.0):
    """ms/step of one plain run: the median of its own per-step times after the first quarter."""
    env = dict(os.environ, EXAMPLE_EXTRA_MS=str(extra_ms))
    out = subprocess.run([python, TRAIN, *args, "--steps", str(steps)], capture_output=True, text=True,
                         env=env, check=True).stdout
    ms = [float(m.group(2)) for m in map(LINE.match, out.splitlines()) if m]
    return statistics.mean(ms[len(ms) // 4:]), statistics.median(ms[len(ms) // 4:])


def ptune_sweep(ptune, python, args, rows, tmp, measure):
    cfg = {"name": "program-bench",
           "program": {"command": [python, TRAIN, "--steps", "0", *args], "step_pattern": r"^step (?<step>\d+)/",
                       "startup_timeout_s": 600},
           "measure": measure, "sweep": rows}
    path, out = os.path.join(tmp, "cfg.json"), os.path.join(tmp, "out.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    t0 = time.time()
    subprocess.run([ptune, "--quiet", "sweep", path, "--out", out], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["rows"], time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default=os.path.join(ROOT, "build", "apps", "ptune", "ptune"))
    ap.add_argument("--python", default="python3", help="a Python with torch and torchvision")
    ap.add_argument("--args", default="--arch resnet18 --image-size 32 --batch-size 8",
                    help="the example's arguments")
    ap.add_argument("--alone-steps", type=int, default=120)
    ap.add_argument("--plain-steps", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each ptune sweep")
    a = ap.parse_args()
    args = a.args.split()
    measure = {"warmup_steps": 5, "steps": 10, "repeats": 4, "processes": 2, "max_s": 90}
    with tempfile.TemporaryDirectory() as tmp:
        print("1. alone against ptune (same command, steps/s)")
        ratios = []
        for r in range(a.repeats):
            _, alone_ms = plain_run(a.python, args, a.alone_steps)
            rows, _ = ptune_sweep(a.ptune, a.python, args, [{"name": "alone"}], tmp, measure)
            row = rows[0]
            alone = 1000.0 / alone_ms
            lo, hi = row["samples_per_s_lo"], row["samples_per_s_hi"]
            ratios.append(row["samples_per_s"] / alone)
            print(f"   run {r + 1}: plain {alone:.2f} steps/s; ptune {row['samples_per_s']:.2f} [{lo:.2f}, {hi:.2f}]"
                  f" -> ptune/plain {row['samples_per_s'] / alone:.3f}x, plain {'inside' if lo <= alone <= hi else 'OUTSIDE'}")
        print(f"   median ptune/plain: {statistics.median(ratios):.3f}x")

        base_mean, base_ms = plain_run(a.python, args, a.plain_steps)
        extra = 0.10 * base_ms
        print(f"2. a 10% change: EXAMPLE_EXTRA_MS={extra:.1f} (10% of a {base_ms:.1f} ms step)")
        for r in range(a.repeats):
            rows, secs = ptune_sweep(a.ptune, a.python, args,
                                     [{"name": "base"}, {"name": "+10%", "set": {"program.env.EXAMPLE_EXTRA_MS": f"{extra:.3f}"}}],
                                     tmp, measure)
            b = rows[1]
            print(f"   ptune run {r + 1}: {b.get('verdict_vs_prev')} {b.get('speedup_vs_prev')} "
                  f"{b.get('speedup_vs_prev_interval', '')} (known {1 / 1.1:.3f}x) in {secs:.0f} s")
        wrong, t0 = 0, time.time()
        for k in range(a.pairs):
            m_base, _ = plain_run(a.python, args, a.plain_steps)
            m_slow, _ = plain_run(a.python, args, a.plain_steps, extra)
            wrong += m_slow <= m_base
            print(f"   plain pair {k + 1}: base {m_base:.1f} ms, +10% {m_slow:.1f} ms -> {m_base / m_slow:.3f}x")
        print(f"   plain pairs: {wrong} of {a.pairs} called the slower one faster or equal, "
              f"{(time.time() - t0) / a.pairs:.0f} s a pair")


if __name__ == "__main__":
    main()
