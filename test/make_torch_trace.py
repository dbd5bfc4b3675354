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
Schedule: wait=0, warmup=1, active=2 (ProfilerStep#1 and #2 recorded). One thread for the
model, so a loaded machine slows compute less than the sleeping loader stays slow.
"""
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


def run(variant, out_dir):
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
    else:
        sys.exit(f"unknown variant {variant!r}")
    it = iter(loader)
    if variant in ("workers", "workers_item"):
        time.sleep(3.0)  # the workers fill their queues (2 x 2 batches), as in a long-running loop
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=ready) as prof:
        for _ in range(3):
            x, y = next(it)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if variant in ("item", "workers_item"):
                print(f"loss {loss.item():.4f}")
            prof.step()
    del it


def main():
    torch.set_num_threads(1)
    out_dir, variants = sys.argv[1], sys.argv[2:]
    for v in variants:
        t = time.time()
        run(v, out_dir)
        print(f"{v}: {time.time() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
