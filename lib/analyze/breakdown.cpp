#include "analyze/breakdown.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "analyze/correlations.hpp"
#include "analyze/events.hpp"
#include "analyze/intervals.hpp"
#include "analyze/name_times.hpp"
#include "analyze/origins.hpp"
#include "analyze/step_windows.hpp"

namespace ptune::analyze {
namespace {

// --- break_down's stages, per trace: the categories, the device work, the steps, the
// operators, the allocations, the batch; then the lists over all the traces. ---

/// What a BreakdownBuilder sums over the traces of a process before it makes the lists.
struct Totals {
  NameTimes kernels, operators, loaders, syncs, copies;
  std::map<std::string, NameBytes, std::less<>> allocators;
  Origins origins;
  double kernel_total = 0, tc = 0, half = 0, layout = 0;  // kernel time in the steps, and on Tensor
                                                          // Cores, in fp16/bf16, in layout changes
  int timeline_gpu = -1;     // the memory timeline's device: 1 a GPU, 0 the host, -1 none yet
  double timeline_peak = 0;  // and its peak, bytes
};

/// What is carried from one part of a file to the next (Trace::part), and summed over the file.
struct FileState {
  double prev_end = -1e300;                     // the end of the last step window so far
  double lo = -1e300;                           // the start of the file's first window
  std::set<int64_t> streams, pids;              // device streams with kernels; processes with host operators
  double dev_first = 1e300, dev_last = -1e300;  // device work in the steps' span
  double hta_first = 1e300, hta_last = -1e300;  // the device work HTA keeps
  NameTimes hta_names;                          // its kernels
};

/// One trace's time ranges, merged, that the steps' figures are read from.
struct TraceRanges {
  std::array<Ranges, kCategories> cat;   // each category's (before the priority split)
  Ranges all_kernels;                    // every kernel
  Ranges compute;                        // computation: kernels other than communication, or
                                         // host operators on a CPU-only trace
  Ranges sync_ranges;                    // the host syncs
  Ranges zero_windows;                   // Optimizer.zero_grad
  Ranges device;                         // device work: kernels, copies, memsets
  std::vector<double> device_starts;     // its starts, sorted
  Ranges comp_kernels;                   // kernels other than communication
  Ranges zeroing;                        // aten::zero_ / aten::fill_ under Optimizer.zero_grad
  Ranges overlap;                        // communication overlapped with computation
  Ranges sync_idle;                      // the device idle that the syncs caused
  std::vector<const Event*> sync_calls;  // the host syncs in the steps, and their names
  std::vector<std::string> sync_names;
};

/// The categories: sorts one trace's events into the categories' ranges (TraceRanges::cat and
/// the others before they are merged), and adds those inside the steps' span [lo, hi) to the
/// totals (kernels, copies, data loader, syncs) and `b`'s host-to-device copies.
class Categorizer {
 public:
  Categorizer(const Trace& t, const Waits& waits, double lo, double hi, Breakdown& b, Totals& tot,
              TraceRanges& r)
      : t_(t), waits_(waits), lo_(lo), hi_(hi), b_(b), tot_(tot), r_(r), comm_kernels_(t.comm_kernels) {}

  void run() {
    for (const auto& e : t_.events) {
      switch (e.kind) {
        case Kind::kKernel:
          kernel(e);
          break;
        case Kind::kMemcpy:
          copy(e);
          break;
        case Kind::kMemset:
          r_.cat[kMemset].emplace_back(e.ts, e.end());
          if (inside(e)) add_time(tot_.copies, e.name, e.dur, e.dur);
          break;
        case Kind::kRuntime:
          runtime(e);
          break;
        case Kind::kCpuOp:
        case Kind::kAnnotation:
          host(e);
          break;
        case Kind::kOther:
          break;
      }
    }
  }

 private:
  bool inside(const Event& e) const { return e.ts >= lo_ && e.ts < hi_; }

