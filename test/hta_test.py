"""ptune's traces read by a real consumer: HTA (Holistic Trace Analysis, pinned in
third_party/versions.env, installed by scripts/setup's ptune_install_test_tools).

Runs a tiny CPU sweep of two rows with --profile, loads each row's trace folder in HTA's
TraceAnalysis (it must find one rank and the profiled steps as iterations), compares the two
rows with HTA's TraceDiff, then runs a one-row sweep under `ptune launch --nproc-per-node 2`
(Gloo on the CPU) and checks that HTA sees ranks 0 and 1 in that row's folder.

What HTA cannot do with CPU traces is not asserted: its breakdowns (temporal, kernel, idle
time, communication/computation overlap, CUDA kernel launch statistics) read GPU kernels.

Usage: python hta_test.py PTUNE_EXE
"""

import json
import logging
import os
import subprocess
import sys
import tempfile
import time

PROFILE_STEPS = 3


def fail(message):
    print(f"hta_test: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(cmd, what):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{what} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    print(f"hta_test: {what}: {time.time() - t0:.1f} s")
    return p


def config(name, out_dir, rows):
    return {
        "name": name, "device": "cpu", "cpu_threads": 1,
        "data": {"num_samples": 64, "image_size": 16},
        "loader": {"batch_size": 4},
        "measure": {"warmup_steps": 1, "steps": 1, "profile_steps": PROFILE_STEPS, "out_dir": out_dir},
        "sweep": rows,
    }


def main():
    if len(sys.argv) != 2:
        fail("usage: hta_test.py PTUNE_EXE")
    exe = sys.argv[1]
    try:
        import hta
        from hta.trace_analysis import TraceAnalysis
        from hta.trace_diff import TraceDiff, LabeledTrace
    except ImportError as e:
        fail(f"HTA is not installed in {sys.executable} ({e}): run scripts/setup's ptune_install_test_tools")
    logging.getLogger("hta").setLevel(logging.ERROR)
    print(f"hta_test: HTA {'.'.join(map(str, hta.version.__version_tuple__))}")

    with tempfile.TemporaryDirectory(prefix="ptune-hta-") as tmp:
        runs = os.path.join(tmp, "runs")

        # Two rows, one process.
        cfg = os.path.join(tmp, "two.json")
        with open(cfg, "w") as f:
            json.dump(config("hta", runs, [{"name": "base"},
                                           {"name": "set to none", "set": {"optim.set_to_none": True}}]), f)
        results = os.path.join(tmp, "two-results.json")
        run([exe, "sweep", cfg, "--profile", "--out", results], "sweep of 2 rows with --profile")
        with open(results) as f:
            rows = json.load(f)["rows"]
        folders = [os.path.dirname(r["trace"]) for r in rows]
        if folders != [os.path.join(runs, "hta", "00-base"), os.path.join(runs, "hta", "01-set-to-none")]:
            fail(f"unexpected trace folders {folders}")

        for folder in folders:
            analysis = TraceAnalysis(trace_dir=folder)
            ranks = analysis.t.get_ranks()
            if ranks != [0]:
                fail(f"{folder}: HTA found ranks {ranks}, expected [0]")
            iterations = analysis.t.get_iterations(0)
            # HTA leaves out the last ProfilerStep (its GPU work may reach past the trace).
            if len(iterations) < PROFILE_STEPS - 1:
                fail(f"{folder}: HTA found iterations {iterations}, expected at least {PROFILE_STEPS - 1}")
            print(f"hta_test: {os.path.basename(folder)}: ranks {ranks}, iterations {list(map(int, iterations))}")

        # The comparison of the two rows, CPU operators, one iteration each.
        t0 = time.time()
        control = LabeledTrace(label="base", trace_dir=folders[0])
        test = LabeledTrace(label="set to none", trace_dir=folders[1])
        if not control.iterations() or not test.iterations():
            fail(f"TraceDiff found no iterations: {control.iterations()}, {test.iterations()}")
        diff = TraceDiff.compare_traces(control, test)
        if diff is None or len(diff) == 0:
            fail("TraceDiff.compare_traces returned nothing")
        names = set(diff["name"]) if "name" in diff else set(diff.index)
        for op in ("aten::convolution", "ptune::forward", "Optimizer.zero_grad#SGD.zero_grad"):
            if op not in names:
                fail(f"TraceDiff's comparison lacks {op}: {sorted(names)[:20]}...")
        ops = TraceDiff.ops_diff(control, test)
        print(f"hta_test: TraceDiff.compare_traces: {len(diff)} operators compared; ops_diff: "
              + ", ".join(f"{k} {len(v)}" for k, v in ops.items()) + f" ({time.time() - t0:.1f} s)")

        # One row on two data-parallel ranks: one trace each, HTA sees both.
        cfg = os.path.join(tmp, "dp.json")
        with open(cfg, "w") as f:
            json.dump(config("hta-dp", runs, [{"name": "dp"}]), f)
        results = os.path.join(tmp, "dp-results.json")
        run([exe, "launch", "--nproc-per-node", "2", "--master-port", "0", "--", "sweep", cfg, "--profile",
             "--out", results], "ptune launch --nproc-per-node 2 -- sweep --profile")
        folder = os.path.join(runs, "hta-dp", "00-dp")
        files = sorted(os.listdir(folder))
        if len(files) != 2:
            fail(f"{folder}: expected 2 traces, found {files}")
        analysis = TraceAnalysis(trace_dir=folder)
        ranks = analysis.t.get_ranks()
        if ranks != [0, 1]:
            fail(f"{folder}: HTA found ranks {ranks}, expected [0, 1]")
        for rank in ranks:
            iterations = analysis.t.get_iterations(rank)
            if len(iterations) < PROFILE_STEPS - 1:
                fail(f"{folder}: rank {rank}: HTA found iterations {iterations}")
        print(f"hta_test: 2 ranks: HTA found ranks {ranks}, iterations "
              f"{[list(map(int, analysis.t.get_iterations(r))) for r in ranks]}")
    print("hta_test: ok")


if __name__ == "__main__":
    main()
