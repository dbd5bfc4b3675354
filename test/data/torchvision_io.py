"""Exchanges weights with ptune's tests (test/models_test.cpp).

  python torchvision_io.py export DIR   torchvision resnet18 (10 classes, seed 0): writes
                                        DIR/tv_weights.pt (torch.save(state_dict)) and
                                        DIR/tv_io.pt ({"input", "output"} in eval mode)
  python torchvision_io.py check DIR    loads DIR/ptune_weights.pt into torchvision's
                                        resnet18 with strict=True (weights_only load) and
                                        checks every tensor equals DIR/tv_weights.pt
  python torchvision_io.py export-check DIR
                                        export, then prints "exported" and waits for the
                                        line "check" on stdin: both in one process
  python torchvision_io.py variants DIR the shapes weights come in besides a plain state_dict:
                                        DIR/whole_model.pt (torch.save(model)),
                                        DIR/wrapped.pt ({"epoch", "state_dict", "optimizer"}),
                                        DIR/ddp.pt (keys prefixed "module.", as DDP saves them),
                                        DIR/no_counters.pt (no num_batches_tracked), and
                                        DIR/reference.pt (the plain state_dict)
"""
import sys

import torch
import torchvision

from export_check import check_weights, export_then_check


def export(folder):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    # Make the BatchNorm statistics non-trivial so eval mode exercises the buffers.
    with torch.no_grad():
        model.train()
        model(torch.randn(4, 3, 64, 64))
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        y = model(x)
    torch.save(model.state_dict(), f"{folder}/tv_weights.pt")
    torch.save({"input": x, "output": y}, f"{folder}/tv_io.pt")


def check(folder):
    check_weights(torchvision.models.resnet18(num_classes=10), folder, "tv_weights.pt")


def main():
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "export":
        export(folder)
    elif mode == "check":
        check(folder)
    elif mode == "export-check":
        export_then_check(lambda: export(folder), lambda: check(folder))
    elif mode == "variants":
        torch.manual_seed(1)
        model = torchvision.models.resnet18(num_classes=10)
        sd = model.state_dict()
        torch.save(sd, f"{folder}/reference.pt")
        torch.save(model, f"{folder}/whole_model.pt")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        torch.save({"epoch": 3, "state_dict": sd, "optimizer": opt.state_dict()}, f"{folder}/wrapped.pt")
        torch.save({"module." + k: v for k, v in sd.items()}, f"{folder}/ddp.pt")
        counters = {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}
        # torchvision itself loads this with strict=True (BatchNorm fills the counter in).
        torchvision.models.resnet18(num_classes=10).load_state_dict(counters, strict=True)
        torch.save(counters, f"{folder}/no_counters.pt")
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