  void kernel(const Event& e) {
    const std::pair<double, double> r{e.ts, e.end()};
    r_.all_kernels.push_back(r);
    if (is_communication(e))
      r_.cat[kCommunication].push_back(r);
    else
      r_.cat[kKernel].push_back(r), r_.compute.push_back(r);
    if (!inside(e)) return;
    add_time(tot_.kernels, e.name, e.dur, e.dur);
    tot_.kernel_total += e.dur;
    if (e.traits & trait::kTensorCore) tot_.tc += e.dur;
    if (e.traits & trait::kHalf) tot_.half += e.dur;
    if (e.traits & trait::kLayout) tot_.layout += e.dur;
  }

  void copy(const Event& e) {
    r_.cat[kMemcpy].emplace_back(e.ts, e.end());
    if (inside(e)) add_time(tot_.copies, e.name, e.dur, e.dur);
    if (!inside(e) || !text::contains(e.name, "HtoD")) return;
    CopyStats& h2d = b_.h2d;
    ++h2d.count;
    h2d.us += e.dur;
    if (e.bytes > 0)  // saturates: a hostile trace's sizes may add up past int64
      h2d.bytes = e.bytes > INT64_MAX - h2d.bytes ? INT64_MAX : h2d.bytes + e.bytes;
    if (text::contains(e.name, "Pinned")) ++h2d.pinned;
    if (text::contains(e.name, "Pageable")) ++h2d.pageable;
  }

  void runtime(const Event& e) {
    r_.cat[kRuntime].emplace_back(e.ts, e.end());
    if (waits_.is_wait(e)) sync(e, e.name);
  }

  void host(const Event& e) {
    if (is_step(e)) return;
    const std::pair<double, double> r{e.ts, e.end()};
    if (is_dataloader(e)) {
      r_.cat[kDataLoader].push_back(r);
      if (inside(e)) add_time(tot_.loaders, e.name, e.dur, e.dur);
    } else if (is_communication(e)) {
      if (!comm_kernels_)
        r_.cat[kCommunication].push_back(r);
      else
        r_.cat[kCpuExec].push_back(r);
    } else if (e.kind == Kind::kCpuOp) {
      // Operators only: a user annotation (record_function) or a Python frame (with_stack=True)
      // spans whatever runs inside it, idle time and Python code between operators included.
      r_.cat[kCpuExec].push_back(r);
      if (!t_.has_gpu) r_.compute.push_back(r);
    }
    if (waits_.is_sync(e)) sync(e, e.name == "aten::_local_scalar_dense" ? "aten::item" : e.name);
    if (e.traits & trait::kZeroGrad) r_.zero_windows.push_back(r);
  }

  /// A host sync `e`, named `name`.
  void sync(const Event& e, std::string_view name) {
    r_.sync_ranges.emplace_back(e.ts, e.end());
    if (!inside(e)) return;
    add_time(tot_.syncs, name, e.dur, e.dur);
    r_.sync_calls.push_back(&e);
    r_.sync_names.emplace_back(name);
  }

  const Trace& t_;
  const Waits& waits_;
  const double lo_, hi_;
  Breakdown& b_;
  Totals& tot_;
  TraceRanges& r_;
  const bool comm_kernels_;  // communication runs as kernels: host collectives only launch them
};

/// The device work: its ranges and starts, the computation kernels', the streams and CUDA graphs
/// (into `b`); then merges every range of `r` and derives the zeroing and the overlap.
void merge_ranges(const Trace& t, Breakdown& b, TraceRanges& r, FileState& f) {
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    r.device.emplace_back(e.ts, e.end());
    r.device_starts.push_back(e.ts);
    if (e.kind == Kind::kKernel) {
      f.streams.insert(e.tid);
      if (!is_communication(e)) r.comp_kernels.emplace_back(e.ts, e.end());
    }
  }
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && (e.traits & trait::kGraphLaunch)) b.cuda_graphs = true;
  r.device = merge(std::move(r.device));
  r.comp_kernels = merge(std::move(r.comp_kernels));
  std::sort(r.device_starts.begin(), r.device_starts.end());
  for (auto& c : r.cat) c = merge(std::move(c));
  r.all_kernels = merge(std::move(r.all_kernels));
  r.compute = merge(std::move(r.compute));
  r.sync_ranges = merge(std::move(r.sync_ranges));
  r.zero_windows = merge(std::move(r.zero_windows));
  for (const auto& e : t.events)
    if (e.kind == Kind::kCpuOp && (e.traits & trait::kZeroFill) &&
        !clip(r.zero_windows, e.ts, e.end()).empty())
      r.zeroing.emplace_back(e.ts, e.end());
  r.zeroing = merge(std::move(r.zeroing));
  r.overlap = intersect(r.cat[kCommunication], r.compute);
}

