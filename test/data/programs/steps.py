#!/usr/bin/env python3
"""A stand-in for a user's training program (test/program_test.py): each step is STEP_MS of busy
work on the wall clock (plus EXTRA_MS from the environment: a known slowdown), then a line
"step N/T". Options give it the faults a real program has, and a launcher's shape (--session-child). With PTUNE_PROFILE_DIR set and --trace
FILE, it copies FILE there after --trace-after steps, half of it first and the rest a step later
(as a profiler writes a large trace), as a program writes its torch.profiler trace."""
import argparse
import os
import shutil
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--step-ms", type=float, default=10.0)
p.add_argument("--every", type=int, default=1, help="print every N steps")
p.add_argument("--fail-after", type=int, default=-1, help="exit 3 after this many steps")
p.add_argument("--silent", action="store_true", help="print lines that never match")
p.add_argument("--stuck", action="store_true", help="print the same step number every step")
p.add_argument("--startup-s", type=float, default=0, help="seconds of start-up before the first step")
p.add_argument("--children", type=int, default=0, help="idle child processes (as DataLoader workers)")
p.add_argument("--session-child", default="",
               help="a child in a session of its own (as torchrun starts its ranks) that burns CPU and, "
                    "every 20 ms while this file exists, appends 'pid monotonic process_time' to it "
                    "and faults in 256 fresh pages")
p.add_argument("--log", default="", help="append 'pid pgid monotonic process_time' after every step")
p.add_argument("--cr", action="store_true", help="end lines with \\r, as a progress bar")
p.add_argument("--oom-beside", default="",
               help="a folder where each instance leaves its pid: one started while --fit others listed "
                    "there live fails as a program out of GPU memory does")
p.add_argument("--fit", type=int, default=2, help="instances the device's memory holds")
p.add_argument("--process-effect", type=float, default=0,
               help="each instance's own speed: its steps this many %% longer or shorter, drawn at its start")
p.add_argument("--trace", default="", help="a trace file to copy into $PTUNE_PROFILE_DIR")
p.add_argument("--trace-after", type=int, default=5, help="the step after which it is copied")
a = p.parse_args()
trace_dir = os.environ.get("PTUNE_PROFILE_DIR", "")
trace_to = os.path.join(trace_dir, os.path.basename(a.trace)) if a.trace and trace_dir else ""
trace_data = open(a.trace, "rb").read() if trace_to else b""

if a.oom_beside:  # the device's memory holds --fit instances, running or stopped
    os.makedirs(a.oom_beside, exist_ok=True)
    others = 0
    for name in os.listdir(a.oom_beside):
        try:
            os.kill(int(name), 0)
            with open(f"/proc/{name}/stat") as f:
                alive = f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, ValueError):
            alive = False
        others += alive and int(name) != os.getpid()
    if others >= a.fit:
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", file=sys.stderr)
        sys.exit(1)
    open(os.path.join(a.oom_beside, str(os.getpid())), "w").close()
extra = float(os.environ.get("EXTRA_MS", "0"))
if a.process_effect:  # as where its memory landed: the same all along, differing between instances
    import random
    extra += a.step_ms * random.Random(os.getpid()).uniform(-1, 1) * a.process_effect / 100.0
kids = [subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
        for _ in range(a.children)]
log = open(a.log, "a") if a.log else None
BURN = """import mmap, os, sys, time
path, last, began = sys.argv[1], 0.0, time.monotonic()
with open(path, "a") as f:
    while os.path.exists(path) and time.monotonic() - began < 300:  # never left behind for long
        now = time.monotonic()
        if now - last >= 0.02:
            f.write(f"{os.getpid()} {now:.6f} {time.process_time():.6f}\\n")
            f.flush()
            last = now
            m = mmap.mmap(-1, 1 << 20)  # 256 fresh pages: 256 page faults
            for i in range(0, 1 << 20, 4096):
                m[i] = 1
            m.close()
"""
if a.session_child:
    open(a.session_child, "a").close()
    kids.append(subprocess.Popen([sys.executable, "-c", BURN, a.session_child], start_new_session=True))
if log:  # the group is known before the first step (an instance may be ended before it)
    log.write(f"{os.getpid()} {os.getpgid(0)} {time.monotonic():.6f} {time.process_time():.6f}\n")
    log.flush()
print("starting", flush=False)
time.sleep(a.startup_s)
end = "\r" if a.cr else "\n"
for i in range(1, a.steps + 1):
    until = time.perf_counter() + (a.step_ms + extra) / 1000.0
    while time.perf_counter() < until:
        pass
    if log:
        log.write(f"{os.getpid()} {os.getpgid(0)} {time.monotonic():.6f} {time.process_time():.6f}\n")
        log.flush()
    if a.silent:
        print(f"working {i}", end=end)
    elif a.stuck:
        print(f"step 5/{a.steps} loss 1.0", end=end)
    elif i % a.every == 0:
        print(f"step {i}/{a.steps} loss 1.0", end=end)
    if trace_to and i == a.trace_after:  # a trace being written: half now, the rest next step
        with open(trace_to, "wb") as f:
            f.write(trace_data[:len(trace_data) // 2])
    if trace_to and i == a.trace_after + 1:
        with open(trace_to, "ab") as f:
            f.write(trace_data[len(trace_data) // 2:])
    if i == a.fail_after:
        print("RuntimeError: boom at step %d" % i, file=sys.stderr)
        sys.exit(3)
print("done")
