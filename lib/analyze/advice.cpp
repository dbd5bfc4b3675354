#include "analyze/advice.hpp"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "core/errors.hpp"
#include "core/numbers.hpp"
#include "measure/rules.hpp"
#include "core/stats.hpp"

namespace ptune::analyze {
namespace {

using measure::rule;
using measure::RuleId;

std::string pct(double v) { return numbers::percent(v); }

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
  std::snprintf(buf, sizeof buf,
                "achieved %.3g GFLOP/s over the step (%.3g GFLOPs per step, %s, from the %s)",
                th.flops_per_s() / 1e9, th.flops / 1e9, th.precision.c_str(),
                th.source == "trace" ? "trace's FLOPs" : "input shapes");
  std::string s = buf;
  if (const auto pct = step_peak_pct(th)) {
    std::snprintf(buf, sizeof buf,
                  ": %.1f%% of the %.3g GFLOP/s its FLOPs would run at on their classes' ceilings", *pct,
                  th.step_ceiling / 1e9);
    s += buf + (" (" + ceilings_text(th) + ")");
  } else if (!th.step_over.empty()) {
    s += "; no % of peak: " + th.step_over;
  } else if (!th.no_ceilings.empty()) {
    s += "; no peak: " + th.no_ceilings;
  }
  return s;
}

/// The figures of the verdict's rank (the straggler the others wait for, else the slowest) that
/// the rules read: its mean step's shares, in % of the step.
struct Figures {
  explicit Figures(const Analysis& an)
      : a(an), b(an.ranks[an.primary]), py(b.writer != "ptune"), m(b.mean()), step(m.end > 0 ? m.end : 1) {
    loader = share(m.us[kDataLoader]);
    copies = share(m.us[kMemcpy]);
    // A host wait costs only the device time it leaves idle. A CPU-only trace has no host syncs
    // (an .item() there reads host memory: nothing to wait for).
    sync = share(m.sync_idle_us);
    for (const auto& s : b.steps) sync_calls += s.syncs;
    exposed_comm = share(m.comm_us - m.comm_overlap_us);
    busy = share(m.kernel_us);
    outside = share(m.us[kOther]);
    convolutions = std::any_of(b.all_operators.begin(), b.all_operators.end(), [](const NameTime& o) {
      return o.name.rfind("aten::conv", 0) == 0 || o.name.find("convolution") != std::string::npos;
    });
    // ptune's CPU trace of an fp32 row: optim.amp (bf16) is advised only where the CPU that
    // recorded it had native bf16 (as the sweep's diagnosis of the row says).
    ptune_fp32 = !py && b.amp == std::optional<std::string>("off");
    amp_advised = ptune_fp32 && (b.has_gpu || b.bf16_native != std::optional<bool>(false));
    const bool straggler = a.straggler && a.straggler->slow;
    rank = a.distributed ? "; " + b.who() + (straggler ? ", the straggler" : ", the slowest") : "";
  }
  double share(double us) const { return 100.0 * us / step; }
  /// The rule's next move for the trace's writer (PyTorch code or ptune config keys).
  std::string move(RuleId id) const { return py ? rule(id).python_move : rule(id).ptune_move; }
  /// `n` per step, "%.3g".
  std::string per_step(double n) const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", n / static_cast<double>(std::max<size_t>(b.steps.size(), 1)));
    return buf;
  }

  const Analysis& a;
  const Breakdown& b;
  const bool py;          // a Python (PyTorch) trace, not ptune's
  const StepBreakdown m;  // the mean step
  const double step;      // its length, us
  double loader = 0, copies = 0, sync = 0, exposed_comm = 0, busy = 0;  // % of the step
  double outside = 0;         // % of the step in no category: no operator, loader range or copy
  bool convolutions = false;  // an operator of the steps is a convolution (channels_last can help)
  int64_t sync_calls = 0;     // over the steps
  bool ptune_fp32 = false, amp_advised = false;
  std::string rank;  // "; rank R, the straggler" (or "the slowest") with several ranks
};

// --- The verdict rules (measure/rules.hpp's, tried in its order): when each fires, and what
// it says. ---