/// What a sync costs: the device idle from the sync's start until the first device work after
/// it returns (its queue drained, the device waits for the host to launch again). A wait for a
/// device that stays busy costs nothing. Merged; empty without a GPU.
Ranges idle_after_syncs(bool has_gpu, const TraceRanges& r) {
  Ranges idle;
  if (!has_gpu) return idle;
  for (const auto& [s0, s1] : r.sync_ranges) {
    // A wait on an idle device (nothing ran while the host waited) did not drain its queue:
    // the idle that follows is the host's slowness, not the sync's.
    if (total(clip(r.device, s0, s1)) <= 0) continue;
    auto it = std::lower_bound(r.device_starts.begin(), r.device_starts.end(), s1);
    const double next = it == r.device_starts.end() ? s1 : *it;
    for (const auto& x : subtract(Ranges{{s0, next}}, r.device)) idle.push_back(x);
  }
  return merge(std::move(idle));
}

/// Adds the device time of the steps' span [lo, hi) (HTA's temporal breakdown) to `b`; the span's
/// ends to `f`.
void add_device_span(const TraceRanges& r, double lo, double hi, Breakdown& b, FileState& f) {
  const Ranges d = clip(r.device, lo, hi);
  if (d.empty()) return;
  f.dev_first = std::min(f.dev_first, d.front().first);
  f.dev_last = std::max(f.dev_last, d.back().second);
  b.gpu_busy_total_us += total(d);
  b.gpu_compute_total_us += total(clip(r.comp_kernels, lo, hi));
}

/// Adds HTA's view of the trace's device work (Breakdown::HtaView) in the part's own time to
/// `b.hta`, its span's ends and kernels to `f`.
void add_hta_view(const Trace& t, Breakdown& b, FileState& f) {
  std::vector<std::pair<int64_t, double>> calls;  // correlation -> launch time (the first)
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.correlation >= 0) calls.emplace_back(e.correlation, e.ts);
  const ByCorrelation<double> launched(std::move(calls), [](double&, const double&) {});
  const bool all = t.step_names < 2;
  Ranges busy, comp, comm;
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    if (!all) {
      const double* at = e.correlation < 0 ? nullptr : launched.find(e.correlation);
      if (!at || *at > t.last_step_end) continue;
    }
    busy.emplace_back(e.ts, e.end());
    if (t.part.own(e.ts)) add_time(f.hta_names, e.name, e.dur, e.dur);
    if (e.kind != Kind::kKernel) continue;
    const bool nccl = e.traits & trait::kHtaComm;
    if (nccl)
      comm.emplace_back(e.ts, e.end());
    else if (!(e.traits & trait::kHtaNotCompute))
      comp.emplace_back(e.ts, e.end());
  }
  const double from = t.part.from, to = t.part.to;
  busy = clip(merge(std::move(busy)), from, to);
  comp = clip(merge(std::move(comp)), from, to);
  comm = clip(merge(std::move(comm)), from, to);
  if (!busy.empty()) {
    f.hta_first = std::min(f.hta_first, busy.front().first);
    f.hta_last = std::max(f.hta_last, busy.back().second);
    b.hta.busy_us += total(busy);
    b.hta.compute_us += total(comp);
    b.hta.comm_us += total(comm);
    b.hta.overlap_us += total(intersect(comm, comp));
  }
}

