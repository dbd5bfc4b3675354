#!/usr/bin/env python3
"""ptune's training step against PyTorch's, per architecture: eager and torch.compile.

For each architecture and precision (fp32, bf16 autocast), --repeats rounds, each round in
turn: one `ptune sweep` of a one-row config in measure.mode synthetic (one batch already on the
device: the model's step alone), then the same step in Python eager, then under
torch.compile(model) (default mode). Every side's figure per round is the median ms per step of
its timed windows; the table shows each side's median over the rounds and the spread
(max - min) / median, and the ratios ptune / eager and ptune / compile in samples/s (> 1: ptune
is faster).

The same work on every side: torchvision's model (ptune builds the same one), the same batch
and image size, SGD with momentum through the fused kernel (torch.optim.SGD(fused=True), as
ptune steps), gradients set to None, cross-entropy on random labels, bf16 through
torch.autocast on the forward and the loss; the same thread count (--threads: ptune's
cpu_threads, torch.set_num_threads). Warm-up steps (and torch.compile's compilation) are not
timed.

Each Python side (eager, compiled) runs in a process of its own, started afresh for each
architecture and precision, as every ptune run is: the host allocator's state (glibc malloc's
mmap and trim thresholds, which rise as large blocks are freed) would otherwise be inherited from
the architectures timed before, and one arch's figure would depend on which ran before it.

Both sides run as default processes (glibc's malloc as it comes): ptune's baseline is one.
--tuned-eager adds a third side, eager with glibc's malloc keeping freed memory for reuse
(GLIBC_TUNABLES, TUNED_MALLOC below: what ptune's process.allocator glibc_tuned sets), to show
what that setting is worth in Python (scripts/bench/cpu_allocators.py compares every allocator).

  python3 scripts/bench/zoo_vs_pytorch.py --ptune build/apps/ptune/ptune --threads 2 \\
      --json zoo-bench.json
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision

# process.allocator glibc_tuned: glibc's malloc keeping freed memory for reuse.
TUNED_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647:glibc.malloc.mmap_max=0"

ARCHS = ["resnet34", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v3_large",
         "convnext_tiny", "vit_b_16"]


def ptune_ms(args, arch, amp, tmp):
    cfg = {
        "name": "zoo-bench", "seed": 0, "device": "cpu", "cpu_threads": args.threads,
        "model": {"arch": arch, "num_classes": 10},
        "data": {"kind": "fake_cifar", "num_samples": args.batch * 4, "image_size": args.image_size},
        "loader": {"batch_size": args.batch, "num_workers": 0},
        "optim": {"kind": "sgd", "lr": 0.01, "momentum": 0.9, "set_to_none": True, "amp": amp},
        "measure": {"mode": "synthetic", "warmup_steps": args.warmup, "steps": args.steps,
                    # exactly `windows` windows: the row stops once its interval is within 100%
                    # (always, after the first windows), and its budget never cuts it short.
                    "repeats": args.windows, "target_ci_pct": 100, "max_s": 3600},
    }
    path = os.path.join(tmp, "zoo.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    proc = subprocess.run([args.ptune, "sweep", path, "--format", "json", "-q"], capture_output=True, text=True)
    try:
        row = json.loads(proc.stdout)["rows"][0]
        return float(row["ms_per_step"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise SystemExit(f"ptune failed on {arch} {amp}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")


class PythonStep:
    """The training step in Python on one batch, eager or compiled."""

    def __init__(self, args, arch, amp, compiled):
        torch.manual_seed(0)
        kwargs = {"image_size": args.image_size} if arch == "vit_b_16" else {}
        self.model = getattr(torchvision.models, arch)(weights=None, num_classes=10, **kwargs).train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, fused=True)
        self.fwd = torch.compile(self.model) if compiled else self.model
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=g)
        self.y = torch.randint(0, 10, (args.batch,), generator=g)
        self.amp = amp == "bf16"
        self.args = args
        start = time.perf_counter()
        for _ in range(args.warmup + (2 if compiled else 0)):
            self.step()
        self.warmup_s = time.perf_counter() - start

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.amp):
            loss = F.cross_entropy(self.fwd(self.x), self.y)
        loss.backward()
        self.opt.step()

    def ms(self):
        windows = []
        for _ in range(self.args.windows):
            start = time.perf_counter()
            for _ in range(self.args.steps):
                self.step()
            windows.append((time.perf_counter() - start) * 1000 / self.args.steps)
        return statistics.median(windows)


def _serve(conn, args, arch, amp, compiled):
    """A Python side in its own process: builds the step, then times it on each request."""
    torch.set_num_threads(args.threads)
    try:
        step = PythonStep(args, arch, amp, compiled)
    except Exception as e:  # no C++ compiler, an unsupported op: say so, go on
        conn.send(("error", f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
        return
    conn.send(("ready", step.warmup_s))
    while conn.recv() == "ms":
        conn.send(step.ms())


class PythonSide:
    """PythonStep in a fresh process (spawned: no state from the parent or earlier archs)."""

    def __init__(self, args, arch, amp, compiled, tunables=None):
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, args, arch, amp, compiled), daemon=True)
        # glibc reads GLIBC_TUNABLES once, when a process starts: set it for this child only.
        saved = os.environ.get("GLIBC_TUNABLES")
        if tunables:
            os.environ["GLIBC_TUNABLES"] = tunables
        try:
            self.proc.start()
        finally:
            if tunables:
                if saved is None:
                    del os.environ["GLIBC_TUNABLES"]
                else:
                    os.environ["GLIBC_TUNABLES"] = saved
        child.close()
        try:
            kind, value = self.conn.recv()
        except EOFError:  # killed (out of memory) or crashed before it could say why
            self.proc.join()
            kind, value = "error", f"the Python process exited with code {self.proc.exitcode}"
        if kind == "error":
            self.close()
            raise RuntimeError(value)
        self.warmup_s = value

    def ms(self):
        self.conn.send("ms")
        return self.conn.recv()

    def close(self):
        if self.proc.is_alive():
            try:
                self.conn.send("stop")
            except OSError:
                pass
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def summary(values):
    med = statistics.median(values)
    return {"median_ms": med, "spread_pct": 100 * (max(values) - min(values)) / med, "runs_ms": values}


def machine():
    name = "CPU"
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        name = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), name)
        flags = next((l for l in text.splitlines() if l.startswith("flags")), "")
    except OSError:
        pass
    return {"device": "cpu", "name": name, "cores": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags,
            "amx_bf16": "amx_bf16" in flags, "torch": torch.__version__, "torchvision": torchvision.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default="build/apps/ptune/ptune")
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds per arch and precision")
    ap.add_argument("--windows", type=int, default=3, help="timed windows per run")
    ap.add_argument("--steps", type=int, default=3, help="steps per window")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--tuned-eager", action="store_true",
                    help="also time eager with glibc malloc keeping freed memory (GLIBC_TUNABLES, as process.allocator glibc_tuned)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    doc = {"machine": machine(), "settings": {k: v for k, v in vars(args).items() if k != "json"}, "rows": []}
    print(f"# {doc['machine']['name']}, {args.threads} threads, batch {args.batch}, {args.image_size}x{args.image_size}")
    tuned_head = f" {'tuned eager ms':>14} {'vs tuned':>9}" if args.tuned_eager else ""
    print(f"{'arch':20} {'prec':5} {'ptune ms':>14} {'eager ms':>14} {'compile ms':>14} {'vs eager':>9} {'vs compile':>10}"
          + tuned_head)
    with tempfile.TemporaryDirectory(prefix="ptune-zoo-bench-") as tmp:
        for arch in args.archs.split(","):
            for prec in args.precisions.split(","):
                amp = "bf16" if prec == "bf16" else "off"
                eager = PythonSide(args, arch, amp, compiled=False)
                tuned = PythonSide(args, arch, amp, compiled=False, tunables=TUNED_MALLOC) if args.tuned_eager else None
                comp = None
                compile_error = None
                if not args.no_compile:
                    try:
                        comp = PythonSide(args, arch, amp, compiled=True)
                    except RuntimeError as e:
                        compile_error = str(e)
                runs = {"ptune": [], "eager": [], "compile": [], "tuned_eager": []}
                for _ in range(args.repeats):
                    runs["ptune"].append(ptune_ms(args, arch, amp, tmp))
                    runs["eager"].append(eager.ms())
                    if tuned:
                        runs["tuned_eager"].append(tuned.ms())
                    if comp:
                        runs["compile"].append(comp.ms())
                row = {"arch": arch, "precision": prec, "ptune": summary(runs["ptune"]),
                       "eager": summary(runs["eager"])}
                row["ptune_vs_eager"] = row["eager"]["median_ms"] / row["ptune"]["median_ms"]
                if tuned:
                    row["tuned_eager"] = summary(runs["tuned_eager"])
                    row["tuned_eager"]["glibc_tunables"] = TUNED_MALLOC
                    row["ptune_vs_tuned_eager"] = row["tuned_eager"]["median_ms"] / row["ptune"]["median_ms"]
                if comp:
                    row["compile"] = summary(runs["compile"])
                    row["compile"]["compile_and_warmup_s"] = comp.warmup_s
                    row["ptune_vs_compile"] = row["compile"]["median_ms"] / row["ptune"]["median_ms"]
                elif compile_error:
                    row["compile_error"] = compile_error
                doc["rows"].append(row)

                def cell(s):
                    return f"{s['median_ms']:8.1f} ±{s['spread_pct']:3.0f}%"
                print(f"{arch:20} {prec:5} {cell(row['ptune']):>14} {cell(row['eager']):>14} "
                      f"{cell(row['compile']) if comp else ('failed' if compile_error else '-'):>14} {row['ptune_vs_eager']:8.2f}x "
                      f"{(str(round(row['ptune_vs_compile'], 2)) + 'x') if comp else '-':>10}"
                      + (f" {cell(row['tuned_eager']):>14} {row['ptune_vs_tuned_eager']:8.2f}x" if tuned else ""),
                      flush=True)
                eager.close()
                if tuned:
                    tuned.close()
                if comp:
                    comp.close()
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
