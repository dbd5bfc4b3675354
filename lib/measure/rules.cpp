#include "measure/rules.hpp"

#include <cstdio>

namespace ptune::measure {

const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      {RuleId::kInputBound, "input-bound",
       "data wait, % of the step: the host blocked on the loader (sweep); time in "
       "`enumerate(DataLoader)#...__next__` (trace)",
       ">=", 30.0, "raise `loader.num_workers`, then `loader.uint8_transfer`",
       "`DataLoader(num_workers=N, pin_memory=True, persistent_workers=True)`; then uint8 batches normalized "
       "on the GPU"},
      {RuleId::kCopyBound, "copy-bound",
       "host-to-device copy, % of the step: copy and uint8 normalize (sweep); Memcpy on the GPU (trace)",
       ">=", 20.0, "`loader.pin_memory`, then `loader.uint8_transfer`",
       "`pin_memory=True` and `.to(device, non_blocking=True)`; then uint8 transfer with normalization on "
       "the GPU"},
      {RuleId::kSyncBound, "sync-bound",
       "host waiting on the device, % of the step: `cudaStreamSynchronize`, `cudaDeviceSynchronize`, "
       "`.item()` (trace)",
       ">=", 10.0, "(ptune does not sync inside a step)",
       "remove the per-step host sync (`loss.item()`, `.cpu()`, printing a tensor): keep the value on the "
       "device and read it every N steps"},
      {RuleId::kCommBound, "communication-bound",
       "communication not overlapped with compute, % of the step (trace, several ranks)", ">=", 15.0,
       "`dist.bucket_mb`, `dist.accumulate`",
       "`DDP(bucket_cap_mb=...)`, gradient accumulation under `no_sync()`, a larger batch per rank"},
      {RuleId::kAllocator, "allocator-bound",
       "CPU: the process's system time, % of the step, with the page faults that explain it (sweep rows on "
       "glibc's default malloc)",
       ">=", 10.0, "`process.allocator` (jemalloc, tcmalloc or glibc_tuned)",
       "`LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 python train.py` (or tcmalloc), or "
       "`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.mmap_max=0`"},
      {RuleId::kLaunchBound, "launch-bound", "GPU busy: merged kernel time, % of the step", "<", 70.0,
       "`optim.cuda_graphs`, then a larger `loader.batch_size`",
       "CUDA graphs (`torch.compile(mode=\"reduce-overhead\")`) or a larger batch"},
      {RuleId::kHostBound, "host-bound",
       "CPU trace: the step's time in no operator, loader range or copy (Python code between operators, "
       "waits for I/O, locks or sleeps), % of the step",
       ">=", 50.0, "(not seen in ptune's own steps, which run no Python)",
       "`with_stack=True` names the Python frames between the operators: move that work out of the step "
       "(into the DataLoader's workers) or fuse it with `torch.compile`"},
      {RuleId::kComputeFp32, "compute-bound on fp32",
       "kernel time in fp16/bf16 kernels (by their names), % (trace); `optim.amp` off on a GPU, or on a CPU "
       "with native bf16 that oneDNN uses (sweep, and ptune's own traces)",
       "<", 50.0, "`optim.amp`",
       "`torch.autocast(\"cuda\", dtype=torch.float16)` with `torch.amp.GradScaler` (or bfloat16)"},
      {RuleId::kCompute, "compute-bound", "otherwise", "", 0.0, "`model.channels_last`",
       "`model.to(memory_format=torch.channels_last)` and `torch.compile(model)`"},
      {RuleId::kLowMemory, "+ memory used", "peak device memory, % of the GPU's (added to any verdict)", "<",
       30.0, "a larger `loader.batch_size`", "a larger batch"},
      {RuleId::kZeroGrad, "+ zeroing gradients",
       "`aten::zero_` under `Optimizer.zero_grad`, % of the step (trace; added to any verdict)", ">=", 1.0,
       "`optim.set_to_none`", "`optimizer.zero_grad(set_to_none=True)`"},
  };
  return table;
}

const Rule& rule(RuleId id) { return rules()[static_cast<size_t>(id)]; }

bool fires(RuleId id, double value) {
  const Rule& r = rule(id);
  const std::string cmp = r.comparison;
  if (cmp == ">=") return value >= r.threshold;
  if (cmp == "<") return value < r.threshold;
  return true;  // "otherwise"
}

std::string rules_markdown() {
  std::string s =
      "| rule | fires when | threshold | ptune's move | PyTorch's move |\n|---|---|---|---|---|\n";
  for (const auto& r : rules()) {
    std::string threshold = "—";
    if (*r.comparison != '\0') {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s %g%%", r.comparison, r.threshold);
      threshold = buf;
    }
    s += std::string("| ") + r.name + " | " + r.figure + " | " + threshold + " | " + r.ptune_move + " | " +
         r.python_move + " |\n";
  }
  return s;
}

}  // namespace ptune::measure
