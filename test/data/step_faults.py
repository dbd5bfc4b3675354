"""Minor page faults per training step of torchvision's model in a default Python process.

  step_faults.py ARCH IMAGE_SIZE BATCH STEPS

Builds the model (fused SGD with momentum, as ptune's, gradients set to None, cross-entropy), runs two warm-up
steps, then STEPS steps on one batch already in memory (ptune's measure.mode synthetic) and
prints the minor page faults per step (getrusage) on stdout.
"""
import resource
import sys

import torch
import torchvision


def main():
    arch, size, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(2):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(steps):
        step()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / steps)


if __name__ == "__main__":
    main()
