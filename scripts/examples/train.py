"""A small image-classification training loop on synthetic data.

Trains a torchvision model (resnet18 by default) on FakeData with SGD and
prints one line per step on stdout:

    step 12/200 loss 2.3051 41.7 ms/step 383.7 samples/s

Run it with, for example:

    python scripts/examples/train.py --steps 50 --workers 2

Options select the device, batch size, data-loader workers, channels-last
memory format, mixed precision and torch.compile; see --help.

Environment: EXAMPLE_EXTRA_MS, when set to a number of milliseconds, makes
every step busy-wait that long on the CPU after optimizer.step(), to make
the program slower by a known amount. PTUNE_PROFILE_DIR, when set to a
folder, records PTUNE_PROFILE_STEPS steps (default 3) with torch.profiler
after two steps of warm-up and writes the trace there (ptune sets both
for `ptune sweep --profile`); --profile-dir does the same.
"""
import argparse
import itertools
import os
import sys
import time

import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="resnet18",
                   help="torchvision classification model (default: resnet18)")
    p.add_argument("--steps", type=int, default=200,
                   help="steps to train; 0 runs until killed (default: 200)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="batch size (default: 16)")
    p.add_argument("--image-size", type=int, default=64,
                   help="side of the square images (default: 64)")
    p.add_argument("--dataset-size", type=int, default=2048,
                   help="images in the synthetic dataset (default: 2048)")
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader worker processes (default: 0)")
    p.add_argument("--channels-last", action="store_true",
                   help="use channels_last memory format for model and input")
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off",
                   help="autocast precision; fp16 needs CUDA (default: off)")
    p.add_argument("--compile", action="store_true",
                   help="wrap the model in torch.compile")
    p.add_argument("--lr", type=float, default=0.01,
                   help="SGD learning rate (default: 0.01)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                   default="auto",
                   help="auto means cuda when available (default: auto)")
    p.add_argument("--threads", type=int,
                   help="set torch.set_num_threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (default: 0)")
    p.add_argument("--log-every", type=int, default=1,
                   help="print a line every N steps (default: 1)")
    p.add_argument("--profile-dir",
                   default=os.environ.get("PTUNE_PROFILE_DIR") or None,
                   help="write a torch.profiler trace of a few steps to this "
                        "folder (default: $PTUNE_PROFILE_DIR)")
    p.add_argument("--profile-steps", type=int,
                   default=int(os.environ.get("PTUNE_PROFILE_STEPS") or 3),
                   help="steps the trace records (default: "
                        "$PTUNE_PROFILE_STEPS or 3)")
    args = p.parse_args()
    models = torchvision.models.list_models(module=torchvision.models)
    if args.arch not in models:
        p.error(f"--arch {args.arch}: not a torchvision classification model")
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    if args.amp == "fp16" and args.device != "cuda":
        p.error("--amp fp16 needs CUDA")
    if min(args.steps, args.workers) < 0:
        p.error("--steps and --workers must be >= 0")
    if min(args.batch_size, args.log_every, args.profile_steps) < 1:
        p.error("--batch-size, --log-every and --profile-steps must be >= 1")
    return args


def endless(loader):
    while True:
        yield from loader


def busy_wait(ms):
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def profiler(args, cuda):
    """A torch.profiler that records args.profile_steps steps after two
    steps of warm-up and writes one trace to args.profile_dir; None
    without a folder. Call .step() after every training step."""
    if not args.profile_dir:
        return None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(
            wait=1, warmup=2, active=args.profile_steps, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(
            args.profile_dir),
        record_shapes=True)
    prof.start()
    return prof


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    extra_ms = float(os.environ.get("EXAMPLE_EXTRA_MS") or 0)
    memory_format = (torch.channels_last if args.channels_last
                     else torch.contiguous_format)

    transform = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.5,) * 3, (0.5,) * 3),
    ])
    dataset = torchvision.datasets.FakeData(
        size=args.dataset_size,
        image_size=(3, args.image_size, args.image_size),
        num_classes=10, transform=transform)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0, pin_memory=cuda)

    model = torchvision.models.get_model(args.arch, weights=None,
                                         num_classes=10)
    model = model.to(device, memory_format=memory_format)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
    if args.compile:
        model = torch.compile(model)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.amp)
    model.train()

    total = args.steps or "inf"
    print(f"start: {args.arch} batch {args.batch_size} "
          f"image {args.image_size} workers {args.workers} amp {args.amp} "
          f"channels_last {args.channels_last} compile {args.compile} "
          f"device {device}", file=sys.stderr, flush=True)

    prof = profiler(args, cuda)
    steps = range(1, args.steps + 1) if args.steps else itertools.count(1)
    last_time, last_step = time.perf_counter(), 0
    for step, (images, targets) in zip(steps, endless(loader)):
        images = images.to(device, non_blocking=True,
                           memory_format=memory_format)
        targets = targets.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype,
                            enabled=amp_dtype is not None):
            loss = criterion(model(images), targets)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if extra_ms > 0:
            busy_wait(extra_ms)

        if step % args.log_every == 0:
            loss_value = loss.item()
            if cuda:
                torch.cuda.synchronize()
            now = time.perf_counter()
            ms = (now - last_time) * 1000.0 / (step - last_step)
            print(f"step {step}/{total} loss {loss_value:.4f} {ms:.1f} "
                  f"ms/step {args.batch_size * 1000.0 / ms:.1f} samples/s",
                  flush=True)
            last_time, last_step = now, step
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()


if __name__ == "__main__":
    main()
