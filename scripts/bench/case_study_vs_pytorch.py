#!/usr/bin/env python3
"""The case study in PyTorch (Python) next to ptune, row by row, on the same machine.

Reads a ptune sweep config (default configs/case-study.json) and, for each selected cumulative
row, runs ptune on that row alone and then the same row as PyTorch pipelines: torchvision's
resnet, a DataLoader over CIFAR-shaped uint8 images with torchvision transforms, torch.amp,
channels_last, cudnn.benchmark. It prints samples/s of both sides and the ratio ptune / PyTorch.

What makes the comparison fair:
- Interleaved: per row, --repeats times (default 3) a ptune run of the row, then a run of each
  PyTorch variant; each side's samples/s is the median of its runs, with the spread
  (max - min) / median. Each run is itself the median of measure.repeats timed windows.
  With --ptune-results the ptune numbers come from that `ptune sweep --out` file instead
  (matched by row name; not interleaved; their spread is over that run's measure.repeats).
- The same thread count on both sides (--threads; default ptune's from --ptune-results, else
  the config's cpu_threads, else every core): ptune's cpu_threads, torch.set_num_threads.
- The same work timed: warm-up untimed, the device synchronized before the clock is read at
  the end of a window. Data rows (measure.mode data) time the loader, the host-to-device copy
  and, for uint8 batches, the conversion to float and normalization on the device (with the
  resize there under loader.gpu_resize); no model. Synthetic rows time the step alone on one
  batch already on the device.
- The faster Python variant: rows with optim.cuda_graphs run torch.compile(model) (default
  mode, which uses no CUDA graphs) and the whole step (forward, backward, update, loss
  scaling) captured with torch.cuda.graph after 3 eager warm-up steps and replayed from
  static inputs, as ptune does; rows with optim.amp fp16 run the optimizer plain and with
  fused=True (GradScaler then no longer reads found_inf on the host every step; only the fused
  optimizer can be captured in a graph). The ratio is against the fastest variant, named on
  its line. Compile and capture time is excluded from the timing and printed. On a CPU the
  CUDA graphs variant is "n/a on CPU"; a variant that fails (torch.compile without a working
  C++ compiler) is reported as failed and the others go on.
- --input pil (default) resizes PIL images, as torchvision's classic pipeline does; --input
  tensor resizes uint8 tensors with torch ops (torchvision.transforms.v2), PyTorch's faster path.

A row ptune skips (an option the device cannot honour) is skipped on the Python side too, with
ptune's reason. --json is rewritten (atomically) after every row, so a long run split over
several commands with --rows loses nothing:

  python3 scripts/bench/case_study_vs_pytorch.py --ptune build/apps/ptune/ptune \\
      --config configs/case-study.json --rows 0-6 --json vs-pytorch-0-6.json
  # the ptune side from a sweep already run (not interleaved):
  ptune sweep configs/case-study.json --out case-study.json
  python3 scripts/bench/case_study_vs_pytorch.py --ptune-results case-study.json --rows 7-12
  # smoke test on a CPU:
  ... --set device=cpu --set data.image_size=64 --set data.num_samples=256 --set measure.steps=3
"""
import argparse
import copy
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms.v2 as v2
from PIL import Image

PROG = "case_study_vs_pytorch"
GRAPH_WARMUP_STEPS = 3  # eager steps before the capture, as ptune and PyTorch's docs do
INPUTS = {"pil": "PIL images resized by torchvision transforms",
          "tensor": "uint8 tensors resized by torchvision.transforms.v2 (torch ops)"}


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(message)


# ---- the config and its rows -------------------------------------------------------------

def set_path(cfg, path, value):
    section, _, key = path.partition(".")
    if key:
        cfg.setdefault(section, {})[key] = value
    else:
        cfg[section] = value


def resolve(ptune, cfg_path, sets):
    args = [ptune, "check", cfg_path] + [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"ptune check: {last_line(proc.stderr)}")
    return json.loads(proc.stdout)