void input_bound(const Figures& f, Verdict& v) {
  const std::string name = f.b.dataloader.empty() ? "the data loader" : f.b.dataloader.front().name;
  v.evidence = pct(f.loader) + " of the step in `" + name + "`" + f.rank;
  if (f.py && !f.b.has_gpu) {
    // No device to copy to or normalize on: only more workers help.
    v.move =
        has(name, "_MultiProcessingDataLoaderIter")
            ? "the workers do not keep up: raise `num_workers` (`persistent_workers=True`), or make each "
              "sample cheaper to load"
            : (has(name, "_SingleProcessDataLoaderIter")
                   ? "the batches are loaded in the training process (num_workers=0): "
                   : "") +
                  std::string("`DataLoader(num_workers=N, persistent_workers=True)`");
  } else if (f.py && has(name, "_SingleProcessDataLoaderIter")) {
    v.move = "the batches are loaded in the training process (num_workers=0): " + f.move(RuleId::kInputBound);
  } else if (f.py && has(name, "_MultiProcessingDataLoaderIter")) {
    v.move =
        "the workers do not keep up: raise `num_workers` (and `pin_memory=True`), or ship uint8 batches and "
        "normalize on the GPU";
  } else {
    v.move = f.move(RuleId::kInputBound);
  }
}

void copy_bound(const Figures& f, Verdict& v) {
  const auto& b = f.b;
  v.evidence = pct(f.copies) + " of the step in copies not overlapped by kernels; " +
               std::to_string(b.h2d.count) + " host-to-device copies, " + std::to_string(b.h2d.pageable) +
               " from pageable memory" + f.rank;
  if (b.h2d.pageable > 0) {
    v.move = f.py ? "`pin_memory=True` in the DataLoader and `.to(device, non_blocking=True)`"
                  : "`loader.pin_memory`";
  } else {
    v.move = f.py ? "the copies are pinned already: ship uint8 batches and normalize on the GPU"
                  : "`loader.uint8_transfer`";
  }
}

void sync_bound(const Figures& f, Verdict& v) {
  std::string which;
  for (const auto& s : f.b.syncs) which += (which.empty() ? "" : ", ") + ("`" + s.name + "`");
  const std::string from = origins_text(f.b);
  v.evidence = pct(f.sync) + " of the step with the GPU idle after the host waited in " +
               (which.empty() ? "syncs" : which) + " (" + f.per_step(static_cast<double>(f.sync_calls)) +
               " per step; the host waited " + pct(f.share(f.m.sync_us)) + " of the step)" +
               (from.empty() ? "" : "; " + from) + f.rank;
  v.move = f.move(RuleId::kSyncBound);
}

void comm_bound(const Figures& f, Verdict& v) {
  const auto& m = f.m;
  v.evidence = pct(f.share(m.comm_us)) + " of the step in communication, " +
               pct(m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0) +
               " of it overlapped with compute" + f.rank;
  v.move = f.move(RuleId::kCommBound);
}

void launch_bound(const Figures& f, Verdict& v) {
  v.evidence = "GPU utilization " + pct(f.busy) + ": merged kernel time over the step; " +
               pct(f.share(f.m.us[kRuntime] + f.m.us[kCpuExec])) +
               " of it in host code and CUDA runtime calls" + f.rank;
  v.move = f.move(RuleId::kLaunchBound);
}

void host_bound(const Figures& f, Verdict& v) {
  v.evidence = pct(f.outside) + " of the step in no operator, loader range or copy; " +
               pct(f.share(f.m.us[kCpuExec])) + " in operators" + f.rank;
  v.move = f.move(RuleId::kHostBound);
}

/// The matrix classes' kernel time in `precision` and in all, per step.
std::pair<double, double> matrix_time(const Analysis& a, const std::string& precision) {
  double in = 0, all = 0;
  if (a.primary >= a.throughput.size()) return {0, 0};
  for (const auto& c : a.throughput[a.primary].classes) {
    if (c.name != "matmul" && c.name.rfind("convolution", 0) != 0) continue;
    for (const auto& [p, us] : c.us_by_precision) {
      all += us;
      if (p == precision) in += us;
    }
  }
  return {in, all};
}

