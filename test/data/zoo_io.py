"""Reference data from torchvision for ptune's per-architecture tests (test/zoo_test.cpp).

  python zoo_io.py keys ARCH...       writes test/data/ARCH_keys.txt (state_dict names and
                                      shapes at 1000 classes, and the parameter count)
  python zoo_io.py export ARCH DIR    the model at the test's size (10 classes), weights made
                                      non-trivial; writes DIR/weights.pt (its state_dict) and
                                      DIR/ref.pt: input, labels, the eval and train outputs, every
                                      parameter's gradient after one backward, the state_dict
                                      after one SGD step, the parameter count; and the
                                      training-mode output and gradients of the same model in
                                      channels_last (cl_train_out, cl_grad.NAME): PyTorch's own
                                      difference between the two layouts on this CPU; and the
                                      training-mode output under bf16 autocast (bf16_train_out):
                                      its own difference between bf16 and fp32
  python zoo_io.py check ARCH DIR     loads DIR/ptune_weights.pt into torchvision's model with
                                      strict=True (weights_only) and checks it equals
                                      DIR/weights.pt
  python zoo_io.py export-check ARCH DIR
                                      export, then prints "exported" and waits for the line
                                      "check" on stdin (DIR/ptune_weights.pt written by then):
                                      both in one process

ARCH is a torchvision name, or vit_tiny: torchvision's VisionTransformer at 32x32 with 8x8
patches, 2 layers, 2 heads, hidden 32, MLP 64 (vit_b_16's classes, small enough for a test).
"""
import os
import sys

import torch
import torchvision

from export_check import check_weights, export_then_check

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
TRAIN_SEED = 7  # the seed both sides set before the training-mode forward (dropout, stochastic depth)
LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.9, 1e-4


def build(arch, num_classes):
    if arch == "vit_tiny":
        from torchvision.models.vision_transformer import VisionTransformer
        return VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                 mlp_dim=64, num_classes=num_classes)
    return getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)


def input_shape(arch):
    if arch == "vit_tiny":
        return (2, 3, 32, 32)
    return (4, 3, 32, 32)


def perturb(model):
    """Parameters no test would see through at their initial values: zero heads (ViT), layer
    scale 1e-6 (ConvNeXt), BatchNorm at 1 and 0 with empty statistics."""
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.05, 0.2, generator=g)
            elif name.startswith(("heads.", "class_token")):
                p.normal_(0, 0.05, generator=g)
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                # Scale 0.1 keeps deep residual streams (ResNet-152: 50 blocks) from growing
                # by orders of magnitude, where float32 rounding would dominate the comparison.
                m.weight.uniform_(0.05, 0.15, generator=g)
                m.bias.uniform_(-0.1, 0.1, generator=g)
            elif isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.8, 1.2, generator=g)
                m.bias.uniform_(-0.1, 0.1, generator=g)
        # BatchNorm running statistics from a few batches.
        model.train()
        for _ in range(3):
            model(torch.randn(*input_shape_of(model), generator=g))


def input_shape_of(model):
    return model._zoo_input_shape


def export(arch, folder):
    """The model, its reference outputs, gradients and step (the module docstring)."""
    torch.manual_seed(SEED)
    model = build(arch, 10)
    model._zoo_input_shape = input_shape(arch)
    perturb(model)
    g = torch.Generator().manual_seed(SEED + 2)
    x = torch.randn(*input_shape(arch), generator=g)
    labels = torch.randint(0, 10, (x.shape[0],), generator=g)
    torch.save(model.state_dict(), f"{folder}/weights.pt")
    model.eval()
    with torch.no_grad():
        eval_out = model(x)
    model.train()
    torch.manual_seed(TRAIN_SEED)
    train_out = model(x)
    torch.nn.functional.cross_entropy(train_out, labels).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY).step()
    ref = {
        "input": x, "labels": labels, "eval_out": eval_out, "train_out": train_out.detach(),
        "params": torch.tensor(sum(p.numel() for p in model.parameters())),
    }
    ref.update({"grad." + n: g for n, g in grads.items()})
    ref.update({"after." + n: t for n, t in model.state_dict().items()})
    # The same training step in channels_last, from the same weights.
    cl = build(arch, 10)
    cl.load_state_dict(torch.load(f"{folder}/weights.pt", weights_only=True))
    cl = cl.to(memory_format=torch.channels_last)
    cl.train()
    torch.manual_seed(TRAIN_SEED)
    cl_out = cl(x.contiguous(memory_format=torch.channels_last))
    torch.nn.functional.cross_entropy(cl_out, labels).backward()
    ref["cl_train_out"] = cl_out.detach().contiguous()
    ref.update({"cl_grad." + n: p.grad.detach().contiguous() for n, p in cl.named_parameters()})
    # The same training-mode forward under bf16 autocast, as a training loop writes it: PyTorch's
    # own difference between bf16 and fp32 on this CPU, the yardstick for ptune's bf16 step.
    half = build(arch, 10)
    half.load_state_dict(torch.load(f"{folder}/weights.pt", weights_only=True))
    half.train()
    torch.manual_seed(TRAIN_SEED)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half_out = half(x)
    ref["bf16_train_out"] = half_out.detach().float()
    torch.save(ref, f"{folder}/ref.pt")


def check(arch, folder):
    """ptune's weights load into torchvision's model strictly and equal the exported ones."""
    check_weights(build(arch, 10), folder, "weights.pt")


def main():
    mode = sys.argv[1]
    if mode == "keys":
        for arch in sys.argv[2:]:
            torch.manual_seed(SEED)
            model = build(arch, 1000)
            n_params = sum(p.numel() for p in model.parameters())
            sd = model.state_dict()
            with open(os.path.join(HERE, f"{arch}_keys.txt"), "w") as f:
                f.write(f"# torchvision {torchvision.__version__} {arch} parameters={n_params}\n")
                for name, t in sd.items():
                    shape = "x".join(str(d) for d in t.shape) if t.dim() > 0 else "scalar"
                    f.write(f"{name} {shape}\n")
            print(arch, len(sd), n_params)
        return
    arch, folder = sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)  # the same reductions as the C++ side's single thread
    if mode == "export":
        export(arch, folder)
    elif mode == "check":
        check(arch, folder)
    elif mode == "export-check":
        export_then_check(lambda: export(arch, folder), lambda: check(arch, folder))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
