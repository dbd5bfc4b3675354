#!/usr/bin/env python3
"""ptune's process.allocator rows against the same allocators under Python, on the same machine.

Each round, in turn: one `ptune sweep` whose rows are the allocators (glibc's default malloc,
glibc tuned, jemalloc, tcmalloc, or those --allocators names; every row in --processes child
processes started with its setting, the first too, as ptune runs a sweep with process-level
rows), then, for each allocator, the same training step in --processes fresh Python processes
started the way a user would start one: `GLIBC_TUNABLES=...` for glibc tuned,
`LD_PRELOAD=<library>` for jemalloc and tcmalloc, nothing for the default. The order of the
allocators' Python processes rotates from round to round.

The same work on every side: torchvision's model (ptune builds the same one) on one batch
already in memory (ptune's measure.mode synthetic), SGD with momentum through the fused kernel,
gradients set to None, cross-entropy on random labels, bf16 through torch.autocast when asked;
the same thread count (default: what each process picks by itself, as a default PyTorch process
does). Warm-up steps are not timed.

Printed (and written with --json): per allocator the median ms per step over the rounds of each
side with the spread (max - min) / median, ptune / Python in samples/s (> 1: ptune faster), and
each side's speedup of the allocator over glibc's default, so the two can be compared: where the
allocator helps Python, it should help ptune alike. The first row answers "is ptune's baseline
a default Python process?": ptune / Python on glibc's default malloc. Each ratio also gets its
95% interval over the rounds (a round's two sides ran minutes apart, so the ratios are taken
round by round: the geometric mean and a t-interval on their logs), and the last column,
Python's gain over ptune's, says whether the allocator moves the two alike: an interval holding
1.00x. "by process" is ptune / Python again, over every process of every round: each process's
own mean ms per step, the geometric means' ratio, and a Welch t-interval on the logs. A process's
speed is partly its own (where its memory landed), so this interval counts that spread, and
narrows with more processes (--processes, --rounds) where the round-by-round one cannot.

  python3 scripts/bench/cpu_allocators.py --ptune build/apps/ptune/ptune --arch convnext_tiny \\
      --precision bf16 --rounds 3 --json allocators.json
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_vs_pytorch as zoo  # noqa: E402  (PythonSide, summary, machine)

TUNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_max=0"
LIBRARIES = {"jemalloc": ["libjemalloc.so.2"], "tcmalloc": ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4"]}
DIRS = ["/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/lib"]


def find(names):
    for d in DIRS:
        for n in names:
            if os.path.isfile(os.path.join(d, n)):
                return os.path.join(d, n)
    return None


def environment(allocator):
    """The environment a user starts Python with for `allocator`, or None when it is not installed."""
    if allocator == "glibc":
        return {}
    if allocator == "glibc_tuned":
        return {"GLIBC_TUNABLES": TUNED}
    lib = find(LIBRARIES[allocator])
    return {"LD_PRELOAD": lib} if lib else None


def per_process(row):
    """A sweep row's own windows (not its printed, base-derived ms/step), each process's mean."""
    ms, proc = row["repeat_ms_per_step"], row.get("repeat_process") or [0] * len(row["repeat_ms_per_step"])
    by = {}
    for v, p in zip(ms, proc):
        by.setdefault(p, []).append(float(v))
    return [statistics.fmean(v) for _, v in sorted(by.items())]


def ptune_ms(args, allocators, tmp):
    """One sweep, a row per allocator: {allocator: (ms/step as printed, [each process's own ms/step])}."""
    cfg = {
        "name": "allocator-bench", "seed": 0, "device": "cpu", "cpu_threads": args.threads,
        "model": {"arch": args.arch, "num_classes": 10},
        "data": {"kind": "fake_cifar", "num_samples": args.batch * 4, "image_size": args.image_size},
        "loader": {"batch_size": args.batch, "num_workers": 0},
        "optim": {"kind": "sgd", "lr": 0.01, "momentum": 0.9, "set_to_none": True,
                  "amp": "bf16" if args.precision == "bf16" else "off"},
        "measure": {"mode": "synthetic", "warmup_steps": args.warmup, "steps": args.steps,
                    "repeats": args.windows, "target_ci_pct": 100, "max_s": 3600,
                    "processes": args.processes},
        "sweep": [{"name": a, "set": {"process.allocator": a}} for a in allocators],
    }
    path = os.path.join(tmp, "allocators.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    proc = subprocess.run([args.ptune, "sweep", path, "--format", "json", "-q"], capture_output=True, text=True)
    try:
        rows = json.loads(proc.stdout)["rows"]
        return {r["changes"]["process.allocator"]: (float(r["ms_per_step"]), per_process(r)) for r in rows}
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"ptune failed: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")


class Side(zoo.PythonSide):
    """zoo.PythonSide started with an allocator's environment."""

    def __init__(self, args, env):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            super().__init__(args, args.arch, "bf16" if args.precision == "bf16" else "off", compiled=False)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# Student's t, 97.5% quantile, by degrees of freedom (1..30; larger: the normal's 1.96).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]


def t975(df):
    """Student's t 97.5% quantile for `df` degrees of freedom (at least 1)."""
    return T975[df - 1] if df <= len(T975) else 1.96


def ratio_interval(ratios):
    """The geometric mean of per-round ratios with its 95% t-interval: (mean, lo, hi); lo and hi are
    None with fewer than 2 rounds."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None, None
    df = len(logs) - 1
    half = t975(df) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def welch_interval(a, b):
    """exp(mean log b - mean log a) with its 95% Welch t-interval: (mean, lo, hi)."""
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    mean = statistics.fmean(lb) - statistics.fmean(la)
    if len(la) < 2 or len(lb) < 2:
        return math.exp(mean), None, None
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1)) if va + vb > 0 else 1e9
    k = max(1, int(df))
    half = t975(k) * math.sqrt(va + vb)
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def interval_text(iv):
    mean, lo, hi = iv
    return f"{mean:.2f}x" if lo is None else f"{mean:.2f}x [{lo:.2f}, {hi:.2f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default="build/apps/ptune/ptune")
    ap.add_argument("--arch", default="convnext_tiny")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="0: each process's own default, as PyTorch's")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, default=3,
                    help="processes a side each round (ptune's measure.processes, 2 to 8)")
    ap.add_argument("--allocators", default="glibc,glibc_tuned,jemalloc,tcmalloc",
                    help="comma-separated, glibc first")
    ap.add_argument("--windows", type=int, default=3, help="timed windows per run")
    ap.add_argument("--steps", type=int, default=3, help="steps per window")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    asked = [a.strip() for a in args.allocators.split(",") if a.strip()]
    if not asked or asked[0] != "glibc" or any(a not in LIBRARIES and a not in ("glibc", "glibc_tuned") for a in asked):
        raise SystemExit("--allocators: glibc first, then any of glibc_tuned, jemalloc, tcmalloc")
    if not 2 <= args.processes <= 8:
        raise SystemExit("--processes: 2 to 8 (ptune's measure.processes)")
    envs = {a: environment(a) for a in asked}
    allocators = [a for a, e in envs.items() if e is not None]
    for a, e in envs.items():
        if e is None:
            print(f"# {a}: not installed, left out")
    # zoo.PythonSide sets the thread count itself: 0 leaves PyTorch's default.
    py_args = argparse.Namespace(**vars(args))
    py_args.threads = args.threads or zoo.torch.get_num_threads()
    doc = {"machine": zoo.machine(), "settings": {k: v for k, v in vars(args).items() if k != "json"}, "rows": []}
    print(f"# {doc['machine']['name']}, {args.arch} {args.precision}, batch {args.batch}, "
          f"{args.image_size}x{args.image_size}, threads {args.threads or 'default'}, {args.rounds} rounds")
    runs = {a: {"ptune": [], "python": [], "ptune_processes": [], "python_processes": []} for a in allocators}
    with tempfile.TemporaryDirectory(prefix="ptune-alloc-bench-") as tmp:
        for k in range(args.rounds):
            for a, (ms, processes) in ptune_ms(args, allocators, tmp).items():
                runs[a]["ptune"].append(ms)
                runs[a]["ptune_processes"] += processes
            order = allocators[k % len(allocators):] + allocators[:k % len(allocators)]
            for a in order:
                this_round = []
                for _ in range(args.processes):
                    side = Side(py_args, envs[a])
                    this_round.append(side.ms())
                    side.close()
                runs[a]["python_processes"] += this_round
                runs[a]["python"].append(math.exp(statistics.fmean(math.log(v) for v in this_round)))
    base = {s: statistics.median(runs["glibc"][s]) for s in ("ptune", "python")}
    print(f"{'allocator':12} {'ptune ms':>14} {'python ms':>14} {'ptune/python':>20} {'ptune gain':>20} "
          f"{'python gain':>20} {'python/ptune gain':>20} {'by process':>20}")
    for a in allocators:
        pt, py = runs[a]["ptune"], runs[a]["python"]
        pt0, py0 = runs["glibc"]["ptune"], runs["glibc"]["python"]
        row = {"allocator": a, "environment": envs[a], "ptune": zoo.summary(pt), "python": zoo.summary(py)}
        row["ptune_vs_python"] = row["python"]["median_ms"] / row["ptune"]["median_ms"]
        row["ptune_gain"] = base["ptune"] / row["ptune"]["median_ms"]
        row["python_gain"] = base["python"] / row["python"]["median_ms"]
        # Round by round, with 95% intervals.
        rounds = range(len(pt))
        intervals = {
            "ptune_vs_python": ratio_interval([py[k] / pt[k] for k in rounds]),
            "ptune_gain": ratio_interval([pt0[k] / pt[k] for k in rounds]),
            "python_gain": ratio_interval([py0[k] / py[k] for k in rounds]),
            "python_gain_over_ptune_gain": ratio_interval([(py0[k] / py[k]) / (pt0[k] / pt[k]) for k in rounds]),
            "ptune_vs_python_by_process": welch_interval(runs[a]["ptune_processes"], runs[a]["python_processes"]),
        }
        row["intervals"] = {k: {"mean": v[0], "lo": v[1], "hi": v[2]} for k, v in intervals.items()}
        doc["rows"].append(row)

        def cell(s):
            return f"{s['median_ms']:8.1f} ±{s['spread_pct']:3.0f}%"
        print(f"{a:12} {cell(row['ptune']):>14} {cell(row['python']):>14} "
              + " ".join(f"{interval_text(v):>20}" for v in intervals.values()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
