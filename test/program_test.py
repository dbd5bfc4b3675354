#!/usr/bin/env python3
"""Sweep rows that run a program of the user's own (config's `program`), on the built binary:
test/program_test.py PTUNE PYTHON CASE. The program is test/data/programs/steps.py (steps of a
known length of busy work), or the example training script for the `example` case.

Cases: aa (the same command twice is never faster or slower), slower (a known extra time a step
is called slower, the known ratio inside its interval), paused (while one instance times a
window, a stopped one runs no step), sigint and sigterm (Ctrl-C: exit 130, SIGTERM: 143; finished
rows kept, no process of any instance left, a child in a session of its own included), killed (ptune
killed outright: no instance outlives it, nor its child in a session of its own), session (a child in
a session of its own that burns CPU: paused with its instance, its page faults the row's), faults (a
failing, an early-ending and a silent program each give their one line and the next row runs;
a missing one is a config error, exit 2), buffered (output that arrives in bursts is named),
profile (measure.profile: the program gets PTUNE_PROFILE_DIR, the trace it writes there is analyzed
and the row's diagnosis is ptune analyze's verdict on it; a program that writes none gets a note,
its row kept), memory (an instance that runs out of memory beside the previous row's: each side
started afresh for every window, one instance at a time), gpu_busy (the processes' GPU busy share
from NVML, here the tests' stand-in for its library, and the verdict from it), example (configs/program-cpu.json
with small settings), loggers (tqdm's bar and torchvision's log lines, by name and found by "auto",
and every rank printing: test/data/programs/loggers.py), torchrun (a torchrun job of two ranks on
the CPU: test/data/programs/ranks.py; counted once, paused, its cores the row's, A/A and a slower
side, nothing left after the sweep or a signal to ptune). After every sweep, no process of any
instance is left (each instance logs its process group)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = os.path.join(HERE, "data", "programs", "steps.py")
RANKS = os.path.join(HERE, "data", "programs", "ranks.py")


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def config(tmp, rows, command=None, measure=None, program=None):
    command = list(command or [PYTHON, STEPS])
    if STEPS in command and "--log" not in command:  # each instance's group, to check none is left
        command += ["--log", os.path.join(tmp, "steps.log")]
    cfg = {
        "name": "program-test",
        "program": {"command": command, "step_pattern": r"^step (?<step>\d+)/",
                    "startup_timeout_s": 60},
        "measure": {"warmup_steps": 3, "steps": 10, "repeats": 4, "processes": 2, "max_s": 30},
        "sweep": rows,
    }
    cfg["program"].update(program or {})
    cfg["measure"].update(measure or {})
    path = os.path.join(tmp, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def sweep(path, out, *extra, timeout=600):
    r = subprocess.run([PTUNE, "sweep", path, "--out", out, *extra], capture_output=True, text=True,
                       timeout=timeout)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    log = os.path.join(os.path.dirname(path), "steps.log")
    if os.path.exists(log):  # no process of any program instance outlived ptune
        pgids = log_pgids(log)
        alive = groups_alive(pgids)
        if alive:
            fail(f"processes of the instances outlived ptune sweep: {alive}")
        print(f"{len(pgids)} instance groups, none left")
    left = running(os.path.dirname(path))  # whatever their group: each names the test's folder
    if left:
        fail(f"processes of the instances outlived ptune sweep: {sorted(left)}")
    return r


def running(text):
    """The pids of the processes whose command line holds `text`."""
    pids = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.add(int(pid))
        except (OSError, ValueError):
            pass
    return pids


def rows(out):
    with open(out) as f:
        return json.load(f)["rows"]


def groups_alive(pgids):
    """The processes still in any of the process groups `pgids`."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        if int(fields[2]) in pgids and fields[0] != "Z":
            alive.append(int(pid))
    return alive


def log_pgids(log):
    with open(log) as f:
        return {int(line.split()[1]) for line in f if line.strip()}