bool fp32_fires(const Figures& f) {
  // A GPU trace tells fp32 by its kernels; ptune's traces also say the row's optim.amp (a
  // CPU trace has no kernels to tell by), as the sweep's diagnosis of the row does.
  return (f.b.has_gpu && f.b.half_pct && measure::fires(RuleId::kComputeFp32, *f.b.half_pct)) ||
         f.amp_advised;
}

void compute_fp32(const Figures& f, Verdict& v) {
  const auto& b = f.b;
  if (b.has_gpu && b.half_pct) {
    v.evidence = "GPU utilization " + pct(f.busy) + "; " + pct(*b.half_pct) +
                 " of kernel time in fp16/bf16 kernels, " + pct(b.tensor_core_pct.value_or(0)) +
                 " on Tensor Cores" + f.rank;
    // Matrix kernels already in TF32 have fp32's Tensor Core speed-up: only lower precisions remain.
    const auto [tf32, all] = matrix_time(f.a, "tf32");
    if (all > 0 && tf32 >= 0.5 * all)
      v.evidence += "; the matrix kernels run in TF32 (" + pct(100.0 * tf32 / all) + " of their time)";
  } else {
    v.evidence = pct(f.share(f.m.us[kCpuExec])) + " of the step in operators, `optim.amp` off" + f.rank;
  }
  v.move = f.move(RuleId::kComputeFp32);
  // On a CPU, bf16 is a hypothesis to measure, as the sweep's diagnosis says: oneDNN's bf16
  // kernels pay off with channels_last tensors and enough work per call.
  if (!b.has_gpu && !f.py)
    v.move =
        "`optim.amp` bf16 with `model.channels_last` (native bf16 pays off with channels_last tensors and "
        "enough work per call; at small images or batches bf16 can be slower than fp32: measure it)";
}

void compute(const Figures& f, Verdict& v) {
  const auto& b = f.b;
  if (b.has_gpu) {
    v.evidence = "GPU utilization " + pct(f.busy) + "; " + pct(b.tensor_core_pct.value_or(0)) +
                 " of kernel time on Tensor Cores" +
                 (b.kernels.empty() ? "" : "; largest kernel `" + b.kernels.front().name + "`") + f.rank;
  } else {
    v.rule += " on the CPU";
    v.evidence = pct(f.share(f.m.us[kCpuExec])) + " of the step in operators";
    if (!b.operators.empty()) {
      const double per_step = b.operators.front().self_us / static_cast<double>(b.steps.size());
      v.evidence +=
          "; largest by self time `" + b.operators.front().name + "` (" + pct(f.share(per_step)) + ")";
    }
    v.evidence += f.rank;
  }
  v.move = f.move(RuleId::kCompute);
  // channels_last changes how convolutions read their input: without one it does nothing.
  if (!f.convolutions && !b.all_operators.empty())
    v.move = f.py ? "`torch.compile(model)`" : "(no convolution in the step: channels_last would not help)";
}

/// A verdict rule: whether it fires on the figures, and what it says (it may add to the rule's name).
struct VerdictRule {
  RuleId id;
  bool (*fires)(const Figures&);
  void (*say)(const Figures&, Verdict&);
};

/// The verdict rules in the order they are tried; the last always fires.
const VerdictRule kVerdictRules[] = {
    {RuleId::kInputBound, [](const Figures& f) { return measure::fires(RuleId::kInputBound, f.loader); },
     input_bound},
    {RuleId::kCopyBound,
     [](const Figures& f) { return f.b.has_gpu && measure::fires(RuleId::kCopyBound, f.copies); },
     copy_bound},
    {RuleId::kSyncBound,
     [](const Figures& f) { return f.b.has_gpu && measure::fires(RuleId::kSyncBound, f.sync); }, sync_bound},
    {RuleId::kCommBound,
     [](const Figures& f) { return f.m.comm_us > 0 && measure::fires(RuleId::kCommBound, f.exposed_comm); },
     comm_bound},
    {RuleId::kLaunchBound,
     [](const Figures& f) { return f.b.has_gpu && measure::fires(RuleId::kLaunchBound, f.busy); },
     launch_bound},
    {RuleId::kHostBound,
     [](const Figures& f) { return !f.b.has_gpu && measure::fires(RuleId::kHostBound, f.outside); },
     host_bound},
    {RuleId::kComputeFp32, fp32_fires, compute_fp32},
    {RuleId::kCompute, [](const Figures&) { return true; }, compute},
};

