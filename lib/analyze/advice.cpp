#include "analyze/advice.hpp"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <map>

#include "errors.hpp"
#include "measure/rules.hpp"

namespace ptune::analyze {
namespace {

using measure::rule;
using measure::RuleId;

std::string pct(double v) { return std::to_string(static_cast<long>(std::lround(v))) + "%"; }

std::string ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 10000 ? "%.0f ms" : us >= 100 ? "%.1f ms" : "%.2f ms", us / 1000.0);
  return buf;
}

bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

/// Where the host syncs came from, grouped by place: "`aten::item`, `cudaStreamSynchronize` from
/// `train.py(42): step`; `cudaDeviceSynchronize` from the main thread (4242) in ProfilerStep#1",
/// at most three places; empty without syncs.
std::string origins_text(const Breakdown& b) {
  std::vector<std::pair<std::string, std::string>> places;  // where, the syncs made there
  for (const auto& o : b.sync_origins) {
    auto it = std::find_if(places.begin(), places.end(), [&](const auto& p) { return p.first == o.where; });
    if (it == places.end()) {
      if (places.size() == 3) continue;
      places.emplace_back(o.where, "");
      it = std::prev(places.end());
    }
    it->second += (it->second.empty() ? "`" : ", `") + o.name + "`";
  }
  std::string s;
  for (const auto& [where, names] : places) s += (s.empty() ? "" : "; ") + names + " from " + where;
  return s;
}

/// The step's achieved FLOP/s against the peak; "" for none (which profiler option gives it is
/// said with the FLOP/s table, render.cpp).
std::string throughput_note(const Throughput& th) {
  if (th.source == "none") return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "achieved %.3g GFLOP/s over the step (%.3g GFLOPs per step, %s, from the %s)",
                th.flops_per_s() / 1e9, th.flops / 1e9, th.precision.c_str(),
                th.source == "trace" ? "trace's FLOPs" : "input shapes");
  std::string s = buf;
  if (th.ceilings) {
    const double peak = th.ceilings->peak.flops_per_s;
    std::snprintf(buf, sizeof buf, ": %.1f%% of the peak %.3g GFLOP/s", 100.0 * th.flops_per_s() / peak, peak / 1e9);
    s += buf + (" (" + th.ceilings->peak.source + ")");
  } else if (!th.no_ceilings.empty()) {
    s += "; no peak: " + th.no_ceilings;
  }
  return s;
}

}  // namespace