def case_aa(tmp):
    out = os.path.join(tmp, "r.json")
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "A again", "set": {}}])
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    b = rows(out)[1]
    if b["status"] != "ok" or b.get("verdict_vs_prev") in ("faster", "slower"):
        fail(f"A/A pair: {b.get('status')} {b.get('verdict_vs_prev')} {b.get('speedup_vs_prev_interval')}")
    print("A/A:", b["verdict_vs_prev"], b["speedup_vs_prev"], b.get("speedup_vs_prev_interval"))


def case_slower(tmp):
    out = os.path.join(tmp, "r.json")
    step, extra = 10.0, 2.5
    path = config(tmp, [{"name": "base", "set": {}},
                        {"name": "slower", "set": {"program.env.EXTRA_MS": str(extra)}}],
                  command=[PYTHON, STEPS, "--step-ms", str(step)])
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    b = rows(out)[1]
    ratio = step / (step + extra)
    lo, hi = b["speedup_vs_prev_lo"], b["speedup_vs_prev_hi"]
    print(f"known ratio {ratio:.4f}; measured {b['speedup_vs_prev']} [{lo}, {hi}] {b['verdict_vs_prev']}")
    if b["verdict_vs_prev"] != "slower":
        fail("a step 25% longer was not called slower: " + b["verdict_vs_prev"])
    if not lo <= ratio <= hi:
        fail(f"the known ratio {ratio:.4f} is outside [{lo}, {hi}]")
    if not any("EXTRA_MS=2.5" in n for n in b["notes"]):
        fail("the row's notes do not show its environment: " + json.dumps(b["notes"]))


def case_paused(tmp):
    """Each instance logs after every step; a stopped instance logs nothing. Steps of different
    instances interleave only where one window hands over to the next: the instances' turns."""
    out, log = os.path.join(tmp, "r.json"), os.path.join(tmp, "steps.log")
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "B", "set": {}}],
                  command=[PYTHON, STEPS, "--step-ms", "5"])
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    entries = []
    with open(log) as f:
        for line in f:
            pid, _, mono, cpu = line.split()
            entries.append((float(mono), int(pid), float(cpu)))
    entries.sort()
    b = rows(out)[1]
    windows = len(b["repeat_ms_per_step"]) + len(b.get("prev_ms_per_step", [])) + 2 * b.get("transient_windows", 0)
    switches = sum(1 for x, y in zip(entries, entries[1:]) if x[1] != y[1])
    # Starts (warm-ups one after another), every window and the end: a few per window at most.
    # Instances left running would interleave their 5 ms steps hundreds of times.
    limit = 3 * (windows + 8) + 16
    print(f"{len(entries)} steps logged, {switches} switches between instances, {windows} windows")
    if switches > limit:
        fail(f"steps of different instances interleave {switches} times (at most {limit} for turns)")
    # Within one instance, CPU time advances with wall time only while it runs: a stopped one's does
    # not, so a gap in its wall clock (another's window) holds no CPU time.
    by_pid = {}
    for mono, pid, cpu in entries:
        by_pid.setdefault(pid, []).append((mono, cpu))
    for pid, seq in by_pid.items():
        for (m0, c0), (m1, c1) in zip(seq, seq[1:]):
            if m1 - m0 > 0.5 and c1 - c0 > 0.1:
                fail(f"instance {pid} ran {c1 - c0:.3f} s of CPU in a {m1 - m0:.2f} s pause")


def wait_for_rows(out, n, proc, limit=300):
    until = time.time() + limit
    while time.time() < until:
        if proc.poll() is not None:
            fail(f"ptune ended early with {proc.returncode}")
        try:
            if len(rows(out)) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    fail(f"no {n} rows within {limit} s")


