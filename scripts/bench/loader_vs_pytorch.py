#!/usr/bin/env python3
"""ptune's loader against PyTorch's DataLoader doing the same work, same machine, same command.

Cases (same batch size, same number of workers, warm-up batches untimed, medians of repeats):
  fake-cifar float  32x32 uint8 -> Resize(224) -> ToTensor -> Normalize      (the case study)
  fake-cifar uint8  32x32 uint8 -> Resize(224) -> PILToTensor (uint8 batches)
  image folder      JPEG decode -> RandomResizedCrop(224) -> flip -> ToTensor -> Normalize

ptune runs its own loader through `ptune sweep` rows with measure.mode = data (on a CPU that
is the loader alone; on a GPU it includes the copy to the device, so use --device cpu for a
loader-only comparison). Prints a table of samples/s and ratios; --json FILE writes them.

  python3 scripts/bench/loader_vs_pytorch.py --ptune build/apps/ptune/ptune --workers 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image


class FakeCIFAR(torch.utils.data.Dataset):
    """CIFAR-shaped random images, as the case study builds them."""

    def __init__(self, n, transform):
        rng = np.random.default_rng(0)
        self.data = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, 10, size=(n,)).tolist()
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


def make_image_folder(root, classes=4, per_class=160, seed=0):
    """Writes JPEGs of photo-like sizes (random smooth images) under root/<class>/."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        os.makedirs(f"{root}/class{c}", exist_ok=True)
        for i in range(per_class):
            h, w = int(rng.integers(300, 500)), int(rng.integers(300, 500))
            small = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
            img = Image.fromarray(small).resize((w, h), Image.BILINEAR)
            img.save(f"{root}/class{c}/img{i:04d}.jpg", quality=90)


def time_pytorch(dataset, batch, workers, batches, warmup):
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers,
                                         drop_last=True, persistent_workers=workers > 0)
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    del it, loader
    return batch * batches / dt


def time_ptune(exe, cfg, folder):
    path = os.path.join(folder, "bench.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = subprocess.run([exe, "sweep", path, "--format", "json", "--quiet"], check=True,
                         capture_output=True, text=True).stdout
    row = json.loads(out)["rows"][0]
    if row["status"] != "ok":
        raise SystemExit(f"ptune row failed: {row['status']}")
    return row["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default="build/apps/ptune/ptune")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=40, help="timed batches per run")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--image-folder", help="an existing image folder (default: generate 640 JPEGs)")
    ap.add_argument("--cases", default="float,uint8,folder")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)

    tmp = tempfile.mkdtemp(prefix="ptune-bench-")
    folder = args.image_folder
    if "folder" in args.cases and not folder:
        folder = os.path.join(tmp, "images")
        make_image_folder(folder)

    norm = T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    n_fake = args.batch * (args.batches + args.warmup) * 2
    base = {"device": args.device, "seed": 0,
            "loader": {"batch_size": args.batch, "num_workers": args.workers, "prefetch": 2},
            "measure": {"mode": "data", "warmup_steps": args.warmup, "steps": args.batches}}
    cases = {
        "float": ("fake-cifar 224 float", FakeCIFAR(n_fake, T.Compose([T.Resize(224), T.ToTensor(), norm])),
                  {"data": {"kind": "fake_cifar", "num_samples": n_fake, "image_size": 224}}),
        "uint8": ("fake-cifar 224 uint8", FakeCIFAR(n_fake, T.Compose([T.Resize(224), T.PILToTensor()])),
                  {"data": {"kind": "fake_cifar", "num_samples": n_fake, "image_size": 224},
                   "loader": {"uint8_transfer": True}}),
    }
    if folder:
        import torchvision.datasets
        tv = torchvision.datasets.ImageFolder(folder, T.Compose(
            [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), norm]))
        cases["folder"] = ("image folder 224 train", tv,
                           {"data": {"kind": "image_folder", "root": folder, "image_size": 224,
                                     "transform": "train", "num_samples": len(tv)}})
    results = []
    for key in args.cases.split(","):
        title, dataset, overrides = cases[key]
        cfg = json.loads(json.dumps(base))
        for section, values in overrides.items():
            cfg.setdefault(section, {}).update(values)
        if key == "folder":
            cfg["data"].pop("num_samples")
            # an epoch of the folder may be shorter than the run: ptune cycles epochs like PyTorch's iterator would
        py, pt = [], []
        for _ in range(args.repeats):  # interleaved, so drift hits both alike
            py.append(time_pytorch(dataset, args.batch, args.workers, min(args.batches, len(dataset) // args.batch - args.warmup), args.warmup))
            pt.append(time_ptune(args.ptune, cfg, tmp))
        r = {"case": title, "workers": args.workers, "batch": args.batch,
             "pytorch_samples_per_s": statistics.median(py), "ptune_samples_per_s": statistics.median(pt)}
        r["ratio"] = r["ptune_samples_per_s"] / r["pytorch_samples_per_s"]
        results.append(r)
        print(f"{title:24s} workers={args.workers} batch={args.batch}  PyTorch {r['pytorch_samples_per_s']:9.1f}/s"
              f"  ptune {r['ptune_samples_per_s']:9.1f}/s  ratio {r['ratio']:.2f}x", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "cpu_count": os.cpu_count(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
