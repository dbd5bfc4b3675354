#!/usr/bin/env python3
"""The case study in PyTorch (Python) next to ptune, row by row, same machine, same command.

Reads a ptune sweep config (default configs/case-study.json), runs each cumulative row as the
equivalent PyTorch pipeline — torchvision's resnet, a DataLoader over CIFAR-shaped uint8 images
with torchvision transforms, torch.amp with GradScaler, channels_last, cudnn.benchmark, and
torch.compile where ptune uses CUDA graphs — then runs `ptune sweep` on the same config, and
prints samples/s of both and the ratio ptune / PyTorch per row. Medians of measure.repeats.

  python3 scripts/bench/case_study_vs_pytorch.py --ptune build/apps/ptune/ptune \
      --config configs/case-study.json --json results.json
  # smoke test on a CPU: --set device=cpu --set data.image_size=64 --set measure.steps=2 ...
"""
import argparse
import copy
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from PIL import Image


class FakeCIFAR(torch.utils.data.Dataset):
    def __init__(self, n, classes, transform, seed):
        rng = np.random.default_rng(seed)
        self.data = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, classes, size=(n,)).tolist()
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def set_path(cfg, path, value):
    section, _, key = path.partition(".")
    if key:
        cfg.setdefault(section, {})[key] = value
    else:
        cfg[section] = value


def resolve(ptune, cfg_path, sets):
    args = [ptune, "check", cfg_path] + [a for s in sets for a in ("--set", s)]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def rows_of(cfg):
    base = copy.deepcopy(cfg)
    rows = base.pop("sweep") or [{"name": "config", "set": {}}]
    out = []
    for row in rows:
        for path, value in row.get("set", {}).items():
            set_path(base, path, value)
        out.append((row["name"], copy.deepcopy(base)))
    return out


def run_pytorch_row(cfg):
    dev = torch.device("cuda" if cfg["device"] in ("auto", "cuda") and torch.cuda.is_available()
                       else cfg["device"] if cfg["device"] != "auto" else "cpu")
    ld, dt, op, ms, md = cfg["loader"], cfg["data"], cfg["optim"], cfg["measure"], cfg["model"]
    size = dt["image_size"]
    mean = torch.tensor(dt["mean"], device=dev).view(1, 3, 1, 1)
    std = torch.tensor(dt["std"], device=dev).view(1, 3, 1, 1)
    if ld["gpu_resize"]:
        tf = T.PILToTensor()
    elif ld["uint8_transfer"]:
        tf = T.Compose([T.Resize(size), T.PILToTensor()])
    else:
        tf = T.Compose([T.Resize(size), T.ToTensor(), T.Normalize(dt["mean"], dt["std"])])
    ds = FakeCIFAR(dt["num_samples"], md["num_classes"], tf, cfg["seed"])
    loader = torch.utils.data.DataLoader(ds, batch_size=ld["batch_size"], shuffle=ld["shuffle"],
                                         num_workers=ld["num_workers"], pin_memory=ld["pin_memory"] and dev.type == "cuda",
                                         drop_last=True, persistent_workers=ld["num_workers"] > 0,
                                         prefetch_factor=ld["prefetch"] if ld["num_workers"] > 0 else None)
    torch.manual_seed(cfg["seed"])
    model = getattr(torchvision.models, md["arch"])(num_classes=md["num_classes"]).to(dev)
    mf = torch.channels_last if md["channels_last"] else torch.contiguous_format
    model = model.to(memory_format=mf)
    torch.backends.cudnn.benchmark = op["cudnn_benchmark"]
    if op["kind"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=op["lr"], momentum=op["momentum"], weight_decay=op["weight_decay"])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=op["lr"], weight_decay=op["weight_decay"])
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[op["amp"]]
    scaler = torch.amp.GradScaler(dev.type, enabled=op["amp"] == "fp16")
    fwd = torch.compile(model) if op["cuda_graphs"] else model  # graph mode in Python
    nb = ld["pin_memory"] and dev.type == "cuda"

    def to_device(x, y):
        x = x.to(dev, non_blocking=nb)
        y = y.to(dev, non_blocking=nb)
        if x.dtype == torch.uint8:
            x = x.float()
            if ld["gpu_resize"]:
                x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            x = (x / 255 - mean) / std
        return x.contiguous(memory_format=mf), y

    def step(x, y):
        opt.zero_grad(set_to_none=op["set_to_none"])
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(fwd(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    if len(loader) == 0:
        raise ValueError(f"batch {ld['batch_size']} is larger than data.num_samples {dt['num_samples']}")
    it = iter(loader)

    def next_batch():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    fixed = to_device(*next_batch()) if ms["mode"] == "synthetic" else None

    def one():
        if ms["mode"] == "synthetic":
            return step(*fixed)
        x, y = next_batch()
        if ms["mode"] == "data":
            return to_device(x, y)
        return step(*to_device(x, y))

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(ms["warmup_steps"]):
        one()
    sync()
    per_repeat = []
    for _ in range(ms["repeats"]):
        t0 = time.perf_counter()
        for _ in range(ms["steps"]):
            one()
        sync()
        per_repeat.append((time.perf_counter() - t0) / ms["steps"])
    return ld["batch_size"] / statistics.median(per_repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default="build/apps/ptune/ptune")
    ap.add_argument("--config", default="configs/case-study.json")
    ap.add_argument("--set", action="append", default=[], help="PATH=VALUE, as ptune's --set")
    ap.add_argument("--rows", help="comma-separated row indices to run (default: all)")
    ap.add_argument("--json", help="write the comparison here")
    args = ap.parse_args()

    cfg = resolve(args.ptune, args.config, args.set)
    rows = rows_of(cfg)
    pick = set(int(i) for i in args.rows.split(",")) if args.rows else set(range(len(rows)))
    py = {}
    for i, (name, row_cfg) in enumerate(rows):
        if i not in pick:
            continue
        try:
            py[i] = run_pytorch_row(row_cfg)
        except Exception as e:  # a row PyTorch cannot run here (e.g. fp16 on a CPU)
            py[i] = None
            why = (str(e).splitlines() or [""])[0][:120]
            print(f"PyTorch row {i} {name}: {type(e).__name__}: {why}", file=sys.stderr)
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    cmd = [args.ptune, "sweep", args.config, "--format", "json", "--quiet"] + [a for s in args.set for a in ("--set", s)]
    ours = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    table = []
    print(f"{'#':>2}  {'row':28s} {'PyTorch/s':>10s} {'ptune/s':>10s} {'ratio':>7s}")
    for i, (name, _) in enumerate(rows):
        if i not in pick:
            continue
        r = ours["rows"][i]
        p = r.get("samples_per_s") if r["status"] == "ok" else None
        ratio = p / py[i] if p and py[i] else None
        table.append({"row": name, "pytorch_samples_per_s": py[i], "ptune_samples_per_s": p,
                      "ptune_status": r["status"], "ratio": ratio})
        fmt = lambda v: f"{v:10.1f}" if v else f"{'-':>10s}"
        print(f"{i:>2}  {name:28s} {fmt(py[i])} {fmt(p)} {ratio:7.2f}x" if ratio else
              f"{i:>2}  {name:28s} {fmt(py[i])} {fmt(p)} {'-':>7s}  {'' if r['status'] == 'ok' else r['status']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "environment": ours["environment"], "rows": table}, f, indent=2)


if __name__ == "__main__":
    main()