def stopped_by(tmp, sig, code):
    out, log = os.path.join(tmp, "r.json"), os.path.join(tmp, "steps.log")
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "B", "set": {}}, {"name": "C", "set": {}}],
                  command=[PYTHON, STEPS, "--children", "2", "--session-child", os.path.join(tmp, "session.log")],
                  measure={"max_s": 60})
    p = subprocess.Popen([PTUNE, "sweep", path, "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wait_for_rows(out, 1, p)
    time.sleep(2)  # into the next row's windows
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"ptune did not end within 60 s of {sig.name}")
    if p.returncode != code:
        fail(f"exit {p.returncode} after {sig.name}, not {code}: {err}")
    kept = rows(out)
    if not kept or kept[0]["status"] != "ok":
        fail("the finished row was not kept")
    alive = groups_alive(log_pgids(log))
    if alive:
        fail(f"processes of the instances still run: {alive}")
    left = running(tmp)  # a child in a session of its own too: found by walking /proc
    if left:
        fail(f"processes of the instances' trees still run: {sorted(left)}")
    print(f"{sig.name}: exit {code}, {len(kept)} row(s) kept, {len(log_pgids(log))} instance groups all ended")


def case_sigint(tmp):
    stopped_by(tmp, signal.SIGINT, 130)


def case_sigterm(tmp):
    stopped_by(tmp, signal.SIGTERM, 143)


def case_killed(tmp):
    out, log = os.path.join(tmp, "r.json"), os.path.join(tmp, "steps.log")
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "B", "set": {}}],
                  command=[PYTHON, STEPS, "--children", "2", "--session-child", os.path.join(tmp, "session.log")],
                  measure={"max_s": 60})
    p = subprocess.Popen([PTUNE, "sweep", path, "--out", out], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_for_rows(out, 1, p)
    time.sleep(1)
    p.kill()
    p.wait()
    pgids = log_pgids(log)
    until = time.time() + 15
    while (groups_alive(pgids) or running(tmp)) and time.time() < until:
        time.sleep(0.2)
    alive = groups_alive(pgids)
    if alive:
        fail(f"processes of the instances outlived ptune: {alive}")
    left = running(tmp)  # a child in a session of its own too: found by walking /proc
    if left:
        fail(f"processes of the instances' trees outlived ptune: {sorted(left)}")
    print(f"SIGKILL: {len(pgids)} instance groups all ended")


def case_session(tmp):
    """A program whose child is in a session of its own (as torchrun's ranks are) and burns CPU:
    paused with the instance (its log has gaps, and no CPU time in them), counted in the row's
    figures (its page faults), and ended with it."""
    out, session = os.path.join(tmp, "r.json"), os.path.join(tmp, "session.log")
    path = config(tmp, [{"name": "alone", "set": {}},
                        {"name": "with a session child", "set": {"program.args": ["--session-child", session]}}],
                  measure={"max_s": 12})
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    by_pid = {}
    with open(session) as f:
        for line in f:
            pid, mono, cpu = line.split()
            by_pid.setdefault(int(pid), []).append((float(mono), float(cpu)))
    gaps = 0
    for pid, seq in by_pid.items():
        for (m0, c0), (m1, c1) in zip(seq, seq[1:]):
            if m1 - m0 > 0.5:
                gaps += 1
                if c1 - c0 > 0.1:
                    fail(f"the session child {pid} ran {c1 - c0:.3f} s of CPU in a {m1 - m0:.2f} s pause")
    if gaps == 0:
        fail(f"the session children {sorted(by_pid)} were never paused")
    alone, with_child = rows(out)
    faults0, faults1 = alone["page_faults_per_step"], with_child["page_faults_per_step"]
    print(f"{len(by_pid)} session children, {gaps} pauses without CPU time; cores busy "
          f"{alone['cpu_cores_busy']} alone, {with_child['cpu_cores_busy']} with the child; page faults a step "
          f"{faults0} alone, {faults1} with the child; other processes {alone.get('other_cpu_cores')}, "
          f"{with_child.get('other_cpu_cores')} cores")
    # The child faults in 256 pages every 20 ms it runs (a 10 ms step: 128 a step, fewer where it
    # gets less than a core), a count that a busy machine does not change as it does CPU time:
    # the row's figures are its tree's.
    if faults1 < faults0 + 20:
        fail(f"the session child's page faults are not the row's ({faults1} a step vs {faults0} alone)")
    root_fails(tmp)
    launcher_leaves(tmp)


def root_fails(tmp):
    """The root fails two steps after starting a child in a session of its own, which holds its
    stdout and stderr: the row fails at once, with the root's status, and the child is ended."""
    folder = os.path.join(tmp, "fails")
    os.makedirs(folder)
    session = os.path.join(folder, "session.log")
    path = config(folder, [{"name": "A", "set": {}}],
                  command=[PYTHON, STEPS, "--fail-after", "2", "--session-child", session],
                  measure={"warmup_steps": 20})
    began = time.time()
    r = sweep(path, os.path.join(folder, "r.json"), timeout=120)  # fails if any process is left
    took = time.time() - began
    if r.returncode != 1 or "exited with status 3 after 2 steps" not in r.stderr:
        fail(f"a root that failed: exit {r.returncode}, {r.stderr.strip()}")
    if took > 15:  # program.startup_timeout_s is 60: not waited for
        fail(f"a root that failed was noticed only after {took:.0f} s")
    print(f"a root that failed beside its session child: row failed in {took:.1f} s, nothing left")


def launcher_leaves(tmp):
    """A launcher that starts its worker in a session of its own and exits 0 (`setsid worker &`):
    the worker is the instance, paused, counted and ended as one."""
    folder = os.path.join(tmp, "launcher")
    os.makedirs(folder)
    worker = " ".join([PYTHON, STEPS, "--log", os.path.join(folder, "steps.log")])
    path = config(folder, [{"name": "A", "set": {}}, {"name": "A again", "set": {}}],
                  command=["sh", "-c", f"setsid {worker} & exit 0"], measure={"max_s": 8})
    out = os.path.join(folder, "r.json")
    r = sweep(path, out)  # fails if any process is left
    if r.returncode != 0:
        fail(f"a launcher that exits: exit {r.returncode}")
    for row in rows(out):
        busy, other = row.get("cpu_cores_busy"), row.get("other_cpu_cores")
        # Its worker spins a core for each step: its core is the row's, not competing load.
        if busy is None or busy < 0.8 or (other is not None and other > 0.5):
            fail(f"a launcher that exits, row {row['name']}: cores busy {busy}, other processes {other}")
    b = rows(out)[1]
    if b.get("verdict_vs_prev") in ("faster", "slower"):
        fail(f"a launcher that exits, A/A: {b.get('verdict_vs_prev')} {b.get('speedup_vs_prev_interval')}")
    print(f"a launcher that exits: worker paused and counted (cores busy "
          f"{[row.get('cpu_cores_busy') for row in rows(out)]}), A/A {b.get('verdict_vs_prev')}")


def case_faults(tmp):
    out = os.path.join(tmp, "r.json")
    path = config(tmp, [
        {"name": "fails", "set": {"program.args": ["--fail-after", "6"]}},
        {"name": "ok", "set": {"program.args": []}},
        {"name": "too short", "set": {"program.args": ["--steps", "8"]}},
        {"name": "silent", "set": {"program.args": ["--silent"], "program.startup_timeout_s": 2}},
        {"name": "stuck", "set": {"program.args": ["--stuck"], "program.startup_timeout_s": 2}},
        {"name": "slow start", "set": {"program.args": ["--startup-s", "60"], "program.startup_timeout_s": 600}},
        {"name": "ok again", "set": {"program.args": [], "program.startup_timeout_s": 60}},
    ], measure={"max_s": 8})
    began = time.monotonic()
    r = sweep(path, out)
    took = time.monotonic() - began
    if r.returncode != 1:
        fail(f"exit {r.returncode}, not 1 (rows failed)")
    got = rows(out)
    want = [("failed", "exited with status 3 after 6 steps; its last lines: RuntimeError: boom at step 6"),
            ("ok", ""),
            ("failed", "ended (exit status 0) after 8 steps while the row needed at least"),
            ("failed", "printed no line matching program.step_pattern '^step (?<step>\\d+)/' within "
                       "program.startup_timeout_s (2 s); its last lines: working "),
            ("failed", " without its step number growing, so no step was counted; the `step` group must "
                       "capture a number that grows with every step"),
            ("failed", "printed no line matching program.step_pattern '^step (?<step>\\d+)/' before the row's "
                       "time (measure.max_s, its start-up included) ran out; its last lines: starting"),
            ("ok", "")]
    if len(got) != len(want):
        fail(f"{len(got)} rows, not {len(want)}")
    # Each row within its measure.max_s (8 s) and a program's ending (a few s): a start-up of 60 s
    # or a step number that never grows does not hold a row past it.
    if took > 8 * len(want) + 60:
        fail(f"the sweep took {took:.0f} s: a row outlived its measure.max_s")
    for row, (status, text) in zip(got, want):
        if not row["status"].startswith(status) or text not in row["status"]:
            fail(f"row '{row['name']}': {row['status']!r}, expected {status}: ...{text}...")
        if "\n" in row["status"]:
            fail(f"row '{row['name']}': its failure is more than one line")
    missing = config(tmp, [{"name": "A", "set": {}}], command=["no-such-program-xyz", "train.py"])
    r = subprocess.run([PTUNE, "sweep", missing], capture_output=True, text=True)
    line = "program.command: 'no-such-program-xyz' is not found on PATH"
    if r.returncode != 2 or line not in r.stderr or r.stderr.count("\n") != 1:
        fail(f"a missing program: exit {r.returncode}, {r.stderr!r}")
    print("faults: each row's one line, the next rows ran; a missing program: exit 2")


def case_buffered(tmp):
    out = os.path.join(tmp, "r.json")
    path = config(tmp, [{"name": "buffered", "set": {}}],
                  command=[PYTHON, STEPS, "--step-ms", "1"],
                  program={"env": {"PYTHONUNBUFFERED": ""}},
                  measure={"steps": 20, "warmup_steps": 0, "max_s": 20})
    r = sweep(path, out)
    notes = " ".join(rows(out)[0]["notes"]) + rows(out)[0]["status"]
    if "output is buffered" not in notes:
        fail("buffered output was not named: " + notes)
    print("buffered output named")


def case_profile(tmp):
    out = os.path.join(tmp, "r.json")
    fixture = os.path.join(HERE, "data", "traces", "gpu_busy_sync.json.gz")
    path = config(tmp, [{"name": "traced", "set": {"program.args": ["--trace", fixture]}},
                        {"name": "no trace", "set": {"program.args": []}}],
                  measure={"profile": True, "out_dir": os.path.join(tmp, "runs"), "max_s": 10})
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    traced, untraced = rows(out)
    want = subprocess.run([PTUNE, "analyze", fixture, "--format", "json"], capture_output=True, text=True)
    v = json.loads(want.stdout)["verdict"]
    text = v["text"] + " (ptune analyze on its trace)"
    got = traced.get("diagnosis", "")
    rest = got[len(text):] if got.startswith(text) else None  # then the allocator rule's, if it fired
    if traced["status"] != "ok" or rest is None or (rest and not rest.startswith("; from outside, allocator-bound")):
        fail(f"the traced row's diagnosis {traced.get('diagnosis')!r}, not analyze's verdict {text!r}")
    trace = traced.get("trace", "")
    if os.path.basename(trace) != "gpu_busy_sync.json.gz" or not os.path.isabs(trace):
        fail(f"the row's trace: {trace!r}")
    with open(trace, "rb") as f, open(fixture, "rb") as g:
        if f.read() != g.read():
            fail("the trace analyzed is not the whole file the program wrote")
    if traced.get("gpu_busy_pct") is None:
        fail("a GPU trace's row has no gpu_busy_pct")
    # The step split: unknown from outside (null), from the trace where there is one, said so.
    split = json.loads(want.stdout)["mean"]["split_pct"]
    got = (traced.get("data_wait_pct"), traced.get("h2d_pct"))
    if (got[0] is None or got[1] is None or abs(got[0] - split["dataloader"]) > 0.1
            or abs(got[1] - split["memcpy"]) > 0.1
            or not any(n.startswith("step split from its trace") for n in traced["notes"])):
        fail(f"the traced row's split {got}, not its trace's {split['dataloader']}, {split['memcpy']}")
    if any(untraced.get(k) is not None for k in ("data_wait_pct", "h2d_pct", "compute_pct")):
        fail(f"the row without a trace has a step split ptune never measured: {untraced.get('data_wait_pct')}")
    note = "profiling failed: the program (pid "
    why = "steps with PTUNE_PROFILE_DIR="
    if untraced["status"] != "ok" or not any(n.startswith(note) and why in n for n in untraced["notes"]):
        fail(f"the row without a trace: {untraced['status']!r} {untraced['notes']!r}")
    # A folder the trace cannot go to (below a file): a failed row, as for ptune's own rows; exit 1.
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").close()
    out2 = os.path.join(tmp, "r2.json")
    path = config(tmp, [{"name": "traced", "set": {"program.args": ["--trace", fixture]}}],
                  measure={"profile": True, "out_dir": os.path.join(blocker, "runs"), "max_s": 10})
    r = sweep(path, out2)
    (row,) = rows(out2)
    want = "failed: cannot write measure.out_dir '" + os.path.join(blocker, "runs", "program-test", "00-traced")
    if r.returncode != 1 or not row["status"].startswith(want):
        fail(f"an unwritable measure.out_dir: exit {r.returncode}, {row['status']!r}, not {want!r}...")
    print("profile: the trace analyzed, the verdict the row's diagnosis; no trace: a note, the row kept; "
          "an unwritable folder: a failed row")


def case_memory(tmp):
    out = os.path.join(tmp, "r.json")
    beside = os.path.join(tmp, "instances")
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "A again", "set": {"program.env.X": "1"}}],
                  command=[PYTHON, STEPS, "--oom-beside", beside, "--fit", "2"], measure={"max_s": 20})
    r = sweep(path, out)
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    first, again = rows(out)
    note = "interleaved by starting each side's program afresh for every window, one instance at a time"
    if again["status"] != "ok" or not any(n.startswith(note) for n in again["notes"]):
        fail(f"the row whose instance ran out of memory beside the previous row's: {again['status']!r} "
             f"{again['notes']!r}")
    if again["verdict_vs_prev"] in ("faster", "slower"):
        fail(f"an A/A pair started afresh for every window called {again['verdict_vs_prev']}")
    started = len(os.listdir(beside))
    if started < 2 + 1 + 4:  # the first row's two, the one that failed, then one for each window
        fail(f"only {started} instances were started: not one for each window")
    print(f"memory: {started} instances, one at a time; the row {again['verdict_vs_prev']} at "
          f"{again['speedup_vs_prev']}x")