def rows_of(cfg):
    """(name, merged `set` patch of this row and every row before it) per sweep row."""
    rows = cfg["sweep"] or [{"name": "config", "set": {}}]
    out, patch = [], {}
    for row in rows:
        patch = {**patch, **row.get("set", {})}
        out.append((row["name"], patch))
    return out


def with_patch(cfg, patch):
    row = copy.deepcopy(cfg)
    row.pop("sweep", None)
    for path, value in patch.items():
        set_path(row, path, value)
    return row


def parse_rows(spec, n):
    picked = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            fail(f"--rows {spec}: expected A-B or a comma list such as 0,3,7")
        if not 0 <= first <= last < n:
            fail(f"--rows {spec}: the config has {n} rows (0-{n - 1})")
        picked += [i for i in range(first, last + 1) if i not in picked]
    return sorted(picked)


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def first_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[0][:200] if lines else ""


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1][:200] if lines else ""


# ---- ptune: one row at a time ------------------------------------------------------------

def run_ptune_row(ptune, tmp, cfg, name, patch):
    """One `ptune sweep` of the row alone: the resolved base config and its merged patch."""
    path = os.path.join(tmp, "row.json")
    with open(path, "w") as f:
        json.dump({**cfg, "sweep": [{"name": name, "set": patch}]}, f)
    proc = subprocess.run([ptune, "sweep", path, "--format", "json", "-q"], capture_output=True, text=True)
    if proc.returncode == 130:
        raise KeyboardInterrupt
    try:
        result = json.loads(proc.stdout)
        return result["rows"][0], result["environment"]
    except (ValueError, KeyError, IndexError):
        return {"status": f"failed: ptune exited {proc.returncode}: {last_line(proc.stderr)}"}, None


# ---- PyTorch: one row, one variant -------------------------------------------------------

class FakeCIFAR(torch.utils.data.Dataset):
    """Seeded random 32x32 RGB uint8 images (HWC, as CIFAR ships them) and labels."""

    def __init__(self, n, classes, seed, transform):
        rng = np.random.default_rng(seed)
        self.data = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.targets = rng.integers(0, classes, size=(n,)).tolist()
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), self.targets[i]


def hwc_to_chw(a):
    return torch.from_numpy(a).permute(2, 0, 1)


def sample_transform(cfg, input_path):
    """Per image: resized on the host unless gpu_resize; float and normalized unless uint8 batches."""
    ld, dt = cfg["loader"], cfg["data"]
    resize = [] if ld["gpu_resize"] else [v2.Resize(dt["image_size"], antialias=True)]
    if input_path == "pil":
        steps = [Image.fromarray] + resize + [v2.PILToTensor()]
    else:
        steps = [hwc_to_chw] + resize
    if not (ld["uint8_transfer"] or ld["gpu_resize"]):
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(dt["mean"], dt["std"])]
    return v2.Compose(steps)


def device_of(cfg):
    if cfg["device"] == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg["device"])