// --- The further findings, each one note or "" for none. ---

std::string amp_not_advised(const Figures& f, const Verdict& v) {
  if (!(f.ptune_fp32 && !f.amp_advised && v.rule == rule(RuleId::kCompute).name + std::string(" on the CPU")))
    return "";
  return "`optim.amp` is not advised: the CPU that recorded the trace had no native bf16 arithmetic that "
         "oneDNN uses (AVX512-BF16 or AMX, not capped by ONEDNN_MAX_CPU_ISA)";
}

std::string no_steps(const Figures& f, const Verdict&) {
  const auto& b = f.b;
  if (b.from_steps) return "";
  std::string left_out;
  if (b.before_first_gpu_us > 0) {
    std::string which;
    for (const auto& n : b.stalls)
      which += (which.empty() ? "" : ", ") + ("`" + n.name + "` " + ms(n.total_us));
    left_out = " from " + ms(b.before_first_gpu_us) + " in: what came before is left out (" +
               (which.empty() ? std::string("CUDA initialization and set-up before the first GPU work")
                              : "one-time set-up with the GPU idle: " + which +
                                    "; CUDA initialization, cuDNN's first calls, lazy loading") +
               ")";
  }
  return "no ProfilerStep#N spans in the trace: analyzed as one window" + left_out +
         std::string(f.py ? "; call prof.step() once per training step, with schedule(wait=1, warmup=1, "
                            "active=3), for a per-step split of steady-state steps"
                          : "");
}

std::string cpu_only(const Figures& f, const Verdict&) {
  return f.b.has_gpu ? "" : "CPU-only trace (no kernels, copies or CUDA runtime calls): GPU figures are null";
}

std::string syncs_not_bottleneck(const Figures& f, const Verdict& v) {
  if (v.rule == rule(RuleId::kSyncBound).name || !f.b.has_gpu || f.sync_calls <= 0 ||
      !measure::fires(RuleId::kSyncBound, f.share(f.m.sync_us)))
    return "";
  return "the host waited " + pct(f.share(f.m.sync_us)) +
         " of the step in syncs with the GPU busy meanwhile (" + pct(f.sync) +
         " of the step idle after them): not a bottleneck here";
}

std::string per_step_syncs(const Figures& f, const Verdict& v) {
  const auto& b = f.b;
  if (v.rule == rule(RuleId::kSyncBound).name || !b.has_gpu || f.sync_calls <= 0) return "";
  std::string which;
  for (const auto& s : b.syncs) {
    char per[32];
    std::snprintf(per, sizeof per, "%.3g",
                  static_cast<double>(s.count) / static_cast<double>(b.steps.size()));
    which += (which.empty() ? "" : ", ") + ("`" + s.name + "` x" + per);
  }
  const std::string from = origins_text(b);
  return "per-step host sync: " + which + " per step (" + ms(f.m.sync_us) + " per step here)" +
         (from.empty() ? "" : "; " + from) + ": " + f.move(RuleId::kSyncBound);
}

std::string zero_grad(const Figures& f, const Verdict&) {
  if (!measure::fires(RuleId::kZeroGrad, f.share(f.m.zero_grad_us))) return "";
  return pct(f.share(f.m.zero_grad_us)) +
         " of the step zeroing gradients (`aten::zero_` under `Optimizer.zero_grad`): " +
         f.move(RuleId::kZeroGrad);
}

