"""The export-check mode of zoo_io.py and torchvision_io.py: one Python process (torch imported
once) exports the reference, says so, and checks ptune's weights when the test tells it to."""
import sys


def export_then_check(export, check):
    """export(); print "exported"; then check() on the line "check" from stdin."""
    export()
    print("exported", flush=True)
    if sys.stdin.readline().strip() != "check":
        raise SystemExit("export-check: no 'check' on stdin")
    check()


def check_weights(model, folder, reference):
    """ptune's weights (FOLDER/ptune_weights.pt) load into `model` strictly (weights_only) and equal
    FOLDER/REFERENCE, the exported ones, tensor by tensor; prints "ok N" (N tensors)."""
    import torch
    mine = torch.load(f"{folder}/ptune_weights.pt", weights_only=True)
    model.load_state_dict(mine, strict=True)
    ref = torch.load(f"{folder}/{reference}", weights_only=True)
    for k, v in ref.items():
        if not torch.equal(mine[k], v):
            raise SystemExit(f"mismatch in {k}")
    print("ok", len(mine), flush=True)