/// The steps: each step's split by category in priority order, its merged times, its peak
/// device memory and its sync calls.
void fill_steps(const Trace& t, const Waits& waits, const TraceRanges& r, std::vector<StepBreakdown>& steps) {
  // The start of every sync call, sorted: a step's count is a range of them (a loop over the
  // events per step would be steps x events, hours on a hostile trace of many tiny steps).
  std::vector<double> sync_starts;
  for (const auto& e : t.events)
    if (waits.is_sync(e)) sync_starts.push_back(e.ts);
  std::sort(sync_starts.begin(), sync_starts.end());
  // The device memory samples in time order, for each step's peak.
  std::vector<const MemorySample*> device_memory;
  for (const auto& m : t.memory)
    if (m.device >= 0) device_memory.push_back(&m);
  std::sort(device_memory.begin(), device_memory.end(),
            [](const MemorySample* a, const MemorySample* c) { return a->ts < c->ts; });
  auto memory_at = [&](double ts) {
    return std::lower_bound(device_memory.begin(), device_memory.end(), ts,
                            [](const MemorySample* m, double v) { return m->ts < v; });
  };

  for (auto& s : steps) {
    Ranges slots{{s.start, s.end}};
    for (int c = 0; c < kOther; ++c) {
      const Ranges got = intersect(slots, clip(r.cat[c], s.start, s.end));
      s.us[c] = total(got);
      slots = subtract(slots, got);
    }
    s.us[kOther] = total(slots);
    s.kernel_us = total(clip(r.all_kernels, s.start, s.end));
    s.comm_us = total(clip(r.cat[kCommunication], s.start, s.end));
    s.comm_overlap_us = total(clip(r.overlap, s.start, s.end));
    s.sync_us = total(clip(r.sync_ranges, s.start, s.end));
    s.sync_idle_us = total(clip(r.sync_idle, s.start, s.end));
    s.gpu_busy_us = total(clip(r.device, s.start, s.end));
    s.compute_us = total(clip(r.comp_kernels, s.start, s.end));
    double alloc = -1, reserved = -1;
    for (auto it = memory_at(s.start), end = memory_at(s.end); it != end; ++it)
      alloc = std::max<double>(alloc, (*it)->allocated),
      reserved = std::max<double>(reserved, (*it)->reserved);
    if (alloc >= 0) s.peak_allocated_mb = alloc / (1024.0 * 1024.0);
    if (reserved >= 0) s.peak_reserved_mb = reserved / (1024.0 * 1024.0);
    s.zero_grad_us = total(clip(r.zeroing, s.start, s.end));
    s.syncs = std::lower_bound(sync_starts.begin(), sync_starts.end(), s.host_end) -
              std::lower_bound(sync_starts.begin(), sync_starts.end(), s.host_start);
  }
}

using Thread = std::pair<int64_t, int64_t>;  // pid, tid

/// The operators: host operators' self time in [lo, hi), per thread, minus the time of the
/// operators directly inside, added to `operators`; the operators of [from, to) are nested, those
/// of [lo, hi) counted (a part's neighbours hold the operators around its own). Returns each
/// thread's outermost operators, in time order.
std::map<Thread, std::vector<const Event*>> add_operators(const Trace& t, double from, double to, double lo,
                                                          double hi, NameTimes& operators) {
  std::map<Thread, std::vector<const Event*>> threads, outermost;
  for (const auto& e : t.events)
    // ProfilerStep#N and the DataLoader's ranges (cat "Operator" in the 2021 schema) are not
    // operators: the steps and the data loader have their own figures.
    if (e.kind == Kind::kCpuOp && e.ts >= from && e.ts < to && !is_step(e) && !is_dataloader(e))
      threads[{e.pid, e.tid}].push_back(&e);
  for (auto& [key, ops] : threads) {
    sort_runs(ops.begin(), ops.end(), nests_before);
    std::vector<std::pair<const Event*, double>> stack;  // op, time of its direct children
    auto pop = [&]() {
      auto [op, children] = stack.back();
      stack.pop_back();
      if (op->ts >= lo && op->ts < hi)
        add_time(operators, op->name, op->dur, std::max(0.0, op->dur - children));
      if (!stack.empty()) stack.back().second += op->dur;
    };
    for (const Event* e : ops) {
      // An op is a child of the one on top when it lies inside it; one that starts inside but
      // ends after it (not well nested: another thread's op recorded on this tid) is not.
      while (!stack.empty() && (e->ts >= stack.back().first->end() || e->end() > stack.back().first->end()))
        pop();
      if (stack.empty()) outermost[key].push_back(e);  // in time order, not overlapping
      stack.emplace_back(e, 0.0);
    }
    while (!stack.empty()) pop();
  }
  return outermost;
}