std::string pageable_copies(const Figures& f, const Verdict& v) {
  const auto& b = f.b;
  if (!b.has_gpu || b.h2d.pageable <= 0 || v.rule == rule(RuleId::kCopyBound).name) return "";
  return std::to_string(b.h2d.pageable) + " of " + std::to_string(b.h2d.count) +
         " host-to-device copies from pageable memory: " +
         (f.py ? "`pin_memory=True` and `.to(device, non_blocking=True)`" : "`loader.pin_memory`");
}

std::string layout_changes(const Figures& f, const Verdict&) {
  if (f.b.layout_pct < 5.0) return "";
  return pct(f.b.layout_pct) + " of kernel time converting between NCHW and NHWC: " +
         (f.py ? "`model.to(memory_format=torch.channels_last)` and channels_last inputs"
               : "`model.channels_last`");
}

std::string straggler(const Figures& f, const Verdict&) { return f.a.straggler ? f.a.straggler->text : ""; }

std::string throughput(const Figures& f, const Verdict&) {
  return f.a.primary < f.a.throughput.size() ? throughput_note(f.a.throughput[f.a.primary]) : "";
}

/// The slowest rank's step against the fastest's, where no rank is the straggler and they differ
/// by more than kStragglerPct of the step (ranks of one synchronous job step together: within
/// that, which is slowest is chance).
std::string slowest_rank(const Figures& f, const Verdict&) {
  const auto& a = f.a;
  if (!a.distributed || a.distributed->slowest == a.distributed->fastest) return "";
  if (a.straggler && a.straggler->slow) return "";
  const auto& slow = a.ranks[a.distributed->slowest];
  const auto& fast = a.ranks[a.distributed->fastest];
  if (slow.mean().ms() - fast.mean().ms() <= kStragglerPct / 100.0 * slow.mean().ms()) return "";
  char line[256];
  std::snprintf(line, sizeof line, " is the slowest: %.1f ms per step against %.1f ms on ", slow.mean().ms(),
                fast.mean().ms());
  return slow.who() + line + fast.who();
}

/// Refuses the processes of `by_rank` without a rank (no distributedInfo) that did not run at the
/// same time: separate runs of a program (a TensorBoard log folder that two runs wrote into),
/// which side by side would read as the ranks of one run. Throws DataError naming two of them.
void check_same_run(const std::string& path,
                    const std::map<std::pair<int, int64_t>, std::vector<const SpooledTrace*>>& by_rank) {
  struct Span {
    double lo = 1e300, hi = -1e300;
    std::string file;
  };
  std::vector<Span> spans;
  for (const auto& [key, group] : by_rank) {
    if (key.first != 1) continue;
    Span sp;
    sp.file = group.front()->meta().path;
    for (const SpooledTrace* t : group)
      sp.lo = std::min(sp.lo, t->meta().first_ts), sp.hi = std::max(sp.hi, t->meta().last_end);
    spans.push_back(sp);
  }
  for (size_t i = 0; i < spans.size(); ++i)
    for (size_t j = i + 1; j < spans.size(); ++j) {
      if (spans[i].hi > spans[j].lo && spans[j].hi > spans[i].lo) continue;
      throw DataError("'" + path + "': '" + spans[i].file + "' and '" + spans[j].file +
                      "' are traces of two processes that did not run at the same time and carry no rank "
                      "(distributedInfo): two separate runs, not the ranks of one; give each as its own "
                      "argument to compare them (ptune analyze A B)");
    }
}

using ByRank = std::map<std::pair<int, int64_t>, std::vector<const SpooledTrace*>>;

std::string rank_text(const Trace& t) {
  return "rank " + std::to_string(*t.rank) + " of " + std::to_string(*t.world_size);
}

