"""Writes the GPU-shaped profiler trace fixtures of `ptune analyze`'s tests (test/data/traces/).

No GPU was at hand when they were made, so they are synthetic: each is a few training steps laid
out by hand in Kineto's Chrome-trace schema as torch.profiler 2.x writes it on a CUDA machine
(schemaVersion, deviceProperties, distributedInfo; "ph": "X" events of cat cpu_op,
user_annotation, cuda_runtime, kernel, gpu_memcpy, gpu_memset with their args: External id,
correlation, stream, device, bytes, registers per thread, shared memory, ...; ac2g flow events),
with kernel names as cuBLAS/cuDNN/NCCL print them. Times are microseconds. Each fixture is shaped
so one rule fires (copy-bound, sync-bound, launch-bound, compute-bound on fp32, compute-bound
with layout conversions, communication-bound on 2 ranks), or to have one property of the real
traces that ptune was checked on (docs/analyze.md, "Checked on real GPU traces"): a host wait
on a busy GPU, a wait that leaves it idle, CUDA initialization without ProfilerStep, CUDA graph
launches, fractional microseconds, the 2021 schema, two processes in one file, memory samples
and input shapes; NCCL kernels on their own stream and ac2g flow events are in the ddp pair.
The real traces are not committed: the repository holds only what this project writes. See the
tests that read them: test/analyze_test.cpp, and test/hta_agreement.py (each against HTA).

    python3 test/data/make_trace_fixtures.py      # rewrites test/data/traces/
"""
import gzip
import json
import os

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces")
PID, TID = 4242, 4242