def case_gpu_busy(tmp):
    # NVIDIA's management library stood in for by the tests' (test/fake_nvml.cpp): every process
    # at 35% SM utilization on device 0, then at 90%.
    fake = os.environ.get("PTUNE_FAKE_NVML_FILE", "")
    if not fake:
        fail("PTUNE_FAKE_NVML_FILE is not set (the tests' stand-in for NVIDIA's library)")
    for util, rule in (("35", "the GPU idle much of the step (GPU busy 35% for its processes"),
                       ("90", "GPU-bound (GPU busy 90% for its processes")):
        out = os.path.join(tmp, f"r{util}.json")
        os.environ.update(PTUNE_NVML_LIBRARY=fake, PTUNE_FAKE_NVML_SM_UTIL=util)
        path = config(tmp, [{"name": "A", "set": {}}], measure={"max_s": 8})
        r = sweep(path, out)
        row = rows(out)[0]
        if r.returncode != 0 or row.get("gpu_busy_pct") != float(util) or not row["diagnosis"].startswith(rule):
            fail(f"{util}%: exit {r.returncode}, gpu_busy_pct {row.get('gpu_busy_pct')}, {row['diagnosis']!r}")
        if "GPU busy" not in r.stdout:
            fail("the table has no GPU busy column")
    print("gpu_busy: the processes' SM use read from NVML, the verdict from it")