/// Refuses a folder whose ranks are of two runs where the files say so: a rank recorded by two
/// processes, two world sizes, ranks beside processes without one. Throws DataError naming two of
/// the files.
void check_one_job(const std::string& path, const ByRank& by_rank) {
  const std::string two_runs =
      ": the traces of two runs, not the ranks of one; give each run's folder as its own argument to compare "
      "them (ptune analyze A B)";
  const Trace* first = nullptr;    // the first file with a rank
  const Trace* no_rank = nullptr;  // the first without
  for (const auto& [key, group] : by_rank) {
    if (key.first != 0) {
      no_rank = no_rank ? no_rank : &group.front()->meta();
      continue;
    }
    for (const SpooledTrace* t : group) {
      const Trace& m = t->meta();
      const Trace& g = group.front()->meta();
      if (m.host_pid != g.host_pid)
        throw DataError("'" + path + "': '" + g.path + "' and '" + m.path + "' are both " + rank_text(m) +
                        ", recorded by two processes (" + std::to_string(g.host_pid) + " and " +
                        std::to_string(m.host_pid) + ")" + two_runs);
    }
    const Trace& m = group.front()->meta();
    if (first && m.world_size != first->world_size)
      throw DataError("'" + path + "': '" + first->path + "' is " + rank_text(*first) + " and '" + m.path +
                      "' is " + rank_text(m) + two_runs);
    first = first ? first : &m;
  }
  if (first && no_rank)
    throw DataError("'" + path + "': '" + first->path + "' is " + rank_text(*first) + " and '" +
                    no_rank->path +
                    "' is not one of a world of 2 or more (distributedInfo): the traces of two runs, not the "
                    "ranks of one; "
                    "give each as its own argument to compare them (ptune analyze A B)");
}

/// Notes on a folder of ranks: ranks of the world that are not in it; ranks that did not run at
/// the same time (on one machine, two runs; across machines, clocks apart).
std::vector<std::string> ranks_notes(const ByRank& by_rank) {
  std::vector<std::string> notes;
  std::vector<const Trace*> ranks;
  double lo = -1e300, hi = 1e300;  // the span all ranks ran in
  for (const auto& [key, group] : by_rank) {
    if (key.first != 0) continue;
    ranks.push_back(&group.front()->meta());
    double first = 1e300, last = -1e300;
    for (const SpooledTrace* t : group)
      first = std::min(first, t->meta().first_ts), last = std::max(last, t->meta().last_end);
    lo = std::max(lo, first), hi = std::min(hi, last);
  }
  if (ranks.empty()) return notes;
  const int64_t world = *ranks.front()->world_size;
  if (static_cast<int64_t>(ranks.size()) < world)
    notes.push_back(std::to_string(ranks.size()) + " of the " + std::to_string(world) + " ranks " +
                    (ranks.size() == 1 ? "is" : "are") + " in the folder" +
                    (ranks.size() == 1 ? "" : ": the straggler and the slowest rank are among these"));
  if (ranks.size() >= 2 && hi <= lo) {
    char apart[64];
    std::snprintf(apart, sizeof apart, "%.1f s", (lo - hi) / 1e6);
    notes.push_back(std::string("the ranks' traces do not overlap in time (") + apart +
                    " apart): ranks of two runs, or of machines whose clocks differ; a straggler "
                    "found between them is not one");
  }
  return notes;
}

/// The first step, where it ran far longer than the others (a warm-up step the profiler's
/// schedule recorded): how much, and that the mean counts it.
std::string slow_first_step(const Figures& f, const Verdict&) {
  const auto& steps = f.b.steps;
  if (!f.b.from_steps || steps.size() < 4) return "";
  std::vector<double> rest;
  for (size_t i = 1; i < steps.size(); ++i) rest.push_back(steps[i].ms());
  const double median = stats::median(rest);
  if (!(median > 0) || steps.front().ms() < 1.5 * median) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf, " took %.1f ms, %.1fx the median of the other steps (%.1f ms)",
                steps.front().ms(), steps.front().ms() / median, median);
  return "`" + steps.front().name + "`" + buf + ": a warm-up step, counted in the mean step and the split" +
         (f.py ? "; `schedule(wait=1, warmup=1, active=N)` leaves such steps out of the trace" : "");
}

