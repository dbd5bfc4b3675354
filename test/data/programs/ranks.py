#!/usr/bin/env python3
"""A data-parallel stand-in for a user's training program, run by torchrun on the CPU (gloo): each
step every rank spins STEP_MS on the wall clock (plus EXTRA_MS from the environment: a known
slowdown), then the ranks all-reduce a small tensor, and every rank prints "step N/T" (no `if rank
== 0`: a step's line comes once per rank). With --record FILE, each rank appends "pid monotonic
process_time" after every step."""
import argparse
import os
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--step-ms", type=float, default=20.0)
p.add_argument("--record", default="")
a = p.parse_args()
dist.init_process_group("gloo")
torch.set_num_threads(1)
extra = float(os.environ.get("EXTRA_MS", "0"))
log = open(a.record, "a") if a.record else None
t = torch.ones(16)
for i in range(1, a.steps + 1):
    until = time.perf_counter() + (a.step_ms + extra) / 1000.0
    while time.perf_counter() < until:
        pass
    dist.all_reduce(t)
    if log:
        log.write(f"{os.getpid()} {time.monotonic():.6f} {time.process_time():.6f}\n")
        log.flush()
    print(f"step {i}/{a.steps} loss 1.0", flush=True)
dist.destroy_process_group()
