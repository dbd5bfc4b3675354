#!/usr/bin/env python3
"""Regenerate the image_folder fixtures used by test/image_folder_test.cpp.

Run with the project's torch venv:

    /root/.cache/ptune/venv-torch-2.11.0/bin/python test/data/make_image_fixtures.py

Deterministic (numpy generator seeded with 0, no downloads). Writes, next to itself,
the folder image_folder/, a tiny torchvision ImageFolder root:

  image_folder/C_alpha/cmyk.jpg        20x16 CMYK JPEG (Adobe-inverted, as Pillow writes)
  image_folder/C_alpha/palette.png     20x16 palette PNG with a tRNS chunk
  image_folder/C_alpha/rgba.png        16x20 (portrait) RGBA PNG
  image_folder/a_rgb/Upper.JPEG        20x16 RGB JPEG (upper-case extension)
  image_folder/a_rgb/notes.txt         not an image: ignored by the dataset
  image_folder/a_rgb/rgb.jpg           40x30 RGB JPEG, 4:2:0
  image_folder/a_rgb/rgb.png           40x30 RGB PNG
  image_folder/a_rgb/sub/nested.png    20x16 RGB PNG in a sub-folder (ImageFolder walks them)
  image_folder/b_gray/gray.jpg         20x16 grayscale JPEG
  image_folder/b_gray/gray.png         20x16 grayscale PNG
  image_folder/b_gray/gray_alpha.png   20x16 grayscale + alpha PNG
  image_folder/smooth.jpg              160x120 smooth gradients, quality 95: a loose file at the
                                       root (not a sample), for the DCT-scaled crop test
  image_folder/reference.txt           expected values (a file at the root: ignored too)

(Sizes are width x height.) Class names sort byte-wise, upper case first, as Python's
sorted() does: C_alpha=0, a_rgb=1, b_gray=2.

reference.txt, one record per line, whitespace separated, pixel values as ints:

  classes <name>...                          torchvision.datasets.ImageFolder(root).classes
  sample <relpath> <label>                   ImageFolder(root).samples, in index order
  decode <relpath> <h> <w> <h*w*3 HWC>       PIL Image.open(p).convert("RGB") (pil_loader)
  draft <relpath> <h> <w> <h*w*3 HWC>        PIL JPEG draft("RGB", (w_min, h_min)): libjpeg
                                             DCT scaling (1/4 here), then convert("RGB")
  eval <relpath> <size> <3*size*size CHW>    torchvision.transforms.v2 on the uint8 tensor:
                                             Resize(round(size*256/224), antialias=True),
                                             CenterCrop(size)
  eval_pil <relpath> <size> <CHW>            the same transforms on the PIL image (PIL's own
                                             bilinear filter), then pil_to_tensor
  crop <relpath> <top> <left> <h> <w> <size> <CHW>
                                             v2.functional.resized_crop(tensor, top, left,
                                             h, w, [size, size], antialias=True)
"""

import os
import shutil

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "image_folder")


