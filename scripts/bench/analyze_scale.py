#!/usr/bin/env python3
"""Time and peak memory of `ptune analyze` as a trace grows.

Takes a real trace (default: the A100 rank-0 trace of test/data/traces/hta_two_ranks), repeats
its steps end to end until the file reaches each size asked for (timestamps shifted by the
trace's span, ProfilerStep#N renumbered, correlation and flow ids kept unique), and runs
`ptune analyze FILE --format json` on each, --repeats times: the median wall time, the
throughput in MB of JSON a second, and the peak resident memory of the process (its maximum
RSS, as the kernel counts it) over the file's size. With --hta, HTA's TraceAnalysis loads the
same file in the same way (where HolisticTraceAnalysis is installed), for the same figures.

  python3 scripts/bench/analyze_scale.py --ptune build/apps/ptune/ptune --sizes 30,300,2000

The generated files go to a temporary folder (removed after, unless --keep DIR).
"""
import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TRACE = os.path.join(ROOT, "test", "data", "traces", "hta_two_ranks", "rank-0.json.gz")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def step_number(name):
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        try:
            return int(name[len("ProfilerStep#"):])
        except ValueError:
            return None
    return None


def repeat_to(doc, target_bytes, out_path):
    """Writes `doc` with its events repeated until the file holds at least `target_bytes`;
    returns (bytes written, steps)."""
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + (e.get("dur") or 0) for e in timed) - start
    # A gap between copies; a whole number of microseconds, so that every copy's times are the
    # original's shifted exactly (its steps' figures then equal the original's, bit for bit).
    span = math.ceil(span * 1.01 + 1000)
    steps = [n for n in (step_number(e.get("name")) for e in events) if n is not None]
    first_step, n_steps = (min(steps), max(steps) - min(steps) + 1) if steps else (0, 0)
    ids = [e.get("args", {}).get("correlation", 0) for e in events if isinstance(e.get("args"), dict)]
    id_span = max([i for i in ids if isinstance(i, int)] + [0]) + 1
    flow_span = max([e["id"] for e in events if isinstance(e.get("id"), int)] + [0]) + 1
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    written, copies = 0, 0
    with open(out_path, "w", encoding="utf-8") as f:
        prefix = json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n'
        f.write(prefix)
        written += len(prefix)
        first = True
        while written < target_bytes:
            k = copies
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * span
                n = step_number(e2.get("name"))
                if n is not None:
                    e2["name"] = "ProfilerStep#%d" % (n + k * n_steps)
                if isinstance(e2.get("args"), dict):
                    a = dict(e2["args"])
                    for key in ("correlation", "External id"):
                        if isinstance(a.get(key), int) and a[key] > 0:
                            a[key] = a[key] + k * id_span
                    e2["args"] = a
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + k * flow_span
                line = ("" if first else ",\n") + json.dumps(e2, separators=(",", ":"))
                first = False
                f.write(line)
                written += len(line)
            copies += 1
        f.write("\n]}\n")
        written += 4
    return written, copies * n_steps


def run_measured(argv):
    """(wall seconds, peak RSS in bytes) of one run of argv, its output discarded."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), code, err.strip()[-500:]))
    return wall, usage.ru_maxrss * 1024


HTA_SNIPPET = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir="/")
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ptune", default=os.path.join(ROOT, "build", "apps", "ptune", "ptune"))
    ap.add_argument("--trace", default=DEFAULT_TRACE, help="the trace whose steps are repeated")
    ap.add_argument("--sizes", default="30,300", help="file sizes in MB, comma-separated (default 30,300)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per size; the median is printed (default 3)")
    ap.add_argument("--hta", action="store_true", help="also load each file with HTA's TraceAnalysis")
    ap.add_argument("--keep", metavar="DIR", help="write the generated traces here and keep them")
    args = ap.parse_args()
    try:
        sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        sys.exit("analyze_scale: error: --sizes: %r is not a list of numbers (MB)" % args.sizes)
    if not os.access(args.ptune, os.X_OK):
        sys.exit("analyze_scale: error: --ptune: %s is not an executable" % args.ptune)
    doc = load(args.trace)
    folder = args.keep or tempfile.mkdtemp(prefix="ptune-analyze-scale-")
    os.makedirs(folder, exist_ok=True)
    print("trace: %s; %d run(s) per size, median; peak RSS: the process's maximum resident memory" %
          (os.path.relpath(args.trace, ROOT), args.repeats))
    header = "%10s %7s %9s %8s %13s %9s" % ("file MB", "steps", "time s", "MB/s", "peak RSS MB", "RSS/file")
    print(header)
    try:
        for mb in sizes:
            path = os.path.join(folder, "trace-%gMB.json" % mb)
            size, steps = repeat_to(doc, int(mb * 1e6), path)
            tools = [("ptune", [args.ptune, "analyze", path, "--format", "json"])]
            if args.hta:
                tools.append(("HTA", [sys.executable, "-c", HTA_SNIPPET, path]))
            for name, argv in tools:
                try:
                    runs = [run_measured(argv) for _ in range(args.repeats)]
                except RuntimeError as e:
                    print("%10.1f %7d  %s: %s" % (size / 1e6, steps, name, e))
                    continue
                wall = statistics.median(r[0] for r in runs)
                rss = statistics.median(r[1] for r in runs)
                print("%10.1f %7d %9.2f %8.1f %13.0f %9.2f  %s" %
                      (size / 1e6, steps, wall, size / 1e6 / wall, rss / 1e6, rss / size, name))
            sys.stdout.flush()
            if not args.keep:
                os.remove(path)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