/// Plain fp32 (SIMT) matrix kernels on a GPU with TF32 Tensor Cores: the setting that moves them
/// there. A trace whose matrix kernels already run in TF32 is told nothing of it.
std::string fp32_matrix_kernels(const Figures& f, const Verdict&) {
  if (!f.b.has_gpu || f.b.devices.empty() || !system::known_gpu_peak(f.b.devices.front(), "tf32")) return "";
  const auto [fp32, all] = matrix_time(f.a, "fp32");
  if (all <= 0 || fp32 < 0.2 * all) return "";
  return pct(100.0 * fp32 / all) +
         " of the matrix kernels' time is in plain fp32 kernels (sgemm, SIMT), not " + "on Tensor Cores: " +
         (f.py ? "`torch.backends.cuda.matmul.allow_tf32 = True` (or "
                 "`torch.set_float32_matmul_precision(\"high\")`) "
                 "runs matrix products in TF32 there (cuDNN's convolutions already use TF32 by default)"
               : "TF32 runs them there");
}

/// Steps with nothing in them, left out: a profiler cycle's step cut short.
std::string empty_steps(const Figures& f, const Verdict&) {
  const auto& e = f.b.empty_steps;
  if (e.empty()) return "";
  std::string names;
  for (size_t i = 0; i < e.size() && i < 3; ++i) names += (i ? ", " : "") + std::string("`") + e[i] + "`";
  if (e.size() > 3) names += " and " + std::to_string(e.size() - 3) + " more";
  return names + (e.size() == 1 ? " was" : " were") +
         " left out: no operator, loader range, kernel, copy or sync in it (a step the profiler's cycle cut "
         "short: " +
         (f.py ? "`schedule(..., repeat=1)` ends the profiling after one cycle"
               : "a profiler cycle ended in it") +
         ")";
}

/// Events the reader left out: a negative duration, or a time beyond +-1e18 us.
std::string skipped_events(const Figures& f, const Verdict&) {
  if (f.b.skipped_events == 0) return "";
  return std::to_string(f.b.skipped_events) + (f.b.skipped_events == 1 ? " event was" : " events were") +
         " left out: a negative duration, or a time beyond 1e18 us (a damaged trace?)";
}

/// The further findings, in the order the notes are listed.
std::string (*const kNoteRules[])(const Figures&, const Verdict&) = {
    amp_not_advised,      no_steps,       cpu_only,
    syncs_not_bottleneck, per_step_syncs, zero_grad,
    pageable_copies,      layout_changes, straggler,
    throughput,           slowest_rank,   slow_first_step,
    empty_steps,          skipped_events, fp32_matrix_kernels,
};

}  // namespace

void advise(Analysis& a) {
  const Figures f(a);
  Verdict& v = a.verdict;
  v = {};
  a.notes.clear();
  for (const auto& r : kVerdictRules) {
    if (!r.fires(f)) continue;
    v.rule = rule(r.id).name;
    r.say(f, v);
    break;
  }
  for (const auto& note : kNoteRules) {
    std::string line = note(f, v);
    if (!line.empty()) a.notes.push_back(std::move(line));
  }
  a.notes.insert(a.notes.end(), a.folder_notes.begin(), a.folder_notes.end());
}

