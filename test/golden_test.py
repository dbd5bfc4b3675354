#!/usr/bin/env python3
"""Golden outputs: what ptune prints for inputs saved once, byte for byte (stdlib only).

    python3 test/golden_test.py PATH/TO/ptune            check every case
    python3 test/golden_test.py PATH/TO/ptune --update   rewrite test/golden/*.out (review the diff)

Each case runs the built ptune on files in the repository (results files in test/golden/results/,
the trace fixtures in test/data/traces/, the configs in configs/) and compares its exit status,
stdout, stderr and any file it writes with test/golden/<case>.out. Covered: every command's
--help, `schema`, `check` on every config, `analyze` on the GPU trace fixtures in every format
(and its HTML overview, a comparison of versions, a folder of ranks), `report`'s HTML page and
its `--against` gate, and `report --format` on each results file in every format, whose JSON must
give the file back (round_trip). Only GPU
traces are analyzed here: a CPU trace is read against this machine's calibrated ceilings.

A change that alters an output on purpose updates the golden file in the same commit; any
other difference is a regression. Prints a unified diff per failing case and exits 1.
"""
import difflib
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "test", "golden")
TRACES = "test/data/traces"
COMMANDS = ["sweep", "report", "train", "eval", "check", "tune", "launch", "analyze", "schema"]
ANALYZE_FORMATS = ["table", "json", "md", "csv"]
RESULTS_FORMATS = ["table", "json", "md", "csv"]
# Runs compared by `report --against`: (old, new), each of test/golden/results/.
AGAINST = [("test/golden/results/quickstart-cpu-1.json", "test/golden/results/quickstart-cpu-2.json"),
           ("test/golden/results/program-cpu-quiet.json", "test/golden/results/program-cpu-busy.json")]


def results_files():
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(GOLDEN, "results", "*.json")))


def foreign_files():
    """Results files of other programs, which report reads too (no round trip: they are not ptune's)."""
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(GOLDEN, "foreign", "*.json")))


def gpu_traces():
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, TRACES, "gpu_*.json*")))
    return [f"{TRACES}/{n}" for n in names] + [f"{TRACES}/ptune_launch_bound.json.gz"]