class Trace:
    def __init__(self):
        self.events = []
        self.corr = 1000
        self.ext = 1

    def cpu(self, name, ts, dur, cat="cpu_op"):
        self.ext += 1
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                            "args": {"External id": self.ext, "Record function id": 0, "Ev Idx": len(self.events)}})

    def launch(self, ts, dur, name="cudaLaunchKernel"):
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
                            "dur": dur, "args": {"External id": self.ext, "cbid": 211, "correlation": self.corr}})
        self.events.append({"ph": "s", "id": self.corr, "pid": PID, "tid": TID, "ts": ts, "cat": "ac2g",
                            "name": "ac2g"})
        return self.corr

    def kernel(self, name, ts, dur, corr, stream=7):
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                            "args": {"External id": self.ext, "queued": 0, "device": 0, "context": 1,
                                     "stream": stream, "correlation": corr, "registers per thread": 128,
                                     "shared memory": 49152, "blocks per SM": 2.5, "warps per SM": 10.0,
                                     "grid": [132, 1, 1], "block": [256, 1, 1],
                                     "est. achieved occupancy %": 25}})
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": ts, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})

    def memcpy(self, kind, ts, dur, corr, nbytes):
        self.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy " + kind, "pid": 0, "tid": 7, "ts": ts,
                            "dur": dur, "args": {"External id": self.ext, "device": 0, "context": 1, "stream": 7,
                                                 "correlation": corr, "bytes": nbytes,
                                                 "memory bandwidth (GB/s)": round(nbytes / dur / 1e3, 3)}})

    def memset(self, ts, dur, corr):
        self.events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": ts,
                            "dur": dur, "args": {"External id": self.ext, "device": 0, "context": 1, "stream": 7,
                                                 "correlation": corr, "bytes": 4096}})

    def doc(self, rank=0, world=1, extra=None):
        d = {"schemaVersion": 1,
             "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
                                   "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                   "numSms": 132, "sharedMemPerBlock": 49152}],
             "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
             "record_shapes": 0, "with_stack": 0, "profile_memory": 0,
             "traceEvents": self.events + [
                 {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": "python"}},
                 {"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "python"}},
                 {"name": "process_labels", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}],
             "traceName": "fixture", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}
        if extra:
            d.update(extra)
        return d


def step(t, i, t0, length, body):
    """ProfilerStep#i over [t0, t0 + length) and the DataLoader's __next__ at its start; `body`
    fills the rest from t0 + 200."""
    t.cpu(f"ProfilerStep#{i}", t0, length, cat="user_annotation")
    t.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t0 + 10, 150, cat="user_annotation")
    body(t, t0 + 200)


def h2d(t, ts, dur, kind, nbytes=3 * 224 * 224 * 4 * 64):
    t.cpu("aten::to", ts, dur + 20)
    t.cpu("aten::copy_", ts + 5, dur + 10)
    c = t.launch(ts + 10, dur if "Pageable" in kind else 8, "cudaMemcpyAsync")
    t.memcpy(kind, ts + 12, dur, c, nbytes)


def kernels(t, ts, names, dur, gap, op="aten::convolution"):
    """One host op per kernel, each launched `gap` us after the previous; kernels queue on stream 7.
    Returns (host end, device end)."""
    dev = ts
    for n, name in enumerate(names):
        h = ts + n * gap
        t.cpu(op, h, gap - 2)
        c = t.launch(h + 2, 5)
        dev = max(dev, h + 10)
        t.kernel(name, dev, dur, c)
        dev += dur
    return ts + len(names) * gap, dev


FP32 = ["volta_sgemm_128x64_nn", "implicit_convolve_sgemm", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"]
AMP = ["sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4",
       "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
       "sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64",
       "nchwToNhwcKernel", "void cudnn::bn_fw_tr_1C11_kernel_NHWC<__half>",
       "sm80_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x64x32",
       "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<c10::Half>>",
       "ampere_fp16_s16816gemm_fp16_64x64_ldg8_f2f_stages_64x5_tn", "nhwcToNchwKernel",
       "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x64x32"]


def copy_bound():
    """40% of each step copying pageable batches: copy-bound, pin_memory."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 4000, "HtoD (Pageable -> Device)")
            kernels(t, ts + 4100, FP32 * 5, 240, 250)
        step(t, i, t0, 10000, body)
    return t.doc()


def launch_bound(extra=None):
    """Many tiny kernels launched slower than they run: GPU utilization about 30%."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            kernels(t, ts + 200, AMP * 30, 9, 30)
        step(t, i, t0, 10000, body)
    return t.doc(extra=extra)


def compute_fp32():
    """The GPU busy 95% of the step in fp32 kernels: AMP is the move."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            c = t.launch(ts + 150, 5, "cudaMemsetAsync")
            t.memset(ts + 160, 10, c)
            kernels(t, ts - 100, FP32 * 24, 98, 20)
        step(t, i, t0, 10000, body)
    return t.doc()


def compute_amp():
    """Busy on fp16 Tensor Core kernels, with NCHW<->NHWC conversions: channels_last."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            kernels(t, ts - 100, AMP * 10, 96, 20)
        step(t, i, t0, 10000, body)
    return t.doc()


def ddp_rank(rank, slow):
    """Rank `rank` of 2: compute, then an all-reduce not overlapped with it; rank 1 is slower."""
    t = Trace()
    length = 11000 if slow else 10000
    for i in range(1, 4):
        t0 = i * 12000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            host_end, dev_end = kernels(t, ts - 100, AMP * 6, 96 + (14 if slow else 0), 20)
            t.cpu("nccl:all_reduce", host_end, 30)
            t.cpu("record_param_comms", host_end + 2, 26)
            c = t.launch(host_end + 5, 8)
            t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                     dev_end + 5, 3000, c, stream=20)
        step(t, i, t0, length, body)
    return t.doc(rank=rank, world=2)


def no_steps():
    """A GPU trace without ProfilerStep#N spans (profiled without a schedule)."""
    t = Trace()
    h2d(t, 100, 100, "HtoD (Pinned -> Device)")
    kernels(t, 300, AMP * 10, 90, 20)
    return t.doc()


def busy_sync():
    """The GPU 97% busy in fp32 kernels while the host waits in cudaDeviceSynchronize for a fifth of
    each step: the wait costs nothing (the device stays busy), so compute-bound on fp32 wins."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            host_end, dev_end = kernels(t, ts - 100, FP32 * 24, 98, 20)
            t.launch(dev_end - 2000, 2000, "cudaDeviceSynchronize")
        step(t, i, t0, 10000, body)
    return t.doc()


def sync_bound():
    """A per-step .item() that drains the queue, then 2.5 ms of host work before the next launch:
    the GPU idles a quarter of the step after the host waited. sync-bound."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            host_end, dev_end = kernels(t, ts, AMP * 2, 240, 20)
            t.cpu("aten::item", host_end, dev_end - host_end + 40)
            t.cpu("aten::_local_scalar_dense", host_end + 2, dev_end - host_end + 30)
            c = t.launch(host_end + 5, 10, "cudaMemcpyAsync")
            t.memcpy("DtoH (Device -> Pageable)", dev_end + 2, 3, c, 4)
            t.launch(host_end + 16, dev_end - host_end, "cudaStreamSynchronize")
            t.cpu("aten::add_", dev_end + 60, 2500)  # host work (logging, Python) with the queue empty
            kernels(t, dev_end + 2600, AMP * 2, 200, 20)
        step(t, i, t0, 10000, body)
    return t.doc()


def init_no_steps():
    """No ProfilerStep#N (profiled without a schedule), and the trace starts with CUDA's
    initialization: 400 ms in cudaStreamCreateWithFlags and cudaMalloc before the first kernel,
    then a 300 ms lazy-loading cudaLaunchKernel with the GPU idle; then fp32 compute."""
    t = Trace()
    t.cpu("aten::to", 0, 400500)
    t.launch(10, 250000, "cudaStreamCreateWithFlags")
    t.launch(250100, 150000, "cudaMalloc")
    h2d(t, 400200, 100, "HtoD (Pageable -> Device)")
    t.cpu("aten::conv2d", 401000, 300100)
    c = t.launch(401010, 300000)  # the first launch of a kernel loads its module
    t.kernel(FP32[1], 701020, 90, c)
    kernels(t, 701200, FP32 * 30, 95, 20)
    return t.doc()


def cuda_graphs():
    """Steps replayed as CUDA graphs: one cudaGraphLaunch per step, its kernels sharing the launch's
    correlation; busy bf16 Tensor Core kernels, fractional microseconds as torch 2.x writes them."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            t.cpu("aten::copy_", ts + 150, 40)
            c = t.launch(ts + 160.25, 12.5, "cudaGraphLaunch")
            dev = ts + 180.375
            for n in range(80):
                t.kernel(AMP[n % len(AMP)].replace("f16", "bf16"), dev, 110.125, c)
                dev += 111.5
        step(t, i, t0, 10000, body)
    return t.doc()


def old_schema():
    """The 2021 schema (torch 1.8/1.9, the TensorBoard plugin's samples): cats Operator, Runtime,
    Kernel, Memcpy; tids as strings; no deviceProperties, distributedInfo or flow events."""
    doc = compute_fp32()
    cats = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy",
            "gpu_memset": "Memset", "user_annotation": "Operator"}
    events = []
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            continue
        e = dict(e)
        if "cat" in e:
            e["cat"] = cats.get(e["cat"], e["cat"])
        if e.get("ph") == "X":
            e["tid"] = str(e["tid"])
        events.append(e)
    return {"schemaVersion": 1, "traceEvents": events}


def two_processes():
    """One file with two host processes: the training process (pid 4242, its steps) and a
    DataLoader worker (pid 5151) whose decoding runs beside it; the worker's ops are not the step's."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            h2d(t, ts, 100, "HtoD (Pinned -> Device)")
            kernels(t, ts - 100, AMP * 10, 96, 20)
        step(t, i, t0, 10000, body)
    for i in range(0, 40):
        t.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::decode_jpeg", "pid": 5151, "tid": 5151,
                         "ts": 9000 + i * 800, "dur": 700, "args": {"External id": 0}})
    doc = t.doc()
    doc["traceEvents"].append({"name": "process_name", "ph": "M", "ts": 0, "pid": 5151, "tid": 0,
                               "args": {"name": "python"}})
    return doc


