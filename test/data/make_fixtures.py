#!/usr/bin/env python3
"""Regenerate the reference fixtures used by ptune's C++ tests.

Run with the project's torch venv, e.g.

    /root/.cache/ptune/venv-torch-2.11.0/bin/python test/data/make_fixtures.py

The script is deterministic (no downloads, no pretrained weights, every random
value comes from a torch.Generator seeded with 0) and writes its outputs next
to itself, whatever the current working directory is:

  resnet18_keys.txt, resnet50_keys.txt
      torchvision ResNet state_dict layout: one "<name> <shape>" line per entry,
      in state_dict order.  Shapes are written "d0xd1x..."; a 0-dim tensor
      (num_batches_tracked) is written "scalar".  First line is a comment
      "# torchvision <version> <arch> parameters=<n>", where n counts
      parameters only (not buffers).

  resize_fixture.txt
      Bilinear resize (half-pixel centres, align_corners=False) of uint8 CHW
      images.  Per case:
          case <name> <C> <inH> <inW> <outH> <outW>
          input     <C*inH*inW ints>
          float_ref <C*outH*outW floats, 6 decimals>
          uint8_ref <C*outH*outW ints>
      float_ref = F.interpolate(x.float()[None], size, bilinear,
                                align_corners=False, antialias=True)[0]
      uint8_ref = torchvision.transforms.v2.functional.resize(x, size,
                                                              antialias=True)
      (torchvision's own uint8 path.)  antialias only changes anything when
      shrinking, which is what torchvision does by default.

  normalize_fixture.txt
      ToTensor + Normalize(ImageNet mean/std) of a 3x4x5 uint8 image:
          mean m0 m1 m2
          std s0 s1 s2
          input  <60 ints, CHW order>
          output <60 floats, CHW order, 8 decimals>

Every value line is whitespace separated so the C++ side can read it with >>.
"""

import os

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision import models, transforms
from torchvision.transforms.v2 import functional as TF

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0


def seeded_uint8(shape):
    """uint8 tensor of `shape` with values in [0, 255].

    Each call uses a fresh generator seeded with SEED, so every fixture is
    independent of the order in which the others are generated.
    """
    g = torch.Generator().manual_seed(SEED)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


def ints(t):
    return " ".join(str(int(v)) for v in t.reshape(-1).tolist())


def floats(t, decimals):
    fmt = "{:.%df}" % decimals
    return " ".join(fmt.format(float(v)) for v in t.reshape(-1).tolist())


# ---------------------------------------------------------------------------
# 1. ResNet state_dict key/shape lists
# ---------------------------------------------------------------------------
def write_keys(arch):
    torch.manual_seed(SEED)  # init values are irrelevant, but keep it tidy
    model = getattr(models, arch)(weights=None, num_classes=1000)
    n_params = sum(p.numel() for p in model.parameters())
    sd = model.state_dict()
    path = os.path.join(HERE, f"{arch}_keys.txt")
    with open(path, "w") as f:
        f.write(f"# torchvision {torchvision.__version__} {arch} parameters={n_params}\n")
        for name, t in sd.items():
            shape = "x".join(str(d) for d in t.shape) if t.dim() > 0 else "scalar"
            f.write(f"{name} {shape}\n")
    print(f"{os.path.basename(path)}: {len(sd)} entries, parameters={n_params}")
    return n_params


# ---------------------------------------------------------------------------
# 2. Bilinear resize fixtures
# ---------------------------------------------------------------------------
RESIZE_CASES = [
    # name,   input shape (C, H, W), output size (H, W)
    ("up7", (1, 8, 8), (56, 56)),      # integer upscale x7, like 32 -> 224
    ("up_odd", (3, 7, 5), (23, 17)),   # non-integer, different per axis
    ("down", (3, 40, 40), (13, 13)),   # shrinking: antialias filter matters
]


def write_resize():
    path = os.path.join(HERE, "resize_fixture.txt")
    max_diffs = {}
    with open(path, "w") as f:
        for name, (c, ih, iw), (oh, ow) in RESIZE_CASES:
            x = seeded_uint8((c, ih, iw))
            float_ref = F.interpolate(
                x.float()[None], size=(oh, ow), mode="bilinear",
                align_corners=False, antialias=True)[0]
            uint8_ref = TF.resize(x, [oh, ow], antialias=True)
            assert uint8_ref.dtype == torch.uint8
            assert tuple(uint8_ref.shape) == (c, oh, ow)

            f.write(f"case {name} {c} {ih} {iw} {oh} {ow}\n")
            f.write("input " + ints(x) + "\n")
            f.write("float_ref " + floats(float_ref, 6) + "\n")
            f.write("uint8_ref " + ints(uint8_ref) + "\n")

            # How far torchvision's uint8 path is from round(float result).
            rounded = float_ref.round().clamp(0, 255)
            d = (uint8_ref.int() - rounded.int()).abs().max().item()
            max_diffs[name] = d
            print(f"resize_fixture.txt case {name}: {c}x{ih}x{iw} -> {c}x{oh}x{ow}, "
                  f"max|uint8_ref - round(float_ref)| = {d}")
    print(f"resize_fixture.txt: {len(RESIZE_CASES)} cases")
    return max_diffs


# ---------------------------------------------------------------------------
# 3. ToTensor + Normalize fixture
# ---------------------------------------------------------------------------
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def write_normalize():
    x = seeded_uint8((3, 4, 5))  # CHW
    # ToTensor takes an HWC uint8 array (like a decoded image) and returns a
    # CHW float tensor scaled to [0, 1]; Normalize then applies (v-mean)/std.
    hwc = np.ascontiguousarray(x.permute(1, 2, 0).numpy())
    pipeline = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize(mean=MEAN, std=STD),
    ])
    out = pipeline(hwc)
    assert tuple(out.shape) == (3, 4, 5) and out.dtype == torch.float32

    path = os.path.join(HERE, "normalize_fixture.txt")
    with open(path, "w") as f:
        f.write("mean " + " ".join(repr(m) for m in MEAN) + "\n")
        f.write("std " + " ".join(repr(s) for s in STD) + "\n")
        f.write("input " + ints(x) + "\n")
        f.write("output " + floats(out, 8) + "\n")
    print(f"normalize_fixture.txt: 3x4x5 input, output range "
          f"[{out.min().item():.4f}, {out.max().item():.4f}]")


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    write_keys("resnet18")
    write_keys("resnet50")
    write_resize()
    write_normalize()


if __name__ == "__main__":
    main()
