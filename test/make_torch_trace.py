"""Records torch.profiler traces of a few training steps of torchvision's ResNet-18 on tiny
images (32x32, batch 8) on the CPU, as a PyTorch user would, for `ptune analyze`'s tests.

    python make_torch_trace.py OUT_DIR VARIANT...

Variants (each written under OUT_DIR/VARIANT/):
  loader0  a slow Dataset (sleeps in __getitem__, as a slow decode) loaded with num_workers=0:
           input-bound; written by tensorboard_trace_handler (a folder, one file per rank)
  workers  the same Dataset with 2 worker processes that had time to fill their prefetch
           queue: not input-bound; export_chrome_trace to trace.json
  item     in-memory batches and a per-step loss.item(): the sync; export_chrome_trace to
           trace.json.gz (gzip)
  workers_item  `workers` with a per-step loss.item() added (export_chrome_trace to trace.json):
           with loader0 and workers, the steps of tuning one loop (workers 0 then 2, a
           .item() added, then removed again: workers) for `ptune analyze BASE NEXT...`
  fakedata*  (any name starting so) torchvision.datasets.FakeData (32x32, batch 4) through a
           DataLoader with num_workers=0, whose labels are read with .item() on the CPU, and a
           per-step loss.item(); with_stack=True; 5 steps recorded (ProfilerStep#1 to #5);
           export_chrome_trace to trace.json.
  split:NAME  the fakedata code (without the stack) with 10 steps recorded after 3 warm-up
           steps in one trace, split into two traces of its odd and even steps
           (fakedata_NAME_a/ and _b/trace.json: each the recording without the other's steps'
           events): an A/A pair whose steps alternated in time, so that the rest of the
           machine's load fell on both alike (the sweep's paired design). Recorded one after
           the other, two traces differ by how busy the machine was, which a Python trace does
           not record.
  flops    with_flops=True, batches of 4 in memory, 2 steps (export_chrome_trace to trace.json);
           beside it reference.json: PyTorch's own FLOPs per step (the profiler's events'
           .flops, its with_flops formulas) and torch.utils.flop_counter.FlopCounterMode's count
           of one training step (forward and backward convolutions and matrix products)
  ddp_slow  two ranks (torch.distributed, Gloo, DistributedDataParallel) of the loader0 code
           with batches of 4, rank 1's Dataset sleeping 0.1 s per sample and rank 0's not;
           tensorboard_trace_handler writes ddp_slow/rank0.*.json and rank1.*.json
Schedule: wait=0, warmup=1, active=2 (ProfilerStep#1 and #2 recorded; fakedata: active=5). One
thread for the model, so a loaded machine slows compute less than the sleeping loader stays slow.
"""
import json
import os
import sys
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

SLEEP_PER_SAMPLE_S = 0.15  # 1.2 s per batch of 8: well above a step's compute on 2 loaded cores
BATCH = 8


class SlowImages(torch.utils.data.Dataset):
    """Random 32x32 images that take SLEEP_PER_SAMPLE_S each to "decode"."""

    def __init__(self, sleep_s):
        self.sleep_s = sleep_s

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 32, 32, generator=g), i % 10


def run(variant, out_dir, active=None, warmup=1, stack=True):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    folder = os.path.join(out_dir, variant)
    os.makedirs(folder, exist_ok=True)
    if variant == "loader0":
        loader = torch.utils.data.DataLoader(SlowImages(SLEEP_PER_SAMPLE_S), batch_size=BATCH, num_workers=0)
        ready = tensorboard_trace_handler(folder)
    elif variant in ("workers", "workers_item"):
        loader = torch.utils.data.DataLoader(SlowImages(SLEEP_PER_SAMPLE_S), batch_size=BATCH, num_workers=2,
                                             prefetch_factor=2)
        ready = lambda p: p.export_chrome_trace(os.path.join(folder, "trace.json"))  # noqa: E731
    elif variant == "item":
        loader = torch.utils.data.DataLoader(SlowImages(0), batch_size=BATCH, num_workers=0)
        ready = lambda p: p.export_chrome_trace(os.path.join(folder, "trace.json.gz"))  # noqa: E731
    elif variant.startswith("fakedata"):
        data = torchvision.datasets.FakeData(size=64, image_size=(3, 32, 32), num_classes=10,
                                             transform=torchvision.transforms.ToTensor())
        loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=0)
        ready = lambda p: p.export_chrome_trace(os.path.join(folder, "trace.json"))  # noqa: E731
    else:
        sys.exit(f"unknown variant {variant!r}")
    fake = variant.startswith("fakedata")
    it = iter(loader)
    if variant in ("workers", "workers_item"):
        time.sleep(3.0)  # the workers fill their queues (2 x 2 batches), as in a long-running loop
    active = active or (5 if fake else 2)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=fake and stack,
                 schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(warmup + active):
            x, y = next(it)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if variant in ("item", "workers_item") or fake:
                print(f"loss {loss.item():.4f}")
            prof.step()
    del it


def flops(out_dir):
    """with_flops=True; the reference FLOPs from PyTorch itself beside the trace."""
    from torch.utils.flop_counter import FlopCounterMode
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.rand(4, 3, 32, 32), torch.arange(4) % 10
    folder = os.path.join(out_dir, "flops")
    os.makedirs(folder, exist_ok=True)
    ref = {}

    def ready(p):
        p.export_chrome_trace(os.path.join(folder, "trace.json"))
        ref["profiler_flops_per_step"] = sum(e.flops for e in p.events() if e.flops) / 2

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    with profile(activities=[ProfilerActivity.CPU], with_flops=True,
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(3):
            step()
            prof.step()
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    ref["flop_counter_per_step"] = counter.get_total_flops()
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f)


def ddp_rank(rank, out_dir, port):
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet18(num_classes=10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(SlowImages(0.1 if rank == 1 else 0), batch_size=4, num_workers=0)
    it = iter(loader)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(os.path.join(out_dir, "ddp_slow"),
                                                          worker_name=f"rank{rank}")) as prof:
        for _ in range(4):
            x, y = next(it)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


def ddp_slow(out_dir):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Forked, not spawned: the ranks need not import torch again (seconds each on a small machine);
    # ddp_slow is asked for alone, so this process has run no torch op yet and forks no thread pool.
    mp.start_processes(ddp_rank, args=(out_dir, port), nprocs=2, start_method="fork")


def split(name, out_dir):
    """Records the fakedata code's 10 steps, then writes its odd and even steps as two traces."""
    whole = os.path.join(out_dir, f"fakedata_{name}")
    run(f"fakedata_{name}", out_dir, active=10, warmup=3, stack=False)
    with open(os.path.join(whole, "trace.json")) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    for side, keep in (("a", 0), ("b", 1)):
        drop = [(e["ts"], e["ts"] + e["dur"]) for i, e in enumerate(steps) if i % 2 != keep]
        inside = lambda e: "ts" in e and any(lo <= e["ts"] < hi for lo, hi in drop)  # noqa: E731
        folder = f"{whole}_{side}"
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "trace.json"), "w") as f:
            json.dump(dict(doc, traceEvents=[e for e in events if not inside(e)]), f)


def main():
    out_dir, variants = sys.argv[1], sys.argv[2:]
    for v in variants:
        t = time.time()
        if v.startswith("split:"):
            split(v[len("split:"):], out_dir)
        elif v == "flops":
            flops(out_dir)
        elif v == "ddp_slow":
            ddp_slow(out_dir)
        else:
            run(v, out_dir)
        print(f"{v}: {time.time() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