def memory_shapes():
    """profile_memory=True and record_shapes=True: "[memory]" instant events and "Input Dims", so
    that peak memory per step and the batch size (64) can be read."""
    t = Trace()
    for i in range(1, 4):
        t0 = i * 10000
        def body(t, ts):
            t.cpu("aten::to", ts, 120)
            t.events[-1]["args"]["Input Dims"] = [[64, 3, 224, 224], [], [], [], []]
            h2d(t, ts + 2, 100, "HtoD (Pinned -> Device)")
            kernels(t, ts - 100, AMP * 10, 96, 20)
            # Each allocation inside an aten::empty inside the operator the training code called
            # (the one it is charged to); a free inside the last one (not counted).
            for k, (mb, op, size) in enumerate(((1000 + 10 * i, "aten::conv2d", 64),
                                                (1800 + 10 * i, "aten::convolution_backward", 512),
                                                (1200, "aten::add_", 32))):
                at = ts + 1000 + 3000 * k
                t.cpu(op, at - 10, 40)
                t.cpu("aten::empty", at - 5, 10)
                t.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID,
                                 "tid": TID, "ts": at,
                                 "args": {"Total Reserved": 2048 * 2**20, "Total Allocated": mb * 2**20,
                                          "Bytes": size * 2**20, "Addr": 1, "Device Type": 1, "Device Id": 0}})
            t.events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID,
                             "tid": TID, "ts": ts + 7002,
                             "args": {"Total Reserved": 2048 * 2**20, "Total Allocated": 1000 * 2**20,
                                      "Bytes": -200 * 2**20, "Addr": 1, "Device Type": 1, "Device Id": 0}})
        step(t, i, t0, 10000, body)
    return t.doc(extra={"profile_memory": 1, "record_shapes": 1})