def smooth_rgb(rng, h, w):
    """An RGB uint8 HxWx3 image: gradients plus mild noise (compresses like a photo)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1),
                     128 + 100 * np.sin((x + y) / 3.0)], axis=-1)
    noise = rng.normal(0, 12, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).round().astype(np.uint8)


def ints(a):
    return " ".join(str(int(v)) for v in np.asarray(a).reshape(-1))


def make_images(rng):
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    for d in ["C_alpha", "a_rgb/sub", "b_gray"]:
        os.makedirs(os.path.join(ROOT, d))

    def path(rel):
        return os.path.join(ROOT, rel)

    rgb40 = smooth_rgb(rng, 30, 40)
    Image.fromarray(rgb40).save(path("a_rgb/rgb.jpg"), quality=90)  # 4:2:0 by default
    Image.fromarray(rgb40).save(path("a_rgb/rgb.png"))
    Image.fromarray(smooth_rgb(rng, 16, 20)).save(path("a_rgb/Upper.JPEG"), format="JPEG", quality=90)
    Image.fromarray(smooth_rgb(rng, 16, 20)).save(path("a_rgb/sub/nested.png"))
    with open(path("a_rgb/notes.txt"), "w") as f:
        f.write("not an image; the dataset only looks at .jpg, .jpeg and .png\n")

    gray = smooth_rgb(rng, 16, 20)[:, :, 0]
    Image.fromarray(gray, "L").save(path("b_gray/gray.jpg"), quality=90)
    Image.fromarray(gray, "L").save(path("b_gray/gray.png"))
    la = np.stack([gray, rng.integers(0, 256, size=gray.shape, dtype=np.uint8)], axis=-1)
    Image.fromarray(la, "LA").save(path("b_gray/gray_alpha.png"))

    rgba = np.concatenate([smooth_rgb(rng, 20, 16),
                           rng.integers(0, 256, size=(20, 16, 1), dtype=np.uint8)], axis=-1)
    Image.fromarray(rgba, "RGBA").save(path("C_alpha/rgba.png"))
    pal = Image.fromarray(smooth_rgb(rng, 16, 20)).quantize(colors=16, dither=Image.Dither.NONE)
    pal.info["transparency"] = 3  # palette entry 3 transparent: a tRNS chunk
    pal.save(path("C_alpha/palette.png"), transparency=3)
    cmyk = Image.fromarray(smooth_rgb(rng, 16, 20)).convert("CMYK")
    cmyk.save(path("C_alpha/cmyk.jpg"), quality=90)

    # Smooth gradients, large enough for DCT scaling to kick in (files at the root are ignored).
    y, x = np.mgrid[0:120, 0:160]
    smooth = np.stack([x * 255 // 159, y * 255 // 119, (x + 2 * y) * 255 // (159 + 2 * 119)], axis=-1)
    Image.fromarray(smooth.astype(np.uint8)).save(path("smooth.jpg"), quality=95)

    # Check the files are what the names say.
    assert Image.open(path("C_alpha/palette.png")).mode == "P"
    assert Image.open(path("C_alpha/cmyk.jpg")).mode == "CMYK"
    assert Image.open(path("b_gray/gray.jpg")).mode == "L"
    assert Image.open(path("b_gray/gray_alpha.png")).mode == "LA"


def rgb_of(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return Image.open(f).convert("RGB")  # exactly torchvision's pil_loader


def eval_size(size):
    return int(round(size * 256 / 224))


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    make_images(rng)

    lines = []
    ds = torchvision.datasets.ImageFolder(ROOT)
    lines.append("classes " + " ".join(ds.classes))
    for p, label in ds.samples:
        lines.append(f"sample {os.path.relpath(p, ROOT)} {label}")

    for rel, _ in [(os.path.relpath(p, ROOT), l) for p, l in ds.samples]:
        img = np.asarray(rgb_of(rel))
        h, w, _ = img.shape
        lines.append(f"decode {rel} {h} {w} {ints(img)}")

    # libjpeg DCT scaling: Pillow's draft() picks 1/4 for a 40x30 image asked for >= 10x7.
    with open(os.path.join(ROOT, "a_rgb/rgb.jpg"), "rb") as f:
        im = Image.open(f)
        im.draft("RGB", (10, 7))
        im = im.convert("RGB")
        assert im.size == (10, 8), im.size
        lines.append(f"draft a_rgb/rgb.jpg 8 10 {ints(np.asarray(im))}")

    max_pil_diff = 0
    for rel, size in [("a_rgb/rgb.png", 16), ("a_rgb/rgb.png", 13), ("a_rgb/rgb.png", 7),
                      ("C_alpha/rgba.png", 8)]:
        pil = rgb_of(rel)
        t = TF.pil_to_tensor(pil)
        ref = TF.center_crop(TF.resize(t, [eval_size(size)], antialias=True), [size])
        assert tuple(ref.shape) == (3, size, size)
        lines.append(f"eval {rel} {size} {ints(ref)}")
        pil_out = v2.Compose([v2.Resize(eval_size(size)), v2.CenterCrop(size)])(pil)
        pil_ref = TF.pil_to_tensor(pil_out)
        lines.append(f"eval_pil {rel} {size} {ints(pil_ref)}")
        d = (pil_ref.int() - ref.int()).abs().max().item()
        max_pil_diff = max(max_pil_diff, d)
        print(f"eval {rel} size {size}: max|PIL path - tensor path| = {d}")

    t = TF.pil_to_tensor(rgb_of("a_rgb/rgb.png"))
    for top, left, h, w, size in [(3, 5, 20, 25, 16), (10, 7, 9, 11, 16), (0, 0, 30, 40, 12)]:
        ref = TF.resized_crop(t, top, left, h, w, [size, size], antialias=True)
        lines.append(f"crop a_rgb/rgb.png {top} {left} {h} {w} {size} {ints(ref)}")

    with open(os.path.join(ROOT, "reference.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(ROOT) for n in ns
                if not n.endswith(".txt"))
    print(f"image_folder/: {len(ds.samples)} images ({total} bytes), {len(ds.classes)} classes, "
          f"reference.txt {os.path.getsize(os.path.join(ROOT, 'reference.txt'))} bytes")


if __name__ == "__main__":
    main()
