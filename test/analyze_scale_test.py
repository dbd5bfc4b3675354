#!/usr/bin/env python3
"""`ptune analyze` on a trace too large to hold: a real trace's steps repeated to about 100 MB
(scripts/bench/analyze_scale.py), read in parts of a few steps under a 400 MiB address-space limit.

  python3 test/analyze_scale_test.py build/apps/ptune/ptune

Checks, on the built binary:
  - read in parts (--events-mb 8) under `ulimit -v` 400 MiB, every step's figures are the small
    file's for the same step, bit for bit (each copy is the original shifted by a whole number of
    microseconds), and the mean is the small file's to the printed digit;
  - the parts give what the whole file read at once gives, every figure;
  - the same file gzip-compressed gives the same figures.
"""
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
import analyze_scale  # noqa: E402

LIMIT = 400 << 20  # bytes of address space the parts run may take


def analyze(ptune, path, events_mb, limit=None):
    """The JSON analysis of `path`, and the run's peak RSS in bytes."""

    def cap():
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([ptune, "analyze", path, "--format", "json", "--events-mb", str(events_mb)],
                             stdout=subprocess.PIPE, stderr=err, preexec_fn=cap)
        out = p.stdout.read()
        p.stdout.close()
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit("FAIL: ptune analyze %s --events-mb %s: exit %d: %s" %
                             (path, events_mb, code, err.read().decode(errors="replace").strip()[-400:]))
    return json.loads(out), usage.ru_maxrss * 1024


def without_paths(doc):
    """`doc` less what names the file."""
    d = dict(doc)
    for k in ("path", "files", "label"):
        d.pop(k, None)
    return d


def close(a, b, tol, rel=0.0):
    """Whether JSON values `a` and `b` are equal, numbers within `tol` + `rel` of their size."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol, rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, tol, rel) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= tol + rel * max(abs(a), abs(b))
    return a == b


# The FLOPs, bytes and times per operator class are sums of one term per operator call, added in
# another order when the file is read in parts; their JSON keeps every digit. Summing n positive
# terms in any order is within (n - 1) x 2^-53 of the exact sum, relatively: 1.1e-10 for a
# million calls, the bound used (the file has about 40,000).
SUM_ORDER = 1.1e-10


def same_analysis(a, b):
    """Whether two analyses of one file agree: every figure equal, the per-class sums within
    SUM_ORDER."""
    a, b = without_paths(a), without_paths(b)
    return close(a.pop("throughput"), b.pop("throughput"), 0, SUM_ORDER) and a == b


def main():
    ptune = sys.argv[1]
    failures = []
    tmp = tempfile.mkdtemp(prefix="ptune-scale-test-")
    try:
        small = analyze_scale.DEFAULT_TRACE
        big = os.path.join(tmp, "big.json")
        size, steps = analyze_scale.repeat_to(analyze_scale.load(small), 100 << 20, big)
        one, _ = analyze(ptune, small, 48)
        parts, rss = analyze(ptune, big, 8, LIMIT)
        print("%d MB, %d steps: read in parts under a %d MiB limit, peak RSS %d MB" %
              (size >> 20, steps, LIMIT >> 20, rss >> 20))
        n = len(one["steps"])
        if len(parts["steps"]) != steps:
            failures.append("%d steps read, %d written" % (len(parts["steps"]), steps))
        for i, s in enumerate(parts["steps"]):
            want = dict(one["steps"][i % n], name=s["name"])
            if s != want:
                failures.append("step %d (%s): %s, the small file's step %d: %s" % (i, s["name"], s, i % n, want))
                break
        # The mean of the copies' steps is the small file's mean; only its rounding to the printed
        # digit (0.01) may differ.
        if not close(parts["mean"], one["mean"], 0.01 + 1e-9):
            failures.append("mean %s, the small file's %s" % (parts["mean"], one["mean"]))
        whole, _ = analyze(ptune, big, 100000)
        if not same_analysis(whole, parts):
            diff = [k for k in whole if whole[k] != parts.get(k)]
            failures.append("read whole and in parts differ in %s" % diff)
        with open(big, "rb") as f, gzip.open(big + ".gz", "wb", compresslevel=1) as g:
            shutil.copyfileobj(f, g)
        os.remove(big)
        gz, _ = analyze(ptune, big + ".gz", 8, LIMIT)
        if not same_analysis(gz, parts):
            failures.append("gzip and plain differ in %s" % [k for k in gz if gz[k] != parts.get(k)])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f[:2000])
    if failures:
        sys.exit(1)
    print("ok: parts = whole = gzip, every step the small file's")


if __name__ == "__main__":
    main()
