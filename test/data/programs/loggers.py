#!/usr/bin/env python3
"""A stand-in for a training program that logs as the common loggers do (test/program_test.py,
case loggers): each step is STEP_MS of busy work on the wall clock, in epochs of --epoch-steps
steps, logged as --style says:
- tqdm: a real tqdm bar for each epoch (tqdm from PyPI), redrawn with carriage returns;
- torchvision: the reference scripts' MetricLogger line every --every steps,
  "Epoch: [0]  [ 40/390]  eta: ...", its count starting again every epoch;
- step: "step N/T" after every step.
With --ranks 2 a second process runs beside it in step with it (a barrier every step) and prints
the same lines, as every rank of a data-parallel script without `if rank == 0` does."""
import argparse
import multiprocessing
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--style", choices=["tqdm", "torchvision", "step"], default="step")
p.add_argument("--step-ms", type=float, default=10.0)
p.add_argument("--epoch-steps", type=int, default=25)
p.add_argument("--every", type=int, default=5, help="torchvision: log every N steps")
p.add_argument("--ranks", type=int, default=1, choices=[1, 2])
a = p.parse_args()


def busy(ms):
    until = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < until:
        pass


def run(rank, barrier):
    print("starting", flush=True)
    n = a.epoch_steps
    for epoch in range(1000000):
        steps = range(n)
        if a.style == "tqdm":
            from tqdm import tqdm
            steps = tqdm(steps, desc=f"Epoch {epoch}", mininterval=0, file=sys.stderr)
        for i in steps:
            if rank == 0:
                busy(a.step_ms)
            else:  # the other rank waits at the barrier: the step takes rank 0's time
                time.sleep(a.step_ms / 2000.0)
            if barrier:
                barrier.wait()
            if a.style == "torchvision" and i % a.every == 0:
                print(f"Epoch: [{epoch}]  [{i:>{len(str(n))}}/{n}]  eta: 0:00:01  lr: 0.1  loss: 2.3 (2.3)",
                      flush=True)
            elif a.style == "step":
                print(f"step {epoch * n + i + 1}/{1000000 * n} loss 1.0", flush=True)


if a.ranks == 2:
    barrier = multiprocessing.get_context("fork").Barrier(2)
    other = multiprocessing.get_context("fork").Process(target=run, args=(1, barrier), daemon=True)
    other.start()
    run(0, barrier)
else:
    run(0, None)