/// The allocations: those of the device (`gpu`) or the host in [lo, hi), each charged to the
/// outermost operator on its thread, added to `allocators`.
/// The outermost operator on the thread of memory sample `m` at its time: the one the code called.
std::string_view operator_at(const std::map<Thread, std::vector<const Event*>>& outermost,
                             const MemorySample& m) {
  if (auto it = outermost.find({m.pid, m.tid}); it != outermost.end()) {
    const auto& ops = it->second;
    auto after =
        std::upper_bound(ops.begin(), ops.end(), m.ts, [](double ts, const Event* e) { return ts < e->ts; });
    if (after != ops.begin() && m.ts <= (*std::prev(after))->end()) return (*std::prev(after))->name;
  }
  return "(no operator)";
}

void add_allocations(const Trace& t, const std::map<Thread, std::vector<const Event*>>& outermost, double lo,
                     double hi, bool gpu, std::map<std::string, NameBytes, std::less<>>& allocators) {
  for (const auto& m : t.memory) {
    if (m.bytes <= 0 || (m.device >= 0) != gpu || m.ts < lo || m.ts >= hi) continue;
    const std::string_view name = operator_at(outermost, m);
    auto& a = allocators[std::string(name)];
    a.name = name;
    ++a.count;
    a.bytes += static_cast<double>(m.bytes);
  }
}

/// A device's highest sample of allocated memory in the steps, and the step it fell in.
struct DeviceTop {
  const MemorySample* sample;
  const StepBreakdown* step;
};

constexpr double kMb = 1024.0 * 1024.0;

/// Each device's highest sample of allocated memory that falls in one of `steps` (the host's too,
/// device -1: a CPU trace's memory).
std::map<int64_t, DeviceTop> highest_per_device(const Trace& t, const std::vector<StepBreakdown>& steps) {
  std::map<int64_t, DeviceTop> top;
  for (const auto& m : t.memory) {
    if (m.allocated < 0) continue;
    const auto s = std::find_if(steps.begin(), steps.end(),
                                [&](const StepBreakdown& x) { return m.ts >= x.start && m.ts < x.end; });
    if (s == steps.end()) continue;
    const auto it = top.find(m.device);
    if (it == top.end() || m.allocated > it->second.sample->allocated) top[m.device] = {&m, &*s};
  }
  return top;
}

/// Keeps `p` as its device's peak, where it is the first or above the one kept.
void keep_peak(std::vector<MemoryPeak>& peaks, const MemoryPeak& p) {
  auto it =
      std::find_if(peaks.begin(), peaks.end(), [&](const MemoryPeak& x) { return x.device == p.device; });
  if (it == peaks.end())
    peaks.push_back(p);
  else if (p.allocated_mb > it->allocated_mb)
    *it = p;
}

/// Whether sample `m` is the timeline's rather than `than`: a GPU's before the host's, then the
/// higher (any is, against none).
bool timeline_rather(const MemorySample& m, const MemorySample* than) {
  if (!than) return true;
  const bool gpu = m.device >= 0, than_gpu = than->device >= 0;
  return gpu != than_gpu ? gpu : m.allocated > than->allocated;
}

/// Whether the timeline of `highest` replaces the one of an earlier trace (a GPU's replaces the
/// host's, then the higher peak); noted in `tot` when it does.
bool take_timeline(const MemorySample& highest, Totals& tot) {
  const int gpu = highest.device >= 0 ? 1 : 0;
  if (gpu < tot.timeline_gpu ||
      (gpu == tot.timeline_gpu && static_cast<double>(highest.allocated) <= tot.timeline_peak))
    return false;
  tot.timeline_gpu = gpu;
  tot.timeline_peak = static_cast<double>(highest.allocated);
  return true;
}