void advise(Analysis& a) {
  const Breakdown& b = a.ranks[a.primary];
  const bool py = b.writer != "ptune";
  auto move = [&](RuleId id) { return std::string(py ? rule(id).python_move : rule(id).ptune_move); };
  const StepBreakdown m = b.mean();
  const double step = m.end > 0 ? m.end : 1;
  auto share = [&](double us) { return 100.0 * us / step; };
  const double loader = share(m.us[kDataLoader]);
  const double copies = share(m.us[kMemcpy]);
  // A host wait costs only the device time it leaves idle. A CPU-only trace has no host syncs
  // (an .item() there reads host memory: nothing to wait for).
  const double sync = share(m.sync_idle_us);
  const double nsteps = static_cast<double>(std::max<size_t>(b.steps.size(), 1));
  auto per_step = [&](double n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", n / nsteps);
    return std::string(buf);
  };
  int64_t sync_calls = 0;
  for (const auto& s : b.steps) sync_calls += s.syncs;
  const double exposed_comm = share(m.comm_us - m.comm_overlap_us);
  const double busy = share(m.kernel_us);
  // ptune's CPU trace of an fp32 row: optim.amp (bf16) is advised only where the CPU that
  // recorded it had native bf16 (as the sweep's diagnosis of the row says).
  const bool ptune_fp32 = !py && b.amp == std::optional<std::string>("off");
  const bool amp_advised = ptune_fp32 && (b.has_gpu || b.bf16_native != std::optional<bool>(false));
  Verdict& v = a.verdict;
  v = {};
  a.notes.clear();
  auto who = [&](const Breakdown& r, size_t i) {
    (void)i;
    return r.rank ? "rank " + std::to_string(*r.rank) : "process " + std::to_string(r.host_pid);
  };
  const std::string rank = a.distributed ? "; " + who(b, a.primary) + ", the slowest" : "";

  if (measure::fires(RuleId::kInputBound, loader)) {
    v.rule = rule(RuleId::kInputBound).name;
    const std::string name = b.dataloader.empty() ? "the data loader" : b.dataloader.front().name;
    v.evidence = pct(loader) + " of the step in `" + name + "`" + rank;
    if (py && has(name, "_SingleProcessDataLoaderIter")) {
      v.move = "the batches are loaded in the training process (num_workers=0): " + move(RuleId::kInputBound);
    } else if (py && has(name, "_MultiProcessingDataLoaderIter")) {
      v.move = "the workers do not keep up: raise `num_workers` (and `pin_memory=True`), or ship uint8 batches "
               "and normalize on the GPU";
    } else {
      v.move = move(RuleId::kInputBound);
    }
  } else if (b.has_gpu && measure::fires(RuleId::kCopyBound, copies)) {
    v.rule = rule(RuleId::kCopyBound).name;
    v.evidence = pct(copies) + " of the step in copies not overlapped by kernels; " + std::to_string(b.h2d.count) +
                 " host-to-device copies, " + std::to_string(b.h2d.pageable) + " from pageable memory" + rank;
    if (b.h2d.pageable > 0) {
      v.move = py ? "`pin_memory=True` in the DataLoader and `.to(device, non_blocking=True)`"
                  : "`loader.pin_memory`";
    } else {
      v.move = py ? "the copies are pinned already: ship uint8 batches and normalize on the GPU"
                  : "`loader.uint8_transfer`";
    }
  } else if (b.has_gpu && measure::fires(RuleId::kSyncBound, sync)) {
    v.rule = rule(RuleId::kSyncBound).name;
    std::string which;
    for (const auto& s : b.syncs) which += (which.empty() ? "" : ", ") + ("`" + s.name + "`");
    const std::string from = origins_text(b);
    v.evidence = pct(sync) + " of the step with the GPU idle after the host waited in " +
                 (which.empty() ? "syncs" : which) + " (" + per_step(static_cast<double>(sync_calls)) +
                 " per step; the host waited " + pct(share(m.sync_us)) + " of the step)" +
                 (from.empty() ? "" : "; " + from) + rank;
    v.move = move(RuleId::kSyncBound);
  } else if (m.comm_us > 0 && measure::fires(RuleId::kCommBound, exposed_comm)) {
    v.rule = rule(RuleId::kCommBound).name;
    v.evidence = pct(share(m.comm_us)) + " of the step in communication, " +
                 pct(m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0) + " of it overlapped with compute" +
                 rank;
    v.move = move(RuleId::kCommBound);
  } else if (b.has_gpu && measure::fires(RuleId::kLaunchBound, busy)) {
    v.rule = rule(RuleId::kLaunchBound).name;
    v.evidence = "GPU utilization " + pct(busy) + ": merged kernel time over the step; " +
                 pct(share(m.us[kRuntime] + m.us[kCpuExec])) + " of it in host code and CUDA runtime calls" + rank;
    v.move = move(RuleId::kLaunchBound);
  } else if ((b.has_gpu && b.half_pct && measure::fires(RuleId::kComputeFp32, *b.half_pct)) || amp_advised) {
    // A GPU trace tells fp32 by its kernels; ptune's traces also say the row's optim.amp (a
    // CPU trace has no kernels to tell by), as the sweep's diagnosis of the row does.
    v.rule = rule(RuleId::kComputeFp32).name;
    if (b.has_gpu && b.half_pct) {
      v.evidence = "GPU utilization " + pct(busy) + "; " + pct(*b.half_pct) + " of kernel time in fp16/bf16 kernels, " +
                   pct(b.tensor_core_pct.value_or(0)) + " on Tensor Cores" + rank;
    } else {
      v.evidence = pct(share(m.us[kCpuExec])) + " of the step in operators, `optim.amp` off" + rank;
    }
    v.move = move(RuleId::kComputeFp32);
  } else {
    v.rule = rule(RuleId::kCompute).name;
    if (b.has_gpu) {
      v.evidence = "GPU utilization " + pct(busy) + "; " + pct(b.tensor_core_pct.value_or(0)) +
                   " of kernel time on Tensor Cores" +
                   (b.kernels.empty() ? "" : "; largest kernel `" + b.kernels.front().name + "`") + rank;
    } else {
      v.rule += " on the CPU";
      v.evidence = pct(share(m.us[kCpuExec])) + " of the step in operators";
      if (!b.operators.empty()) {
        const double per_step = b.operators.front().self_us / static_cast<double>(b.steps.size());
        v.evidence += "; largest by self time `" + b.operators.front().name + "` (" + pct(share(per_step)) + ")";
      }
      v.evidence += rank;
    }
    v.move = move(RuleId::kCompute);
  }

  // Further findings.
  if (ptune_fp32 && !amp_advised && v.rule == rule(RuleId::kCompute).name + std::string(" on the CPU"))
    a.notes.push_back("`optim.amp` is not advised: the CPU that recorded the trace had no native bf16 arithmetic "
                      "that oneDNN uses (AVX512-BF16 or AMX, not capped by ONEDNN_MAX_CPU_ISA)");
  if (!b.from_steps) {
    std::string left_out;
    if (b.before_first_gpu_us > 0) {
      std::string which;
      for (const auto& n : b.stalls) which += (which.empty() ? "" : ", ") + ("`" + n.name + "` " + ms(n.total_us));
      left_out = " from " + ms(b.before_first_gpu_us) + " in: what came before is left out (" +
                 (which.empty() ? std::string("CUDA initialization and set-up before the first GPU work")
                                : "one-time set-up with the GPU idle: " + which +
                                      "; CUDA initialization, cuDNN's first calls, lazy loading") +
                 ")";
    }
    a.notes.push_back("no ProfilerStep#N spans in the trace: analyzed as one window" + left_out +
                      std::string(py ? "; call prof.step() once per training step, with schedule(wait=1, warmup=1, "
                                       "active=3), for a per-step split of steady-state steps"
                                     : ""));
  }
  if (!b.has_gpu) a.notes.push_back("CPU-only trace (no kernels, copies or CUDA runtime calls): GPU figures are null");
  if (v.rule != rule(RuleId::kSyncBound).name && b.has_gpu && sync_calls > 0 &&
      measure::fires(RuleId::kSyncBound, share(m.sync_us))) {
    a.notes.push_back("the host waited " + pct(share(m.sync_us)) + " of the step in syncs with the GPU busy meanwhile (" +
                      pct(sync) + " of the step idle after them): not a bottleneck here");
  }
  if (v.rule != rule(RuleId::kSyncBound).name && b.has_gpu && sync_calls > 0) {
    std::string which;
    for (const auto& s : b.syncs) {
      char per[32];
      std::snprintf(per, sizeof per, "%.3g", static_cast<double>(s.count) / static_cast<double>(b.steps.size()));
      which += (which.empty() ? "" : ", ") + ("`" + s.name + "` x" + per);
    }
    const std::string from = origins_text(b);
    a.notes.push_back("per-step host sync: " + which + " per step (" + ms(m.sync_us) + " per step here)" +
                      (from.empty() ? "" : "; " + from) + ": " + move(RuleId::kSyncBound));
  }
  if (measure::fires(RuleId::kZeroGrad, share(m.zero_grad_us))) {
    a.notes.push_back(pct(share(m.zero_grad_us)) + " of the step zeroing gradients (`aten::zero_` under "
                      "`Optimizer.zero_grad`): " + move(RuleId::kZeroGrad));
  }
  if (b.has_gpu && b.h2d.pageable > 0 && v.rule != rule(RuleId::kCopyBound).name) {
    a.notes.push_back(std::to_string(b.h2d.pageable) + " of " + std::to_string(b.h2d.count) +
                      " host-to-device copies from pageable memory: " +
                      (py ? "`pin_memory=True` and `.to(device, non_blocking=True)`" : "`loader.pin_memory`"));
  }
  if (b.layout_pct >= 5.0) {
    a.notes.push_back(pct(b.layout_pct) + " of kernel time converting between NCHW and NHWC: " +
                      (py ? "`model.to(memory_format=torch.channels_last)` and channels_last inputs"
                          : "`model.channels_last`"));
  }
  if (a.straggler && !a.straggler->text.empty()) a.notes.push_back(a.straggler->text);
  if (a.primary < a.throughput.size()) {
    const std::string line = throughput_note(a.throughput[a.primary]);
    if (!line.empty()) a.notes.push_back(line);
  }
  if (a.distributed && a.distributed->slowest != a.distributed->fastest) {
    const auto& d = *a.distributed;
    const auto& slow = a.ranks[d.slowest];
    const auto& fast = a.ranks[d.fastest];
    char line[256];
    std::snprintf(line, sizeof line, " is the slowest: %.1f ms per step against %.1f ms on ", slow.mean().ms(),
                  fast.mean().ms());
    a.notes.push_back(who(slow, d.slowest) + line + who(fast, d.fastest));
  }
}