def synchronize(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def variants(cfg, dev):
    """The Python variants of a row: label, graph mode (eager, torch.compile, CUDA graphs or
    None for a data row), fused optimizer, and why it cannot run here (or None)."""
    op = cfg["optim"]
    if cfg["measure"]["mode"] == "data":
        return [{"variant": "loader + copy", "graph": None, "fused": False, "na": None}]
    kind = {"sgd": "SGD", "adamw": "AdamW"}[op["kind"]]
    optimizers = [(kind, False), (f"fused {kind}", True)] if op["amp"] == "fp16" else [("", False)]
    graphs = ["torch.compile", "CUDA graphs"] if op["cuda_graphs"] else ["eager"]
    out = []
    for graph in graphs:
        for opt_label, fused in optimizers:
            if graph == "CUDA graphs" and op["amp"] == "fp16" and not fused:
                continue  # GradScaler.step reads found_inf on the host: not capturable
            na = "n/a on CPU" if graph == "CUDA graphs" and dev.type != "cuda" else None
            out.append({"variant": ", ".join(filter(None, [graph, opt_label])), "graph": graph, "fused": fused, "na": na})
    return out


def make_step(cfg, model, dev, graph, fused, sample):
    """The training step for one variant; for CUDA graphs warmed up and captured on `sample`."""
    op = cfg["optim"]
    params = model.parameters()
    if op["kind"] == "sgd":
        opt = torch.optim.SGD(params, lr=op["lr"], momentum=op["momentum"], weight_decay=op["weight_decay"],
                              fused=fused)
    else:
        opt = torch.optim.AdamW(params, lr=op["lr"], weight_decay=op["weight_decay"], fused=fused)
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[op["amp"]]
    scaler = torch.amp.GradScaler(dev.type, enabled=op["amp"] == "fp16")
    fwd = torch.compile(model) if graph == "torch.compile" else model

    def step(x, y):
        opt.zero_grad(set_to_none=op["set_to_none"])
        # A graph capture needs autocast's cast cache off (PyTorch's CUDA graphs notes).
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None, cache_enabled=graph != "CUDA graphs"):
            loss = F.cross_entropy(fwd(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if graph != "CUDA graphs":
        return step
    static_x, static_y = sample[0].clone(), sample[1].clone()
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_STEPS):
            step(static_x, static_y)
    torch.cuda.current_stream(dev).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(static_x, static_y)

    def replay(x, y):
        if x.shape != static_x.shape:  # a partial last batch runs eagerly, as in ptune
            return step(x, y)
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()

    return replay


def run_pytorch(cfg, graph, fused, input_path):
    """One run of the row: samples/s (median of measure.repeats windows) and the setup time."""
    dev = device_of(cfg)
    ld, dt, ms, md = cfg["loader"], cfg["data"], cfg["measure"], cfg["model"]
    mode = ms["mode"]
    ds = FakeCIFAR(dt["num_samples"], md["num_classes"], cfg["seed"], sample_transform(cfg, input_path))
    workers = ld["num_workers"]
    loader = torch.utils.data.DataLoader(ds, batch_size=ld["batch_size"], shuffle=ld["shuffle"],
                                         num_workers=workers, pin_memory=ld["pin_memory"],
                                         drop_last=ld["drop_last"], persistent_workers=workers > 0,
                                         prefetch_factor=ld["prefetch"] if workers > 0 else None)
    if len(loader) == 0:
        raise ValueError(f"batch {ld['batch_size']} is larger than data.num_samples {dt['num_samples']}")
    size = dt["image_size"]
    mean = torch.tensor(dt["mean"], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor(dt["std"], device=dev).view(1, 3, 1, 1) * 255
    non_blocking = ld["pin_memory"]
    mf = torch.channels_last if md["channels_last"] else torch.contiguous_format

    def to_device(x, y):
        x, y = x.to(dev, non_blocking=non_blocking), y.to(dev, non_blocking=non_blocking)
        if x.dtype == torch.uint8:
            x = x.float()
            if ld["gpu_resize"]:
                x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
            x = (x - mean) / std
        return x, y

    def batches():
        while True:
            yield from loader

    it = batches()
    torch.backends.cudnn.benchmark = cfg["optim"]["cudnn_benchmark"]
    setup_s = None
    if mode == "data":
        def one():
            to_device(*next(it))
    else:
        torch.manual_seed(cfg["seed"])
        model = getattr(torchvision.models, md["arch"])(num_classes=md["num_classes"])
        model = model.to(dev, memory_format=mf)
        if graph == "torch.compile":
            torch._dynamo.reset()  # a fresh compile per run; the recompile limit would fall back to eager
        x, y = to_device(*next(it))
        sample = (x.contiguous(memory_format=mf), y)
        t0 = time.perf_counter()
        step = make_step(cfg, model, dev, graph, fused, sample)
        if graph != "eager":  # compile (on the first call) or warm up and capture, untimed
            step(*sample)
            synchronize(dev)
            setup_s = time.perf_counter() - t0

        def one():
            if mode == "synthetic":
                return step(*sample)
            x, y = to_device(*next(it))
            step(x.contiguous(memory_format=mf), y)

    for _ in range(ms["warmup_steps"]):
        one()
    synchronize(dev)
    per_step = []
    for _ in range(ms["repeats"]):
        t0 = time.perf_counter()
        for _ in range(ms["steps"]):
            one()
        synchronize(dev)
        per_step.append((time.perf_counter() - t0) / ms["steps"])
    return ld["batch_size"] / statistics.median(per_step), setup_s


def run_variant(cfg, variant, input_path):
    """run_pytorch, or the failure as a status line."""
    try:
        return run_pytorch(cfg, variant["graph"], variant["fused"], input_path)
    except Exception as e:  # e.g. torch.compile without a working compiler: report, go on
        return f"failed: {type(e).__name__}: {first_line(str(e)) or repr(e)}", None
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def summary(values):
    """Median and spread ((max - min) / median, %) of a side's runs; no spread from one run."""
    med = statistics.median(values)
    spread = 100.0 * (max(values) - min(values)) / med if len(values) > 1 and med > 0 else None
    return {"samples_per_s": round(med, 2), "spread_pct": None if spread is None else round(spread, 1),
            "runs": [round(v, 2) for v in values]}


def compare_row(i, name, patch, cfg, dev, args, tmp, ptune_file_row):
    """The row, interleaved: per repeat a ptune run (unless it comes from the file), then a run
    of each PyTorch variant. Returns the row's result and ptune's environment (or None)."""
    row_cfg = with_patch(cfg, patch)
    vs = variants(row_cfg, dev)
    runs = {v["variant"]: [] for v in vs}
    setups = {v["variant"]: [] for v in vs}
    failed = {}
    ptune_runs, env = [], None
    for _ in range(args.repeats):
        if ptune_file_row:
            ptune_row = ptune_file_row
        else:
            ptune_row, env = run_ptune_row(args.ptune, tmp, cfg, name, patch)
            if ptune_row["status"] == "ok":
                ptune_runs.append(ptune_row["samples_per_s"])
        if ptune_row["status"].startswith("skipped"):
            return {"index": i, "name": name, "changes": patch, "mode": row_cfg["measure"]["mode"],
                    "status": ptune_row["status"]}, env
        for v in vs:
            label = v["variant"]
            if v["na"] or label in failed:
                continue
            rate, setup = run_variant(row_cfg, v, args.input)
            if isinstance(rate, str):
                failed[label] = rate
                continue
            runs[label].append(rate)
            if setup is not None:
                setups[label].append(round(setup, 2))

    if ptune_file_row:
        ptune = {"status": ptune_row["status"], "samples_per_s": ptune_row.get("samples_per_s"),
                 "spread_pct": ptune_row.get("spread_pct"), "source": "file"}
    elif ptune_runs:
        ptune = {"status": "ok", **summary(ptune_runs), "source": "interleaved"}
    else:
        ptune = {"status": ptune_row["status"], "samples_per_s": None, "source": "interleaved"}
    ptune["notes"] = ptune_row.get("notes", [])  # e.g. a failed graph capture that ran eagerly
    pytorch = []
    for v in vs:
        label = v["variant"]
        status = v["na"] or failed.get(label) or "ok"
        result = {**summary(runs[label]), "compile_s": setups[label] or None} if status == "ok" else {}
        pytorch.append({"variant": label, "status": status, **result})
    ok = [p for p in pytorch if p["status"] == "ok"]
    best = max(ok, key=lambda p: p["samples_per_s"]) if ok else None
    mine = ptune["samples_per_s"] if ptune["status"] == "ok" else None
    return {"index": i, "name": name, "changes": patch, "mode": row_cfg["measure"]["mode"], "status": "ok",
            "ptune": ptune, "pytorch": pytorch, "ratio_vs": best["variant"] if best else None,
            "ratio": round(mine / best["samples_per_s"], 3) if best and mine else None}, env


# ---- output ------------------------------------------------------------------------------

def machine_of(dev):
    if dev.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(dev)
    else:
        name = "CPU"
        try:
            with open("/proc/cpuinfo") as f:
                name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), name)
        except OSError:
            pass
    return {"device": dev.type, "name": name, "cores": os.cpu_count(), "torch": torch.__version__,
            "torchvision": torchvision.__version__, "cuda": torch.version.cuda}