/// The timeline of allocated memory over step `s` on `highest`'s device, thinned to at most
/// 400 points with the peak kept: (ms from the step's start, MB).
std::vector<std::pair<double, double>> memory_timeline(const Trace& t, const MemorySample& highest,
                                                       const StepBreakdown& s) {
  std::vector<const MemorySample*> in;
  for (const auto& m : t.memory)
    if (m.device == highest.device && m.allocated >= 0 && m.ts >= s.start && m.ts < s.end) in.push_back(&m);
  std::sort(in.begin(), in.end(), [](const MemorySample* x, const MemorySample* y) { return x->ts < y->ts; });
  const size_t every = in.size() / 400 + 1;
  std::vector<std::pair<double, double>> timeline;
  for (size_t i = 0; i < in.size(); ++i)
    if (i % every == 0 || in[i] == &highest)
      timeline.emplace_back((in[i]->ts - s.start) / 1000.0, static_cast<double>(in[i]->allocated) / kMb);
  return timeline;
}

/// Each device's highest allocated memory in `steps` (kept where above an earlier trace's), the
/// operator at it, and the timeline of allocated memory over the step of the highest of all.
void add_memory_peaks(const Trace& t, const std::map<Thread, std::vector<const Event*>>& outermost,
                      const std::vector<StepBreakdown>& steps, Breakdown& b, Totals& tot) {
  const std::map<int64_t, DeviceTop> top = highest_per_device(t, steps);
  const DeviceTop* highest = nullptr;
  for (const auto& [device, at] : top) {
    const MemorySample& m = *at.sample;
    MemoryPeak p{device,        static_cast<double>(m.allocated) / kMb,
                 std::nullopt,  std::string(operator_at(outermost, m)),
                 at.step->name, (m.ts - at.step->start) / 1000.0};
    if (m.reserved >= 0) p.reserved_mb = static_cast<double>(m.reserved) / kMb;
    keep_peak(b.memory_peaks, p);
    if (timeline_rather(m, highest ? highest->sample : nullptr)) highest = &at;
  }
  std::sort(b.memory_peaks.begin(), b.memory_peaks.end(),
            [](const MemoryPeak& x, const MemoryPeak& y) { return x.device < y.device; });
  // The timeline is of the highest GPU peak of all the traces (the host's without one).
  if (highest && take_timeline(*highest->sample, tot))
    b.memory_timeline = memory_timeline(t, *highest->sample, *highest->step);
}

/// The batch: the first dimension of the first input of step `s0`'s first operator that takes
/// the batch (a copy to the device, a convolution, a linear layer, an embedding), outside the
/// data loader's ranges `loader_ranges`; nullopt when none does.
std::optional<int64_t> batch_size_of(const Trace& t, const Ranges& loader_ranges, const StepBreakdown& s0) {
  Ranges loader = clip(loader_ranges, s0.start, s0.end);
  std::vector<const Event*> ops;
  for (const auto& e : t.events)
    if (e.kind == Kind::kCpuOp && e.batch > 0 && e.ts >= s0.start && e.ts < s0.end &&
        clip(loader, e.ts, e.ts + 1e-9).empty())
      ops.push_back(&e);
  // Ties in file order: the same operator first whichever operators the step holds.
  std::stable_sort(ops.begin(), ops.end(), [](const Event* a, const Event* c) { return a->ts < c->ts; });
  for (const Event* e : ops) {
    // aten::embedding(weight, indices): Event::batch is the indices' first dimension.
    if (e->name == "aten::embedding") return e->batch;
    if (e->name == "aten::to" || e->name == "aten::_to_copy" || e->name == "aten::copy_" ||
        text::starts_with(e->name, "aten::conv") || e->name == "aten::linear" ||
        e->name == "aten::cudnn_convolution")
      return e->batch;
  }
  return std::nullopt;
}

/// What the trace says about itself (file, writer, rank, devices), into `b`.
void take_metadata(const Trace& t, Breakdown& b) {
  b.files.push_back(t.path);
  b.host_pid = t.host_pid;
  b.skipped_events += t.skipped;
  b.writer = t.writer;
  if (t.amp) b.amp = t.amp;
  if (t.bf16_native) b.bf16_native = t.bf16_native;
  b.rank = t.rank;
  b.world_size = t.world_size;
  b.has_gpu = b.has_gpu || t.has_gpu;
  if (b.devices.empty()) b.devices = t.devices;
  if (t.schema_version) b.schema_version = t.schema_version;
  if (t.under_load && !b.under_load) b.under_load = true, b.load_summary = t.load_summary;
}