LOGGERS = os.path.join(HERE, "data", "programs", "loggers.py")


def case_loggers(tmp):
    """Step lines of the common loggers, by name and found by "auto", each row as fast as the one
    before: tqdm's real bar (an epoch of 25 steps per bar), torchvision's reference scripts' log
    line (every 5 steps, its count starting again every epoch), and two ranks printing every step
    line. A step counted twice (every rank's line) or a count that went back each epoch would make
    a row about 2x faster or slower than the one before it: each row's speedup over the one
    before must be nearer 1 than 2 or 1/2 (within 1/sqrt(2) and sqrt(2)), with no verdict (a
    noise floor of 10%), and no row's step under 7.5 ms (its busy wait alone is 10 ms; a step
    counted twice reads 5 ms)."""
    out = os.path.join(tmp, "r.json")

    def row(name, style, pattern, *args):
        return {"name": name, "set": {"program.args": ["--style", style, *args],
                                      "program.step_pattern": pattern}}
    path = config(tmp, [row("step lines", "step", r"^step (?<step>\d+)/"),
                        row("tqdm", "tqdm", "tqdm"),
                        row("tqdm, found", "tqdm", "auto"),
                        row("torchvision", "torchvision", "torchvision"),
                        row("torchvision, found", "torchvision", "auto"),
                        row("two ranks, found", "torchvision", "auto", "--ranks", "2"),
                        row("two ranks", "step", "step", "--ranks", "2")],
                  command=[PYTHON, LOGGERS, "--step-ms", "10"],
                  measure={"noise_pct": 10, "max_s": 40})
    before = running(LOGGERS)
    r = sweep(path, out)
    if running(LOGGERS) - before:
        fail(f"processes of the instances outlived ptune sweep: {running(LOGGERS) - before}")
    got = rows(out)
    if r.returncode != 0 or any(x["status"] != "ok" for x in got):
        fail(f"exit {r.returncode}: " + json.dumps([x["status"] for x in got]))
    for x in got:
        print(x["name"], x["ms_per_step"], x["verdict_vs_prev"], x["speedup_vs_prev"],
              x.get("speedup_vs_prev_interval"))
        if x["ms_per_step"] < 7.5:
            fail(f"{x['name']}: {x['ms_per_step']} ms a step, under the 10 ms it busy-waits: steps counted twice")
    for x in got[1:]:
        if x["verdict_vs_prev"] in ("faster", "slower") or not 2 ** -0.5 < x["speedup_vs_prev"] < 2 ** 0.5:
            fail(f"{x['name']}: {x['verdict_vs_prev']}, {x['speedup_vs_prev']}x the row before: "
                 "its steps were miscounted")
    found = {x["name"]: [n for n in x["notes"] if "program.step_pattern \"auto\"" in n] for x in got}
    want = {"tqdm, found": ["step lines: tqdm's progress bar, found by program.step_pattern \"auto\" "
                            "(set \"tqdm\" to say so)"],
            "torchvision, found": ["step lines: torchvision's reference scripts, found by "
                                   "program.step_pattern \"auto\" (set \"torchvision\" to say so)"]}
    want["two ranks, found"] = want["torchvision, found"]
    for name, notes in found.items():
        if notes != want.get(name, []):
            fail(f"{name}: notes {notes}, expected {want.get(name, [])}")
    print("loggers: each read by name and found, each step counted once")


