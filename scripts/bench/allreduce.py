#!/usr/bin/env python3
"""All-reduce time and bandwidth of c10d's backends on this machine: the communication figure
of the data-parallel model in docs/distributed.md. ptune all-reduces its gradient buckets through the same c10d
backends (ProcessGroupGloo / ProcessGroupNCCL), so this is the wire speed ptune gets.

Starts --nproc local ranks (Gloo on CPU tensors, or NCCL with one GPU per rank), all-reduces
fp32 tensors of the sizes of ResNet-18's and ResNet-50's gradients, and prints the median time
per all-reduce with the algorithm bandwidth (bytes / time) and the bus bandwidth
(algbw * 2(N-1)/N, the figure nccl-tests reports).

  python3 scripts/bench/allreduce.py                      # Gloo, 2 ranks
  python3 scripts/bench/allreduce.py --backend nccl --nproc 8
  # The step-time side (overlap of buckets with backward) comes from ptune itself:
  #   ptune launch --nproc-per-node 2 -- sweep configs/dp-overlap.json
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = {"ResNet-18": 11_689_512, "ResNet-50": 25_557_032}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.nproc))
    dev = torch.device("cuda", rank) if args.backend == "nccl" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(args.backend, rank=rank, world_size=args.nproc)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out = {}
    for name, n in SIZES.items():
        t = torch.ones(n, device=dev)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        sync()
        times = []
        for _ in range(args.repeats):
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            sync()
            times.append(time.perf_counter() - t0)
        out[name] = times
    queue.put((rank, out))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--nproc", type=int, default=2, help="ranks on this machine (default 2)")
    ap.add_argument("--repeats", type=int, default=7, help="timed all-reduces per size; the median is reported")
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if args.nproc < 2:
        ap.error("--nproc must be at least 2")
    if args.backend == "nccl" and torch.cuda.device_count() < args.nproc:
        sys.exit(f"allreduce.py: error: --backend nccl needs {args.nproc} GPUs; {torch.cuda.device_count()} visible")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    n = args.nproc
    print(f"{args.backend}, {n} ranks on {socket.gethostname()}, median of {args.repeats}")
    for name, params in SIZES.items():
        # The slowest rank's time of each repeat, then the median over repeats.
        per_repeat = [max(results[r][name][i] for r in results) for i in range(args.repeats)]
        t = statistics.median(per_repeat)
        nbytes = 4 * params
        algbw = nbytes / t / 1e9
        print(f"  {name} gradients, {nbytes / 1e6:.1f} MB fp32: {t * 1e3:.1f} ms, "
              f"algbw {algbw:.2f} GB/s, busbw {algbw * 2 * (n - 1) / n:.2f} GB/s")


if __name__ == "__main__":
    main()