/// The figures of a whole file, once its last part is in: its spans, streams and processes.
void end_file(FileState& f, Breakdown& b) {
  b.streams = std::max<int64_t>(b.streams, static_cast<int64_t>(f.streams.size()));
  b.processes = std::max<int64_t>(b.processes, static_cast<int64_t>(f.pids.size()));
  if (f.dev_first <= f.dev_last) b.gpu_span_us += f.dev_last - f.dev_first;
  if (f.hta_first <= f.hta_last) b.hta.span_us += f.hta_last - f.hta_first;
  for (const auto& n : top_times(f.hta_names, false, 20)) b.hta.kernels.push_back(n);
}

/// The lists over all the traces: the largest kernels, operators, allocators, copies, data
/// loader ranges and syncs, and the kernel-time shares.
void make_lists(const Totals& tot, Breakdown& b) {
  b.sync_origins = tot.origins.list();
  b.kernels = top_times(tot.kernels, false, kTopN);
  b.operators = top_times(tot.operators, true, kTopN);
  for (const auto& [name, a] : tot.allocators) b.allocators.push_back(a);
  std::sort(b.allocators.begin(), b.allocators.end(), [](const NameBytes& x, const NameBytes& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.name < y.name;
  });
  if (b.allocators.size() > kTopN) b.allocators.resize(kTopN);
  b.all_kernels = top_times(tot.kernels, false, SIZE_MAX);
  b.all_operators = top_times(tot.operators, true, SIZE_MAX);
  b.copies = top_times(tot.copies, false, SIZE_MAX);
  b.dataloader = top_times(tot.loaders, false, kTopN);
  b.syncs = top_times(tot.syncs, false, kTopN);
  if (b.has_gpu && tot.kernel_total > 0) {
    b.tensor_core_pct = 100.0 * tot.tc / tot.kernel_total;
    b.half_pct = 100.0 * tot.half / tot.kernel_total;
    b.layout_pct = 100.0 * tot.layout / tot.kernel_total;
  } else if (b.has_gpu) {
    b.tensor_core_pct = 0;
    b.half_pct = 0;
  }
}

}  // namespace

const char* category_name(int c) {
  static const char* names[] = {"kernel",  "memcpy",     "memset",   "communication",
                                "runtime", "dataloader", "cpu_exec", "other"};
  return c >= 0 && c < kCategories ? names[c] : "?";
}

StepBreakdown Breakdown::mean() const {
  StepBreakdown m;
  m.name = "mean";
  if (steps.empty()) return m;
  double len = 0;
  for (const auto& s : steps) {
    len += s.end - s.start;
    for (int c = 0; c < kCategories; ++c) m.us[c] += s.us[c];
    m.kernel_us += s.kernel_us;
    m.comm_us += s.comm_us;
    m.comm_overlap_us += s.comm_overlap_us;
    m.sync_us += s.sync_us;
    m.sync_idle_us += s.sync_idle_us;
    m.gpu_busy_us += s.gpu_busy_us;
    m.compute_us += s.compute_us;
    m.syncs += s.syncs;
    m.zero_grad_us += s.zero_grad_us;
  }
  const double n = static_cast<double>(steps.size());
  m.end = len / n;
  for (auto& v : m.us) v /= n;
  m.kernel_us /= n, m.comm_us /= n, m.comm_overlap_us /= n, m.sync_us /= n, m.zero_grad_us /= n;
  m.sync_idle_us /= n, m.gpu_busy_us /= n, m.compute_us /= n;
  for (const auto& s : steps) {
    if (s.peak_allocated_mb)
      m.peak_allocated_mb = std::max(m.peak_allocated_mb.value_or(0), *s.peak_allocated_mb);
    if (s.peak_reserved_mb)
      m.peak_reserved_mb = std::max(m.peak_reserved_mb.value_or(0), *s.peak_reserved_mb);
  }
  m.syncs = static_cast<int64_t>(static_cast<double>(m.syncs) / n + 0.5);
  return m;
}