def case_torchrun(tmp):
    """A torchrun job (two ranks, gloo, on the CPU), each rank printing every step: the instance is
    the agent and its ranks, in sessions of their own. Steps counted once (a rank's step is 20 ms
    of busy wait: counted twice it would read about 12 ms); an A/A row never faster or slower, 30%
    more work a step called slower (a noise floor and target of 10%: each row ends once decided); both ranks' cores the row's, not competing load; a paused
    instance's ranks use no CPU time; no process left after the sweep, nor after Ctrl-C, SIGTERM
    or SIGKILL of ptune."""
    record = os.path.join(tmp, "ranks.log")
    command = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", RANKS,
               "--record", record]
    path = config(tmp, [{"name": "A", "set": {}}, {"name": "A again", "set": {}},
                        {"name": "30% more work", "set": {"program.env": {"EXTRA_MS": "6"}}}],
                  command=command, measure={"warmup_steps": 5, "max_s": 0, "auto_max_s": 30, "noise_pct": 10,
                                              "target_ci_pct": 10},
                  program={"samples_per_step": 2})
    out = os.path.join(tmp, "r.json")
    r = sweep(path, out)  # fails if any process is left
    got = rows(out)
    if r.returncode != 0 or any(x["status"] != "ok" for x in got):
        fail(f"exit {r.returncode}: " + json.dumps([x["status"] for x in got]))
    for x in got:
        print(x["name"], x["ms_per_step"], x.get("verdict_vs_prev"), x.get("speedup_vs_prev_interval"),
              "cores busy", x.get("cpu_cores_busy"), "other", x.get("other_cpu_cores"))
        if x["ms_per_step"] < 18:
            fail(f"{x['name']}: {x['ms_per_step']} ms a step, under the 20 ms each rank spins: counted twice")
        if (x.get("cpu_cores_busy") or 0) < 1.5 or (x.get("other_cpu_cores") or 0) > 0.5:
            fail(f"{x['name']}: the ranks' cores are not the row's: {x.get('cpu_cores_busy')} busy, "
                 f"{x.get('other_cpu_cores')} other")
        if x.get("data_wait_pct") is not None:
            fail(f"{x['name']}: a step split ptune never measured: {x.get('data_wait_pct')}")
    if got[1]["verdict_vs_prev"] in ("faster", "slower"):
        fail(f"A/A: {got[1]['verdict_vs_prev']} {got[1].get('speedup_vs_prev_interval')}")
    if got[2]["verdict_vs_prev"] != "slower":
        fail(f"30% more work: {got[2]['verdict_vs_prev']} {got[2].get('speedup_vs_prev_interval')}")
    by_pid, gaps = {}, 0
    with open(record) as f:
        for line in f:
            pid, mono, cpu = line.split()
            by_pid.setdefault(int(pid), []).append((float(mono), float(cpu)))
    for pid, seq in by_pid.items():
        for (m0, c0), (m1, c1) in zip(seq, seq[1:]):
            if m1 - m0 > 0.5:  # paused: a step is 20-26 ms
                gaps += 1
                if c1 - c0 > 0.1:
                    fail(f"rank {pid} ran {c1 - c0:.3f} s of CPU in a {m1 - m0:.2f} s pause")
    if gaps == 0:
        fail(f"the ranks {sorted(by_pid)} were never paused")
    print(f"torchrun: {len(by_pid)} ranks, {gaps} pauses without CPU time")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        os.remove(record)
        p = subprocess.Popen([PTUNE, "sweep", path, "--out", os.path.join(tmp, "s.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.time() + 120
        while not (os.path.exists(record) and os.path.getsize(record) > 2000) and time.time() < until:
            time.sleep(0.1)  # the ranks are stepping
        p.send_signal(sig)
        p.wait(timeout=60)
        until = time.time() + 15  # the keeper's grace, after SIGKILL
        while running(tmp) and time.time() < until:
            time.sleep(0.2)
        if running(tmp):
            fail(f"after {sig.name} of ptune, processes of the job still run: {sorted(running(tmp))}")
        print(f"torchrun: {sig.name} of ptune (exit {p.returncode}), no process left")


def case_example(tmp):
    out = os.path.join(tmp, "r.json")
    venv_bin = os.path.dirname(PYTHON)
    env = dict(os.environ, PATH=venv_bin + ":" + os.environ.get("PATH", ""))
    before = running("scripts/examples/train.py")
    r = subprocess.run([PTUNE, "sweep", os.path.join(ROOT, "configs", "program-cpu.json"), "--rows", "0-1",
                        "--set", "measure.max_s=20", "--set", "measure.steps=3", "--out", out],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    left = running("scripts/examples/train.py") - before
    if left:
        fail(f"processes of the example's instances outlived ptune sweep: {left}")
    if r.returncode != 0:
        fail(f"exit {r.returncode}")
    got = rows(out)
    if len(got) != 2 or any(x["status"] != "ok" for x in got):
        fail("rows: " + json.dumps([x["status"] for x in got]))
    if "samples/s" not in r.stdout or not all("first step line" in " ".join(x["notes"]) for x in got):
        fail("the table or the start-up notes are missing")


if __name__ == "__main__":
    PTUNE, PYTHON, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
    with tempfile.TemporaryDirectory() as tmp:
        globals()["case_" + CASE](tmp)
    print("ok")
