"""Reference FLOPs for test/flops_test.cpp: PyTorch's own counter
(torch.utils.flop_counter.FlopCounterMode) on torchvision's model.

Usage: flops_ref.py IMAGE_SIZE NUM_CLASSES ARCH...
Prints one JSON object: {ARCH: {"forward": F, "train": F+B}, ...}, FLOPs per sample of a batch
of 2 in training mode (one multiply-add counts 2, as FlopCounterMode counts). The model is built on the meta device: shapes
only, no weights, no arithmetic.
"""
import json
import sys

import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode


def build(arch, size, classes):
    kwargs = {"num_classes": classes}
    if arch == "vit_b_16":
        kwargs["image_size"] = size
    return getattr(torchvision.models, arch)(**kwargs)


def count(arch, size, classes):
    batch = 2
    with torch.device("meta"):
        model = build(arch, size, classes)
        x = torch.empty(batch, 3, size, size)
    model.train()
    with FlopCounterMode(display=False) as fwd:
        out = model(x)
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    f, b = fwd.get_total_flops(), bwd.get_total_flops()
    return {"forward": f / batch, "train": (f + b) / batch}


def main():
    size, classes = int(sys.argv[1]), int(sys.argv[2])
    print(json.dumps({arch: count(arch, size, classes) for arch in sys.argv[3:]}))


if __name__ == "__main__":
    main()