def process(pid, slow):
    """One of two processes profiled side by side without distributedInfo (two single-GPU jobs
    traced into one folder): compared as ranks are, named by their pid."""
    global PID, TID
    saved = PID, TID
    PID = TID = pid
    doc = compute_fp32() if slow else compute_amp()
    PID, TID = saved
    doc.pop("distributedInfo")
    if slow:  # everything 10% slower
        for e in doc["traceEvents"]:
            if e.get("ph") in ("X", "s", "f"):
                e["ts"] = round(e["ts"] * 1.1, 3)
                if "dur" in e:
                    e["dur"] = round(e["dur"] * 1.1, 3)
    return doc


def write(name, doc):
    path = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = json.dumps(doc, indent=None, separators=(",", ":")) + "\n"
    if name.endswith(".gz"):
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(text.encode())
    else:
        with open(path, "w") as f:
            f.write(text)


def main():
    write("gpu_copy_bound.json", copy_bound())
    write("gpu_sync_bound.json.gz", sync_bound())
    write("gpu_launch_bound.json.gz", launch_bound())
    write("gpu_compute_fp32.json.gz", compute_fp32())
    write("gpu_compute_amp.json.gz", compute_amp())
    write("gpu_no_steps.json", no_steps())
    # ptune's own trace: the top-level "ptune" key (what ptune's TraceRecorder writes).
    write("ptune_launch_bound.json.gz", launch_bound(extra={"ptune": {"version": "0.1.0", "row": "baseline"}}))
    write("gpu_busy_sync.json.gz", busy_sync())
    write("gpu_init_no_steps.json.gz", init_no_steps())
    write("gpu_cuda_graphs.json.gz", cuda_graphs())
    write("gpu_old_schema.json.gz", old_schema())
    write("gpu_two_processes.json.gz", two_processes())
    write("gpu_memory_shapes.json.gz", memory_shapes())
    write("procs/a.json.gz", process(1111, slow=False))
    write("procs/b.json.gz", process(2222, slow=True))
    write("ddp/rank0.json", ddp_rank(0, slow=False))
    write("ddp/rank1.json", ddp_rank(1, slow=True))


if __name__ == "__main__":
    main()