def fmt_rate(side):
    spread = side.get("spread_pct")
    return f"{side['samples_per_s']:10.1f} " + (f"±{spread:5.1f}%  " if spread is not None else f"{'(n=1)':>9s}")


def print_header(machine, threads, ptune_threads, args):
    runs = f"{args.repeats} run{'s' if args.repeats > 1 else ''}"
    source = (f"from {args.ptune_results} (not interleaved; spread over its measure.repeats)" if args.ptune_results
              else f"interleaved with PyTorch, {runs} per row")
    both = "on both sides" if ptune_threads in (None, threads) else f"in PyTorch, {ptune_threads} in ptune"
    print(f"machine: {machine['name']} ({machine['device']}, {machine['cores']} cores) | torch {machine['torch']}, "
          f"torchvision {machine['torchvision']} | {threads} CPU threads {both}")
    print(f"PyTorch input: {args.input} ({INPUTS[args.input]}) | ptune: {source} | PyTorch: {runs} per variant")
    print("samples/s: median ± spread (max - min) / median | compile s: torch.compile's first step, or CUDA graphs' "
          "warm-up and capture (first run; never timed) | ratio: ptune / the fastest PyTorch variant, on its line")
    print(f"\n{'#':>2}  {'row':26s} {'ptune/s':>20s}  {'PyTorch variant':26s} {'PyTorch/s':>20s} {'compile s':>9s}  ratio",
          flush=True)


