"""ptune analyze's GPU figures against HTA's (Holistic Trace Analysis) on the same traces.

    python hta_agreement.py PTUNE_EXE TRACE... [--table] [--time]

Each TRACE is a trace file (.json, .json.gz) or a folder of one trace per rank. For each rank
HTA's figures (TraceAnalysis with include_last_profiler_step=True, so that both count every
step) are compared with `ptune analyze --format json`'s:

  temporal breakdown   idle, compute and non-compute time, % of the span of the device work
                       (HTA's get_temporal_breakdown; ptune's "gpu"."trace")  tolerance 1.0 point
  kernel time          per kernel name, the 10 largest                        tolerance 0.5%, or 2 us per call
  communication        overlap of NCCL kernels with compute kernels, % of the
                       communication (HTA's get_comm_comp_overlap)             tolerance 0.5 points

"gpu"."trace" is ptune's figures over the device work HTA keeps (launched before the end of the
last ProfilerStep, work before the first step included); ptune's verdict uses its step windows
instead ("gpu" itself: each ProfilerStep extended to the end of the work it launched; without
ProfilerStep, the trace after its one-time set-up), printed alongside for information. A known
difference of definition: HTA reads times as whole microseconds (a trace written with
fractional microseconds, as torch 2.x's are, loses up to 2 us per event there (start and end truncated); ptune keeps them),
hence the per-call kernel tolerance and the 1-point temporal one. Another: HTA counts "Event Sync"/"Context Sync" rows on the device timeline
(cat cuda_sync) as non-compute device time; ptune does not read them (docs/analyze.md).

Exit status 1 when a figure is outside its tolerance; --table prints the docs' Markdown rows;
--time also times HTA's load and ptune's analysis of each trace.
"""

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")

TOL_TEMPORAL = 1.0   # percentage points
TOL_KERNEL_REL = 0.005
TOL_KERNEL_ABS_US_PER_CALL = 2.0  # HTA truncates start and end to whole microseconds
TOL_OVERLAP = 0.5    # percentage points