def stem(path):
    base = os.path.basename(path.rstrip("/"))
    for ext in (".json.gz", ".json"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


def cases():
    """(name, argv after `ptune`, a file the command writes or None)."""
    out = [("help", ["--help"], None), ("version", ["--version"], None), ("schema", ["schema"], None)]
    out += [(f"help-{c}", [c, "--help"], None) for c in COMMANDS]
    for cfg in sorted(glob.glob(os.path.join(ROOT, "configs", "*.json"))):
        if os.path.basename(cfg) != "schema.json":
            out.append((f"check-{stem(cfg)}", ["check", os.path.relpath(cfg, ROOT)], None))
    for t in gpu_traces():
        for fmt in ANALYZE_FORMATS:
            out.append((f"analyze-{stem(t)}-{fmt}", ["analyze", t, "--format", fmt], None))
    out.append(("analyze-gpu_compute_amp-html", ["analyze", f"{TRACES}/gpu_compute_amp.json.gz", "-o", "{OUT}.html"],
                "{OUT}.html"))
    for folder in ("ddp", "hta_two_ranks", "procs"):
        out.append((f"analyze-{folder}", ["analyze", f"{TRACES}/{folder}"], None))
    versions = [f"{TRACES}/gpu_compute_fp32.json.gz", f"{TRACES}/gpu_compute_amp.json.gz"]
    for fmt in ANALYZE_FORMATS:
        out.append((f"analyze-versions-{fmt}", ["analyze", *versions, "--format", fmt], None))
    results = results_files()
    for r in results:
        for fmt in RESULTS_FORMATS:
            out.append((f"report-{stem(r)}-{fmt}", ["report", r, "--format", fmt], None))
    if results:
        out.append(("report-html", ["report", *results, "-o", "{OUT}.html"], "{OUT}.html"))
        # Its bad usage: one line each, exit 2.
        out.append(("report-format-unknown", ["report", results[0], "--format", "xml"], None))
        out.append(("report-format-two-files", ["report", *results[:2], "--format", "md"], None))
        out.append(("report-nothing-to-do", ["report", results[0]], None))
    foreign = foreign_files()
    for f in foreign:
        for fmt in RESULTS_FORMATS:
            out.append((f"report-foreign-{stem(f)}-{fmt}", ["report", f, "--format", fmt], None))
    if foreign and results:
        out.append(("report-foreign-html", ["report", results[0], *foreign, "-o", "{OUT}.html"], "{OUT}.html"))
        out.append(("report-foreign-against", ["report", foreign[0], "--against",
                                               "test/golden/results/cpu-case-study.json"], None))
    for old, new in AGAINST:
        if old in results and new in results:
            out.append((f"report-{stem(new)}-against-{stem(old)}",
                        ["report", new, "--against", old, "--fail-if-slower", "5"], None))
    return out


def run_case(ptune, argv, written, tmp):
    out = os.path.join(tmp, "out")
    argv = [a.replace("{OUT}", out) for a in argv]
    # argv[0] "ptune", as a user on PATH runs it; the clock and paths of this machine kept out.
    env = dict(os.environ, COLUMNS="100", NO_COLOR="1", PTUNE_CACHE=os.path.join(tmp, "cache"))
    r = subprocess.run(["ptune", *argv], executable=ptune, cwd=ROOT, capture_output=True, text=True, env=env,
                       timeout=300)
    text = "$ ptune " + " ".join(a.replace(out, "OUT") for a in argv) + "\n"
    text += f"exit {r.returncode}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr.replace(out, 'OUT')}"
    if written:
        path = written.replace("{OUT}", out)
        text += f"--- {os.path.basename(written).replace('{OUT}', 'OUT')}\n"
        text += open(path, encoding="utf-8").read() if os.path.exists(path) else "(not written)\n"
    return text


def round_trip(ptune, path):
    """`ptune report FILE --format json` gives the file back: every key equal, but FLOP/s and %
    peak, which are computed again from the rate the file keeps rounded to 0.01 samples/s."""
    import json
    r = subprocess.run(["ptune", "report", path, "--format", "json"], executable=ptune, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return [f"{path}: report --format json: exit {r.returncode}: {r.stderr.strip()}"]
    got, want = json.loads(r.stdout), json.load(open(os.path.join(ROOT, path)))
    errors = []
    def subset(x, y):  # every key of y in x, equal (a file of an older version has fewer)
        if isinstance(y, dict):
            return isinstance(x, dict) and all(k in x and subset(x[k], v) for k, v in y.items())
        return x == y

    for key in ("ptune_version", "config", "environment", "status"):
        if not subset(got.get(key), want.get(key)):
            errors.append(f"{path}: {key}: {got.get(key)!r} != {want.get(key)!r}")
    if len(got["rows"]) != len(want["rows"]):
        return errors + [f"{path}: {len(got['rows'])} rows, not {len(want['rows'])}"]
    for a, b in zip(got["rows"], want["rows"]):
        for key in b:
            x, y = a.get(key), b[key]
            if key in ("flops_per_s", "pct_of_peak") and isinstance(x, (int, float)) and isinstance(y, (int, float)):
                # rate r kept as r +- 0.005: a figure proportional to it moves by at most 0.005 / r
                # of itself, plus its own rounding (FLOP/s to 1, % peak to 0.01).
                bound = abs(y) * 0.005 / b["samples_per_s"] + (1 if key == "flops_per_s" else 0.01)
                if abs(x - y) > bound:
                    errors.append(f"{path}: row {b['name']!r}: {key} {x} != {y} (beyond {bound:g})")
            elif x != y:
                errors.append(f"{path}: row {b['name']!r}: {key} {x!r} != {y!r}")
    return errors


def main():
    ptune, update = os.path.abspath(sys.argv[1]), "--update" in sys.argv[2:]
    failures, seen = [], set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv, written in cases():
            seen.add(name + ".out")
            got = run_case(ptune, argv, written, tmp)
            path = os.path.join(GOLDEN, name + ".out")
            if update:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(got)
                continue
            want = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
            if got != want:
                failures.append(name)
                sys.stdout.writelines(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                                           f"test/golden/{name}.out", "now", n=2))
    if not update:
        for r in results_files():
            failures += round_trip(ptune, r)
    stale = sorted(set(os.listdir(GOLDEN)) - seen - {"results", "foreign", "README.md"})
    if update:
        for f in stale:
            os.remove(os.path.join(GOLDEN, f))
        print(f"wrote {len(seen)} golden files in test/golden/")
        return 0
    if stale:
        failures.append("golden files no case writes: " + ", ".join(stale))
    print(f"{len(seen) - len(failures)} of {len(seen)} golden outputs unchanged")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