def print_row(row):
    head = f"{row['index']:>2}  {row['name'][:26]:26s}"
    if row["status"] != "ok":
        print(f"{head} {row['status']}", flush=True)
        return
    ptune = row["ptune"]
    left = f"{head} {fmt_rate(ptune) if ptune['status'] == 'ok' else 'see below':>20s}"
    for k, v in enumerate(row["pytorch"]):
        line = f"{v['variant'][:26]:26s} "
        if v["status"] == "ok":
            setup = f"{v['compile_s'][0]:9.1f}" if v["compile_s"] else f"{'-':>9s}"
            ratio = f"  {row['ratio']:5.2f}x" if row["ratio_vs"] == v["variant"] and row["ratio"] else ""
            line += f"{fmt_rate(v)} {setup}{ratio}"
        else:
            line += v["status"]
        print((left if k == 0 else " " * len(left)) + "  " + line, flush=True)
    for note in ([] if ptune["status"] == "ok" else [ptune["status"]]) + ptune["notes"]:
        print(f"{'':30s}ptune: {note}", flush=True)


def write_json(path, doc):
    """Atomically: a reader (or a kill) never sees half a file."""
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
        os.replace(tmp, path)


def config_differences(ours, theirs):
    a, b = flat(ours), flat(theirs)
    a.pop("cpu_threads", None), b.pop("cpu_threads", None)
    short = lambda v: repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
    return [f"{k} {short(b.get(k))} there, {short(a.get(k))} here" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def load_ptune_results(path, names):
    try:
        with open(path) as f:
            results = json.load(f)
        by_name = {r["name"]: r for r in results["rows"]}
    except (ValueError, KeyError, TypeError) as e:
        fail(f"--ptune-results {path}: not a ptune results file ({type(e).__name__}: {e})")
    missing = [n for n in names if n not in by_name]
    if missing:
        fail(f"--ptune-results {path}: no row named {', '.join(map(repr, missing))}")
    return results, by_name


# ---- main --------------------------------------------------------------------------------

def interrupt(signum, frame):
    raise KeyboardInterrupt  # a kill stops like Ctrl-C: the running ptune is killed, the JSON says so


def main():
    signal.signal(signal.SIGTERM, interrupt)
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptune", default="build/apps/ptune/ptune", help="the ptune binary (also resolves the config)")
    ap.add_argument("--config", default="configs/case-study.json")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                    help="as ptune's --set, for both sides (repeatable)")
    ap.add_argument("--rows", help="0-based rows: a range A-B, a list such as 0,3,7, or both (default: all)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per row and side (default 3)")
    ap.add_argument("--threads", type=int,
                    help="CPU threads on both sides (default: ptune's from --ptune-results, else the config's cpu_threads, else every core)")
    ap.add_argument("--input", choices=sorted(INPUTS), default="pil", help="the PyTorch input path (default pil)")
    ap.add_argument("--ptune-results", metavar="FILE",
                    help="take ptune's rows (by name) from this `ptune sweep --out` JSON instead of running ptune")
    ap.add_argument("--json", metavar="OUT", help="write the comparison here, rewritten after every row")
    args = ap.parse_args()
    if args.repeats < 1:
        fail(f"--repeats {args.repeats}: must be at least 1")
    if args.threads is not None and args.threads < 1:
        fail(f"--threads {args.threads}: must be at least 1")
    for what, path in (("--ptune", args.ptune), ("--config", args.config), ("--ptune-results", args.ptune_results)):
        if path and not os.path.isfile(path):
            fail(f"{what} {path}: no such file")

    cfg = resolve(args.ptune, args.config, args.set)
    if cfg["data"]["kind"] != "fake_cifar":
        fail(f"data.kind {cfg['data']['kind']}: the PyTorch side builds fake_cifar only")
    rows = rows_of(cfg)
    picked = parse_rows(args.rows, len(rows)) if args.rows else list(range(len(rows)))
    results, by_name, ptune_env = None, {}, None
    if args.ptune_results:
        results, by_name = load_ptune_results(args.ptune_results, [rows[i][0] for i in picked])
        ptune_env = results.get("environment")
    file_threads = (ptune_env or {}).get("cpu_threads")
    threads = args.threads or file_threads or cfg["cpu_threads"] or len(os.sched_getaffinity(0))
    cfg["cpu_threads"] = threads  # ptune's rows run with it; PyTorch's too:
    torch.set_num_threads(threads)

    dev = device_of(cfg)
    machine = machine_of(dev)
    warnings = []
    if results:
        if file_threads is not None and file_threads != threads:
            warnings.append(f"ptune ran with {file_threads} CPU threads, PyTorch runs with {threads}")
        differ = config_differences(cfg, results.get("config", {}))
        if differ:
            warnings.append(f"{args.ptune_results} was made with another config: " + "; ".join(differ))
    for w in warnings:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    print_header(machine, threads, file_threads, args)

    doc = {"status": "running",
           "settings": {"config": args.config, "ptune": args.ptune, "sets": args.set, "rows": picked,
                        "repeats": args.repeats, "threads": threads, "input": args.input,
                        "ptune_source": "file" if results else "interleaved", "ptune_results": args.ptune_results},
           "machine": machine, "ptune_environment": ptune_env, "warnings": warnings, "config": cfg, "rows": []}
    write_json(args.json, doc)
    try:
        with tempfile.TemporaryDirectory(prefix="ptune-vs-pytorch-") as tmp:
            for i in picked:
                name, patch = rows[i]
                row, env = compare_row(i, name, patch, cfg, dev, args, tmp, by_name.get(name))
                doc["ptune_environment"] = env or doc["ptune_environment"]
                doc["rows"].append(row)
                print_row(row)
                write_json(args.json, doc)
    except KeyboardInterrupt:
        doc["status"] = "interrupted"
        write_json(args.json, doc)
        print(f"{PROG}: interrupted after {len(doc['rows'])} rows", file=sys.stderr)
        return 130
    doc["status"] = "complete"
    write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