Analysis analyze(const std::string& path, const AnalyzeOptions& opt) {
  const auto traces = read_traces(path);
  Analysis a;
  a.path = path;
  bool any_gpu = false;
  for (const auto& t : traces) any_gpu = any_gpu || t.has_gpu;
  if (opt.require_gpu && !any_gpu) {
    throw DataError("'" + path + "': a CPU-only trace (no kernels, copies or CUDA runtime calls); --gpu asks for GPU "
                    "figures: record it on a GPU with ProfilerActivity.CUDA");
  }
  // One process per rank: files with distributedInfo of a world of two or more are grouped by
  // rank; the others by their host process (several files of one process: its profiler
  // cycles, their steps concatenated; files of several processes: side by side, as ranks).
  std::map<std::pair<int, int64_t>, std::vector<const Trace*>> by_rank;
  for (const auto& t : traces) {
    const bool dist = t.world_size.value_or(1) > 1 && t.rank;
    by_rank[dist ? std::make_pair(0, *t.rank) : std::make_pair(1, t.host_pid)].push_back(&t);
  }
  for (const auto& [r, group] : by_rank) {
    a.ranks.push_back(break_down(group));
    if (r.first == 1 && by_rank.size() > 1) a.ranks.back().rank.reset();  // a process, not a rank
    a.throughput.push_back(throughput_of(group, a.ranks.back(), opt.cpu_ceilings));
  }
  for (size_t i = 1; i < a.ranks.size(); ++i)
    if (a.ranks[i].mean().end > a.ranks[a.primary].mean().end) a.primary = i;
  if (a.ranks.size() >= 2) {
    Distributed d;
    d.world_size = a.ranks.front().world_size.value_or(static_cast<int64_t>(a.ranks.size()));
    d.slowest = a.primary;
    for (size_t i = 1; i < a.ranks.size(); ++i)
      if (a.ranks[i].mean().end < a.ranks[d.fastest].mean().end) d.fastest = i;
    const auto m = a.ranks[a.primary].mean();
    d.comm_pct = m.end > 0 ? 100.0 * m.comm_us / m.end : 0;
    d.comm_overlap_pct = m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0;
    a.distributed = d;
    a.straggler = find_straggler(a);
  }
  advise(a);
  return a;
}

}  // namespace ptune::analyze