namespace {

/// One process's files taken apart, each file whole or part by part: its breakdown and FLOPs.
void add_rank(const std::vector<const SpooledTrace*>& files, const AnalyzeOptions& opt, Analysis& a) {
  bool device_memory = false, has_gpu = false;
  size_t steps = 0;
  for (const SpooledTrace* f : files) {
    device_memory = device_memory || f->meta().device_memory;
    has_gpu = has_gpu || f->meta().has_gpu;
    steps += static_cast<size_t>(std::max<int64_t>(f->meta().step_count, 1));
  }
  BreakdownBuilder breakdown(device_memory);
  ThroughputBuilder flops(steps, has_gpu);
  for (const SpooledTrace* f : files)
    f->for_each_part(opt.part_bytes, [&](const Trace& part) {
      const auto own = breakdown.add(part);
      flops.add(part, breakdown.steps(), own);
    });
  a.ranks.push_back(breakdown.finish());
  const Breakdown& b = a.ranks.back();
  if (b.only_empty_steps) {
    throw DataError("'" + files.front()->meta().path + "': " +
                    (b.steps.size() == 1
                         ? "its only step, `" + b.steps.front().name + "`, holds no"
                         : "none of its " + std::to_string(b.steps.size()) + " steps holds an") +
                    " operator, loader range, kernel, copy or sync: nothing to analyze (a profiler cycle "
                    "cut short: with a schedule, `repeat=1` ends the profiling after one cycle, and a trace "
                    "written to one file name per cycle is overwritten by the next)");
  }
  a.throughput.push_back(flops.finish(a.ranks.back(), opt.cpu_ceilings));
}

/// Refuses a CPU-only set of traces where --gpu asks for GPU figures.
void check_gpu(const std::string& path, const std::vector<SpooledTrace>& traces) {
  for (const auto& t : traces)
    if (t.meta().has_gpu) return;
  throw DataError("'" + path +
                  "': a CPU-only trace (no kernels, copies or CUDA runtime calls); --gpu asks for GPU "
                  "figures: record it on a GPU with ProfilerActivity.CUDA");
}

/// One process per rank: files with distributedInfo of a world of two or more are grouped by
/// rank; the others by their host process (several files of one process: its profiler
/// cycles, their steps concatenated; files of several processes: side by side, as ranks).
ByRank group_by_rank(const std::vector<SpooledTrace>& traces) {
  ByRank by_rank;
  for (const auto& t : traces) {
    const Trace& m = t.meta();
    const bool dist = m.world_size.value_or(1) > 1 && m.rank;
    by_rank[dist ? std::make_pair(0, *m.rank) : std::make_pair(1, m.host_pid)].push_back(&t);
  }
  return by_rank;
}

/// The index of the rank whose mean step ends `better` than every other's (the first of those):
/// std::greater, the one that ends last; std::less, the one that ends first.
template <typename Better>
size_t rank_by_step_end(const Analysis& a, Better better) {
  size_t at = 0;
  for (size_t i = 1; i < a.ranks.size(); ++i)
    if (better(a.ranks[i].mean().end, a.ranks[at].mean().end)) at = i;
  return at;
}

/// The figures of a job of two or more ranks, and its straggler; the rank the others wait for
/// becomes the primary one.
void add_distributed(Analysis& a) {
  Distributed d;
  d.world_size = a.ranks.front().world_size.value_or(static_cast<int64_t>(a.ranks.size()));
  d.slowest = a.primary;
  d.fastest = rank_by_step_end(a, std::less<>());
  const auto m = a.ranks[a.primary].mean();
  d.comm_pct = m.end > 0 ? 100.0 * m.comm_us / m.end : 0;
  d.comm_overlap_pct = m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0;
  a.distributed = d;
  a.straggler = find_straggler(a);
  // The ranks of a synchronous job take one step time; the one the others wait for is where
  // the time goes, and its figures are the verdict's.
  if (a.straggler->slow) a.primary = a.straggler->ranks[*a.straggler->slow].index;
}

}  // namespace

Analysis analyze(const std::string& path, const AnalyzeOptions& opt) {
  // A single file's events stay in memory when they fit in a part; a folder's go to disk as each
  // file is read (its ranks are taken apart one at a time).
  const auto files = trace_files(path);
  std::vector<SpooledTrace> traces;
  for (const auto& f : files) traces.emplace_back(f, files.size() == 1 ? opt.part_bytes : 0);
  Analysis a;
  a.path = path;
  if (opt.require_gpu) check_gpu(path, traces);
  // Each rank is read back and taken apart in turn: one rank's events in memory at a time.
  const ByRank by_rank = group_by_rank(traces);
  check_same_run(path, by_rank);
  check_one_job(path, by_rank);
  if (std::filesystem::is_directory(path)) a.folder_notes = ranks_notes(by_rank);
  for (const auto& [r, group] : by_rank) {
    add_rank(group, opt, a);
    if (r.first == 1 && by_rank.size() > 1) a.ranks.back().rank.reset();  // a process, not a rank
  }
  a.primary = rank_by_step_end(a, std::greater<>());
  if (a.ranks.size() >= 2) add_distributed(a);
  advise(a);
  return a;
}

}  // namespace ptune::analyze