std::vector<Breakdown::AllocationPerStep> Breakdown::allocations_per_step() const {
  const double n = static_cast<double>(std::max<size_t>(steps.size(), 1));
  std::vector<AllocationPerStep> out;
  for (const auto& a : allocators)
    out.push_back({a.name, static_cast<double>(a.count) / n, a.bytes / n / (1024.0 * 1024.0)});
  return out;
}

struct BreakdownBuilder::State {
  Breakdown b;
  Totals tot;
  FileState file;
};

BreakdownBuilder::BreakdownBuilder(bool allocators_gpu) : s_(std::make_unique<State>()) {
  s_->b.allocators_gpu = allocators_gpu;
}
BreakdownBuilder::~BreakdownBuilder() = default;

const std::vector<StepBreakdown>& BreakdownBuilder::steps() const { return s_->b.steps; }

std::pair<double, double> BreakdownBuilder::add(const Trace& t) {
  Breakdown& b = s_->b;
  Totals& tot = s_->tot;
  FileState& f = s_->file;
  if (t.part.first) {
    f = FileState{};
    take_metadata(t, b);
  }
  bool from_steps = true;
  double before_us = 0;
  auto steps = windows(t, f.prev_end, &from_steps, &before_us, &b.stalls);
  b.before_first_gpu_us += before_us;
  b.from_steps = b.from_steps && from_steps;
  // The part's own time: from its first step to the next part's first (the whole file: to the
  // end of its last step).
  const double lo = steps.front().start;
  const double hi = t.part.last ? steps.back().end : std::max(t.part.to, steps.back().end);
  if (t.part.first) f.lo = lo;
  f.prev_end = steps.back().end;

  const Waits waits(t);
  TraceRanges r;
  Categorizer(t, waits, lo, hi, b, tot, r).run();
  merge_ranges(t, b, r, f);
  r.sync_idle = idle_after_syncs(t.has_gpu, r);
  add_device_span(r, lo, hi, b, f);
  add_hta_view(t, b, f);
  fill_steps(t, waits, r, steps);
  const auto outermost = add_operators(t, f.lo, t.part.last ? hi : 1e300, lo, hi, tot.operators);
  add_allocations(t, outermost, lo, hi, b.allocators_gpu, tot.allocators);
  add_memory_peaks(t, outermost, steps, b, tot);
  if (!b.batch_size && from_steps && !steps.empty() && t.part.first)
    b.batch_size = batch_size_of(t, r.cat[kDataLoader], steps.front());
  for (const auto& e : t.events)
    if (e.kind == Kind::kCpuOp) f.pids.insert(e.pid);
  tot.origins.add(t, r.sync_calls, r.sync_names, steps, b.steps.size());
  for (auto& s : steps) b.steps.push_back(std::move(s));
  if (t.part.last) end_file(f, b);
  return {lo, hi};
}

namespace {

/// Whether a step's window holds nothing but itself: no operator, loader range, copy, kernel,
/// communication or sync.
bool empty_step(const StepBreakdown& s) {
  for (int c = 0; c < kCategories; ++c)
    if (c != kOther && s.us[c] > 0) return false;
  return s.kernel_us <= 0 && s.gpu_busy_us <= 0 && s.comm_us <= 0 && s.syncs == 0;
}

/// Leaves out the steps with nothing in them, where other steps hold work (noted in
/// Breakdown::empty_steps either way).
void leave_out_empty_steps(Breakdown& b) {
  if (!b.from_steps) return;
  std::vector<StepBreakdown> kept;
  for (auto& s : b.steps) {
    if (empty_step(s))
      b.empty_steps.push_back(s.name);
    else
      kept.push_back(std::move(s));
  }
  if (kept.empty())
    b.only_empty_steps = !b.steps.empty();  // nothing but empty steps: kept, for the caller
  else
    b.steps = std::move(kept);
}

}  // namespace

Breakdown BreakdownBuilder::finish() {
  make_lists(s_->tot, s_->b);
  leave_out_empty_steps(s_->b);
  return std::move(s_->b);
}

}  // namespace ptune::analyze