def ptune_json(exe, path):
    t0 = time.time()
    p = subprocess.run([exe, "analyze", path, "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"hta_agreement: ptune analyze {path} exited {p.returncode}: {p.stderr}")
    return json.loads(p.stdout), time.time() - t0


def hta_dir(path, tmp):
    """HTA reads a folder: a single file is linked into one of its own."""
    if os.path.isdir(path):
        return path
    d = tempfile.mkdtemp(dir=tmp)
    name = os.path.basename(path)
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        name += ".json"
    os.symlink(os.path.abspath(path), os.path.join(d, name))
    return d


def ranks_of(j):
    """ptune's per-rank GPU figures: {rank: (gpu, comm_overlap_pct)}."""
    if j["distributed"]:
        return {r["rank"] if r["rank"] is not None else i: (r["gpu"], r["comm_overlap_pct"], r["comm_pct"])
                for i, r in enumerate(j["distributed"]["ranks"])}
    rank = j["rank"] if j["rank"] is not None else 0
    return {rank: (j["gpu"], j["mean"]["comm_overlap_pct"], j["mean"]["comm_pct"])}


def compare(exe, path, tmp, timing):
    from hta.trace_analysis import TraceAnalysis

    j, ptune_s = ptune_json(exe, path)
    t0 = time.time()
    analysis = TraceAnalysis(trace_dir=hta_dir(path, tmp), include_last_profiler_step=True)
    hta_load_s = time.time() - t0
    temporal = analysis.get_temporal_breakdown(visualize=False)
    try:
        _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=1000,
                                                       include_memory_kernels=True, image_renderer=None)
    except TypeError:
        _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=1000)
    try:
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    except Exception:  # no communication kernels
        overlap = None
    rows, failures = [], []
    ours = ranks_of(j)
    for _, t in temporal.iterrows():
        rank = int(t["rank"])
        if rank not in ours and len(ours) == 1:
            rank = next(iter(ours))
        gpu, ptune_overlap, comm_pct = ours.get(rank, (None, None, None))
        if gpu is None:
            failures.append(f"{path}: rank {rank}: ptune has no GPU figures")
            continue
        row = {"path": path, "rank": rank, "verdict": j["verdict"]["rule"], "steps_idle": gpu["idle_pct"]}
        steps_kernels = gpu["kernels"]
        gpu = gpu["trace"]
        for key, hta_key in (("idle_pct", "idle_time_pctg"), ("compute_pct", "compute_time_pctg"),
                             ("non_compute_pct", "non_compute_time_pctg")):
            a, b = gpu[key], float(t[hta_key])
            row[key] = (a, b)
            if abs(a - b) > TOL_TEMPORAL:
                failures.append(f"{path}: rank {rank}: {key} ptune {a:.2f} HTA {b:.2f} (tolerance {TOL_TEMPORAL})")
        # Kernel time by name (HTA's metrics are per rank; the table lists every rank's).
        per = kernels[kernels["rank"] == t["rank"]] if "rank" in kernels else kernels
        sums = {}
        for _, k in per.iterrows():
            sums[k["name"]] = sums.get(k["name"], 0.0) + float(k["sum (us)"])
        worst = 0.0
        for k in gpu["kernels"][:10]:
            ours_us, theirs = k["total_us"], sums.get(k["name"])
            if theirs is None:
                continue  # HTA folds kernels beyond its top-N into "others"
            diff = abs(ours_us - theirs)
            worst = max(worst, diff / max(theirs, 1e-9))
            if diff > max(TOL_KERNEL_REL * theirs, TOL_KERNEL_ABS_US_PER_CALL * k["count"]):
                failures.append(f"{path}: rank {rank}: kernel {k['name'][:60]} ptune {ours_us:.0f} us HTA {theirs:.0f} us")
        row["kernel_worst_rel"] = worst
        ptune_overlap = gpu["comm_overlap_pct"]
        if overlap is not None and ptune_overlap is not None:
            o = overlap[overlap["rank"] == t["rank"]]
            if len(o):
                b = float(o.iloc[0]["comp_comm_overlap_pctg"])
                row["overlap"] = (ptune_overlap, b)
                if abs(ptune_overlap - b) > TOL_OVERLAP:
                    failures.append(f"{path}: rank {rank}: comm overlap ptune {ptune_overlap:.2f} HTA {b:.2f}")
        row["hta_load_s"], row["ptune_s"] = hta_load_s, ptune_s
        rows.append(row)
    return rows, failures


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    table, timing = "--table" in sys.argv, "--time" in sys.argv
    if len(args) < 2:
        raise SystemExit("usage: hta_agreement.py PTUNE_EXE TRACE... [--table] [--time]")
    exe, paths = args[0], args[1:]
    try:
        import hta  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"hta_agreement: HTA is not installed in {sys.executable} ({e})")
    logging.getLogger("hta").setLevel(logging.ERROR)
    logging.disable(logging.WARNING)
    all_failures = []
    with tempfile.TemporaryDirectory(prefix="ptune-hta-") as tmp:
        for path in paths:
            rows, failures = compare(exe, path, tmp, timing)
            all_failures += failures
            for r in rows:
                def pair(k):
                    return f"{r[k][0]:.2f} / {r[k][1]:.2f}" if k in r else "-"
                if table:
                    print(f"| {os.path.basename(path.rstrip('/'))} | {r['rank']} | {pair('idle_pct')} | "
                          f"{pair('compute_pct')} | {pair('non_compute_pct')} | {100 * r['kernel_worst_rel']:.2f}% | "
                          f"{pair('overlap')} | {r['steps_idle']:.2f} | {r['verdict']} |"
                          + (f" {r['hta_load_s']:.2f} s / {r['ptune_s']:.2f} s |" if timing else ""))
                else:
                    print(f"hta_agreement: {path} rank {r['rank']}: idle {pair('idle_pct')}, compute "
                          f"{pair('compute_pct')}, non-compute {pair('non_compute_pct')} (ptune / HTA), kernels "
                          f"within {100 * r['kernel_worst_rel']:.2f}%, overlap {pair('overlap')}"
                          + (f"; HTA load {r['hta_load_s']:.2f} s, ptune {r['ptune_s']:.2f} s" if timing else ""))
    for f in all_failures:
        print(f"hta_agreement: FAIL: {f}", file=sys.stderr)
    if all_failures:
        sys.exit(1)
    print("hta_agreement: ok")


if __name__ == "__main__":
    main()
