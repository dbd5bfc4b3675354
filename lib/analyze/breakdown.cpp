#include "analyze/breakdown.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace ptune::analyze {
namespace {

using Ranges = std::vector<std::pair<double, double>>;  // sorted, disjoint after merge()

Ranges merge(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [s, e] : r) {
    if (e <= s) continue;
    if (!out.empty() && s <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(s, e);
  }
  return out;
}

/// The part of merged ranges `r` inside [s, e).
Ranges clip(const Ranges& r, double s, double e) {
  Ranges out;
  auto it = std::upper_bound(r.begin(), r.end(), s, [](double v, const auto& x) { return v < x.second; });
  for (; it != r.end() && it->first < e; ++it)
    out.emplace_back(std::max(it->first, s), std::min(it->second, e));
  return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double s = std::max(a[i].first, b[j].first), e = std::min(a[i].second, b[j].second);
    if (s < e) out.emplace_back(s, e);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Ranges subtract(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t j = 0;
  for (auto [s, e] : a) {
    while (j < b.size() && b[j].second <= s) ++j;
    size_t k = j;
    while (k < b.size() && b[k].first < e) {
      if (b[k].first > s) out.emplace_back(s, b[k].first);
      s = std::max(s, b[k].second);
      ++k;
    }
    if (s < e) out.emplace_back(s, e);
  }
  return out;
}

double total(const Ranges& r) {
  double t = 0;
  for (const auto& [s, e] : r) t += e - s;
  return t;
}

std::string lower(std::string_view v) {
  std::string s(v);
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_with(std::string_view s, const char* p) { return s.rfind(p, 0) == 0; }
bool contains(std::string_view s, const char* p) { return s.find(p) != std::string_view::npos; }

bool is_host(const Event& e) { return e.kind == Kind::kCpuOp || e.kind == Kind::kAnnotation; }
bool is_step(const Event& e) { return is_host(e) && starts_with(e.name, "ProfilerStep#"); }
bool is_dataloader(const Event& e) {
  if (!is_host(e)) return false;
  return (starts_with(e.name, "enumerate(DataLoader)#") && e.name.size() >= 9 &&
          e.name.compare(e.name.size() - 9, 9, ".__next__") == 0) ||
         starts_with(e.name, "enumerate(DataPipe)#");
}
/// Runtime calls that wait for the device.
bool is_runtime_sync(const Event& e) {
  return e.kind == Kind::kRuntime &&
         (e.name == "cudaStreamSynchronize" || e.name == "cudaDeviceSynchronize" ||
          e.name == "cudaEventSynchronize" || e.name == "cudaMemcpy" || e.name == "cuStreamSynchronize" ||
          e.name == "cuCtxSynchronize");
}
/// The .item()-style reads: a sync only when they wait for the device (see Waits).
bool is_item(const Event& e) {
  return e.kind == Kind::kCpuOp && (e.name == "aten::_local_scalar_dense" || e.name == "aten::is_nonzero");
}

/// The host's waits for the device in one trace, per thread: runtime syncs, blocking cudaMemcpy
/// and device-to-host copies. A read of a tensor's value (.item()) waits for the device only when
/// the tensor is on it: Kineto records an input's dtype and shape, not its device, so such a read
/// is a sync when one of these waits lies inside it on its thread. On the CPU (a DataLoader
/// reading its labels, torchvision's FakeData) it is not one.
class Waits {
 public:
  explicit Waits(const Trace& t) {
    for (const auto& e : t.events)
      if (e.kind == Kind::kMemcpy && e.correlation >= 0 && contains(e.name, "DtoH"))
        dtoh_.insert(e.correlation);
    for (const auto& e : t.events)
      if (is_wait(e)) starts_[{e.pid, e.tid}].push_back(e.ts);
    for (auto& [k, v] : starts_) std::sort(v.begin(), v.end());
  }
  /// A runtime call that waits for the device.
  bool is_wait(const Event& e) const {
    return is_runtime_sync(e) ||
           (e.kind == Kind::kRuntime && starts_with(e.name, "cudaMemcpy") && dtoh_.count(e.correlation) > 0);
  }
  /// A host sync: a wait, or an .item()-style read with a wait inside it on its thread.
  bool is_sync(const Event& e) const {
    if (is_wait(e)) return true;
    if (!is_item(e)) return false;
    auto it = starts_.find({e.pid, e.tid});
    if (it == starts_.end()) return false;
    auto w = std::lower_bound(it->second.begin(), it->second.end(), e.ts);
    return w != it->second.end() && *w <= e.end();
  }

 private:
  std::set<int64_t> dtoh_;  // correlations of device-to-host copies
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> starts_;
};

/// Whether a Python frame is library code rather than the training script's: built-ins, and the
/// files of PyTorch, its domain libraries and other installed packages.
bool library_frame(std::string_view f) {
  if (starts_with(f, "<")) return true;
  for (const char* p : {"torch/", "torchvision/", "torchaudio/", "torchtext/", "torchdata/", "numpy/", "PIL/",
                        "lightning/", "pytorch_lightning/", "transformers/", "accelerate/", "timm/"})
    if (starts_with(f, p) || contains(f, (std::string("/") + p).c_str())) return true;
  return contains(f, "site-packages/") || contains(f, "dist-packages/") || contains(f, "/lib/python");
}

/// Where a call came from, from its Python frames (innermost first): "`frame`", or "`frame`,
/// called from `the training code's frame`"; empty without frames.
std::string frames_text(const std::vector<std::string_view>& frames) {
  std::optional<std::string_view> at, user;
  for (const auto& f : frames) {
    if (starts_with(f, "<")) continue;  // the built-in method itself
    if (!at) at = f;
    if (!library_frame(f)) {
      user = f;
      break;
    }
  }
  if (!at) return "";
  auto quote = [](std::string_view f) { return "`" + std::string(f.substr(0, 160)) + "`"; };
  if (!user || *user == *at) return quote(*at);
  return quote(*at) + ", called from " + quote(*user);
}

/// The frames of "Call stack" text (frames joined by ";", innermost first).
std::vector<std::string_view> split_stack(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty() && out.size() < 64) {
    const size_t at = s.find(';');
    const std::string_view f = s.substr(0, at);
    if (!f.empty()) out.push_back(f);
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return out;
}

/// For each of `calls`, the Python frames open at its start on its thread (python_function
/// events, with_stack=True), innermost first, at most 64: one sweep per thread over its frames.
std::vector<std::vector<std::string_view>> python_stacks(const Trace& t,
                                                         const std::vector<const Event*>& calls) {
  std::vector<std::vector<std::string_view>> out(calls.size());
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < calls.size(); ++i) by_thread[{calls[i]->pid, calls[i]->tid}].push_back(i);
  std::map<std::pair<int64_t, int64_t>, std::vector<const Event*>> frames;
  for (const auto& e : t.events)
    if (e.python && by_thread.count({e.pid, e.tid})) frames[{e.pid, e.tid}].push_back(&e);
  for (auto& [key, idx] : by_thread) {
    auto& fs = frames[key];
    std::sort(fs.begin(), fs.end(), [](const Event* a, const Event* b) {
      return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
    });
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return calls[a]->ts < calls[b]->ts; });
    std::vector<const Event*> open;
    auto close = [&](double ts) {
      while (!open.empty() && open.back()->end() < ts) open.pop_back();
    };
    size_t next = 0;
    for (size_t i : idx) {
      const double ts = calls[i]->ts;
      for (; next < fs.size() && fs[next]->ts <= ts; ++next) {
        close(fs[next]->ts);
        open.push_back(fs[next]);
      }
      close(ts);
      for (auto it = open.rbegin(); it != open.rend() && out[i].size() < 64; ++it)
        if ((*it)->end() >= ts) out[i].push_back((*it)->name);
    }
  }
  return out;
}

/// "the main thread (4242)" or "thread 4243".
std::string thread_text(const Event& e) {
  return e.tid == e.pid ? "the main thread (" + std::to_string(e.tid) + ")"
                        : "thread " + std::to_string(e.tid);
}

/// Where host syncs came from, by (sync name, where): calls, and without a Python stack the steps.
struct Origins {
  struct Entry {
    int64_t count = 0;
    std::vector<std::string> steps;
  };
  std::map<std::pair<std::string, std::string>, Entry> by;

  /// Adds `calls` (host syncs in `steps`, named as `names`) of trace `t`.
  void add(const Trace& t, const std::vector<const Event*>& calls, const std::vector<std::string>& names,
           const std::vector<StepBreakdown>& steps) {
    const auto stacks = python_stacks(t, calls);
    for (size_t i = 0; i < calls.size(); ++i) {
      const Event& e = *calls[i];
      auto cs = t.call_stacks.find(static_cast<size_t>(&e - t.events.data()));
      std::string where = frames_text(cs != t.call_stacks.end() ? split_stack(cs->second) : stacks[i]);
      std::string step;
      if (where.empty()) {
        where = thread_text(e);
        auto s = std::upper_bound(steps.begin(), steps.end(), e.ts,
                                  [](double v, const StepBreakdown& x) { return v < x.start; });
        if (s != steps.begin()) step = std::prev(s)->name;
      }
      auto& entry = by[{names[i], where}];
      ++entry.count;
      if (!step.empty() && std::find(entry.steps.begin(), entry.steps.end(), step) == entry.steps.end())
        entry.steps.push_back(step);
    }
  }

  /// The origins, most calls first.
  std::vector<SyncOrigin> list() const {
    std::vector<SyncOrigin> out;
    for (const auto& [key, e] : by) {
      std::string where = key.second;
      if (e.steps.size() > 3) {
        where +=
            " in " + std::to_string(e.steps.size()) + " steps, " + e.steps.front() + " to " + e.steps.back();
      } else {
        for (size_t i = 0; i < e.steps.size(); ++i) where += (i ? ", " : " in ") + e.steps[i];
      }
      out.push_back({key.first, where, e.count});
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const SyncOrigin& a, const SyncOrigin& b) { return a.count > b.count; });
    if (out.size() > 10) out.resize(10);
    return out;
  }
};

/// Adds `us` to the entry `name` of `m`.
void add(std::map<std::string, NameTime, std::less<>>& m, std::string_view name, double total_us,
         double self_us) {
  auto it = m.find(name);
  if (it == m.end()) it = m.emplace(std::string(name), NameTime{}).first;
  auto& n = it->second;
  n.name = name;
  ++n.count;
  n.total_us += total_us;
  n.self_us += self_us;
}

std::vector<NameTime> top(const std::map<std::string, NameTime, std::less<>>& m, bool by_self, size_t n) {
  std::vector<NameTime> v;
  for (const auto& [k, t] : m) v.push_back(t);
  std::stable_sort(v.begin(), v.end(), [&](const NameTime& a, const NameTime& b) {
    return by_self ? a.self_us > b.self_us : a.total_us > b.total_us;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

bool is_device(const Event& e) {
  return e.kind == Kind::kKernel || e.kind == Kind::kMemcpy || e.kind == Kind::kMemset;
}

/// Without steps, one-time set-up with the device idle at the start of window `s`: host calls
/// of 100 ms or more (creating streams and events, lazy loading of kernels, cuDNN's first
/// calls, freeing the caching allocator's blocks). The window starts after the last one when
/// device work follows it; those calls are added to `stalls`.
void skip_setup(const Trace& t, StepBreakdown& s, std::vector<NameTime>* stalls) {
  Ranges device;
  for (const auto& e : t.events)
    if (is_device(e)) device.emplace_back(e.ts, e.end());
  device = merge(std::move(device));
  std::map<std::string, NameTime, std::less<>> found;
  double last_end = -1e300;
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.dur >= 100000 && total(clip(device, e.ts, e.end())) < 0.1 * e.dur) {
      add(found, e.name, e.dur, e.dur);
      last_end = std::max(last_end, e.end());
    }
  const bool work_after = !device.empty() && device.back().second > last_end;
  if (!found.empty() && last_end > s.start && work_after) {
    s.start = last_end;
    for (const auto& n : top(found, false, kTopN)) stalls->push_back(n);
  }
}

/// The window of a trace without steps: the whole trace, less what came before its device work
/// (`before_us`; the set-up calls in `stalls`).
StepBreakdown whole_trace_window(const Trace& t, double* before_us, std::vector<NameTime>* stalls) {
  StepBreakdown s;
  s.name = "whole trace";
  s.start = 1e300;
  s.end = -1e300;
  for (const auto& e : t.events) s.start = std::min(s.start, e.ts), s.end = std::max(s.end, e.end());
  // A trace recorded without a schedule often starts before the model's first kernel: CUDA's
  // initialization, the first allocations, copying the model to the device. The window starts
  // at the launch of the first device work; what comes before is left out (and said).
  double first_dev = 1e300;
  int64_t first_corr = -1;
  for (const auto& e : t.events)
    if (is_device(e) && e.ts < first_dev) first_dev = e.ts, first_corr = e.correlation;
  if (first_dev >= 1e300) return s;
  double from = first_dev;
  if (first_corr >= 0)
    for (const auto& e : t.events)
      if (e.kind == Kind::kRuntime && e.correlation == first_corr) from = std::min(from, e.ts);
  const double trace_start = s.start;
  if (from - s.start > 0.01 * (s.end - s.start) && from > s.start) s.start = from;
  skip_setup(t, s, stalls);
  if (s.start > trace_start) *before_us = s.start - trace_start;
  return s;
}

/// The windows of the ProfilerStep#N host spans `host` (sorted by start), each extended to the
/// end of the device work launched from it (and the first one back to its first device work),
/// kept apart from the next step.
std::vector<StepBreakdown> step_windows(const Trace& t, const std::vector<const Event*>& host) {
  std::unordered_map<int64_t, const Event*> launch;  // correlation -> runtime call
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.correlation >= 0) launch[e.correlation] = &e;
  std::vector<double> dev_min(host.size(), 1e300), dev_max(host.size(), -1e300);
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    auto it = launch.find(e.correlation);
    if (it == launch.end()) continue;
    const double at = it->second->ts;
    auto st =
        std::upper_bound(host.begin(), host.end(), at, [](double v, const Event* s) { return v < s->ts; });
    if (st == host.begin()) continue;
    const size_t i = static_cast<size_t>(st - host.begin()) - 1;
    if (at > host[i]->end()) continue;
    dev_min[i] = std::min(dev_min[i], e.ts);
    dev_max[i] = std::max(dev_max[i], e.end());
  }
  std::vector<StepBreakdown> steps;
  double prev_end = -1e300;
  for (size_t i = 0; i < host.size(); ++i) {
    StepBreakdown s;
    s.name = std::string(host[i]->name);
    s.start = std::max(i == 0 ? std::min(host[i]->ts, dev_min[i]) : host[i]->ts, prev_end);
    s.end = std::max({host[i]->end(), dev_max[i], s.start});
    prev_end = s.end;
    steps.push_back(s);
  }
  return steps;
}

/// The windows of the steps of one trace (step_windows); without steps, the whole trace
/// (whole_trace_window).
std::vector<StepBreakdown> windows(const Trace& t, bool* from_steps, double* before_us,
                                   std::vector<NameTime>* stalls) {
  std::vector<const Event*> host;
  for (const auto& e : t.events)
    if (is_step(e)) host.push_back(&e);
  std::sort(host.begin(), host.end(), [](const Event* a, const Event* b) { return a->ts < b->ts; });
  *from_steps = !host.empty();
  if (host.empty()) return {whole_trace_window(t, before_us, stalls)};
  return step_windows(t, host);
}

// --- break_down's stages, per trace: the categories, the device work, the steps, the
// operators, the allocations, the batch; then the lists over all the traces. ---

/// What break_down() sums over the traces of a process before it makes the lists.
struct Totals {
  std::map<std::string, NameTime, std::less<>> kernels, operators, loaders, syncs, copies;
  std::map<std::string, NameBytes, std::less<>> allocators;
  Origins origins;
  double kernel_total = 0, tc = 0, half = 0, layout = 0;  // kernel time in the steps, and on Tensor
                                                          // Cores, in fp16/bf16, in layout changes
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
      : t_(t), waits_(waits), lo_(lo), hi_(hi), b_(b), tot_(tot), r_(r) {
    for (const auto& e : t.events)
      comm_kernels_ = comm_kernels_ || (e.kind == Kind::kKernel && is_communication(e));
  }

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
          if (inside(e)) add(tot_.copies, e.name, e.dur, e.dur);
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
    add(tot_.kernels, e.name, e.dur, e.dur);
    tot_.kernel_total += e.dur;
    if (is_tensor_core_kernel(e.name)) tot_.tc += e.dur;
    if (is_half_kernel(e.name)) tot_.half += e.dur;
    const std::string n = lower(e.name);
    if (contains(n, "nchwtonhwc") || contains(n, "nhwctonchw")) tot_.layout += e.dur;
  }

  void copy(const Event& e) {
    r_.cat[kMemcpy].emplace_back(e.ts, e.end());
    if (inside(e)) add(tot_.copies, e.name, e.dur, e.dur);
    if (!inside(e) || !contains(e.name, "HtoD")) return;
    CopyStats& h2d = b_.h2d;
    ++h2d.count;
    h2d.us += e.dur;
    if (e.bytes > 0)  // saturates: a hostile trace's sizes may add up past int64
      h2d.bytes = e.bytes > INT64_MAX - h2d.bytes ? INT64_MAX : h2d.bytes + e.bytes;
    if (contains(e.name, "Pinned")) ++h2d.pinned;
    if (contains(e.name, "Pageable")) ++h2d.pageable;
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
      if (inside(e)) add(tot_.loaders, e.name, e.dur, e.dur);
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
    if (starts_with(e.name, "Optimizer.zero_grad#")) r_.zero_windows.push_back(r);
  }

  /// A host sync `e`, named `name`.
  void sync(const Event& e, std::string_view name) {
    r_.sync_ranges.emplace_back(e.ts, e.end());
    if (!inside(e)) return;
    add(tot_.syncs, name, e.dur, e.dur);
    r_.sync_calls.push_back(&e);
    r_.sync_names.emplace_back(name);
  }

  const Trace& t_;
  const Waits& waits_;
  const double lo_, hi_;
  Breakdown& b_;
  Totals& tot_;
  TraceRanges& r_;
  bool comm_kernels_ = false;  // communication runs as kernels: host collectives only launch them
};

/// The device work: its ranges and starts, the computation kernels', the streams and CUDA graphs
/// (into `b`); then merges every range of `r` and derives the zeroing and the overlap.
void merge_ranges(const Trace& t, Breakdown& b, TraceRanges& r) {
  std::set<int64_t> streams;
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    r.device.emplace_back(e.ts, e.end());
    r.device_starts.push_back(e.ts);
    if (e.kind == Kind::kKernel) {
      streams.insert(e.tid);
      if (!is_communication(e)) r.comp_kernels.emplace_back(e.ts, e.end());
    }
  }
  b.streams = std::max<int64_t>(b.streams, static_cast<int64_t>(streams.size()));
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.name == "cudaGraphLaunch") b.cuda_graphs = true;
  r.device = merge(std::move(r.device));
  r.comp_kernels = merge(std::move(r.comp_kernels));
  std::sort(r.device_starts.begin(), r.device_starts.end());
  for (auto& c : r.cat) c = merge(std::move(c));
  r.all_kernels = merge(std::move(r.all_kernels));
  r.compute = merge(std::move(r.compute));
  r.sync_ranges = merge(std::move(r.sync_ranges));
  r.zero_windows = merge(std::move(r.zero_windows));
  for (const auto& e : t.events)
    if (e.kind == Kind::kCpuOp && (e.name == "aten::zero_" || e.name == "aten::fill_") &&
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

/// Adds the device time of the steps' span [lo, hi) (HTA's temporal breakdown) to `b`.
void add_device_span(const TraceRanges& r, double lo, double hi, Breakdown& b) {
  const Ranges d = clip(r.device, lo, hi);
  if (d.empty()) return;
  b.gpu_span_us += d.back().second - d.front().first;
  b.gpu_busy_total_us += total(d);
  b.gpu_compute_total_us += total(clip(r.comp_kernels, lo, hi));
}

/// Adds HTA's view of the trace's device work (Breakdown::HtaView) to `b.hta`.
void add_hta_view(const Trace& t, Breakdown& b) {
  std::set<std::string_view> step_names;
  double last_step_end = -1e300;
  std::unordered_map<int64_t, double> launched;  // correlation -> launch time
  for (const auto& e : t.events) {
    if (is_step(e)) step_names.insert(e.name), last_step_end = std::max(last_step_end, e.end());
    if (e.kind == Kind::kRuntime && e.correlation >= 0) launched.emplace(e.correlation, e.ts);
  }
  const bool all = step_names.size() < 2;
  Ranges busy, comp, comm;
  std::map<std::string, NameTime, std::less<>> names;
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    if (!all) {
      auto it = launched.find(e.correlation);
      if (e.correlation < 0 || it == launched.end() || it->second > last_step_end) continue;
    }
    busy.emplace_back(e.ts, e.end());
    add(names, e.name, e.dur, e.dur);
    if (e.kind != Kind::kKernel) continue;
    const bool nccl = starts_with(e.name, "nccl") && contains(e.name, "Kernel");
    if (nccl)
      comm.emplace_back(e.ts, e.end());
    else if (!contains(e.name, "Memcpy") && !contains(e.name, "Memset") && !contains(e.name, "Sync"))
      comp.emplace_back(e.ts, e.end());
  }
  busy = merge(std::move(busy));
  comp = merge(std::move(comp));
  comm = merge(std::move(comm));
  if (!busy.empty()) {
    b.hta.span_us += busy.back().second - busy.front().first;
    b.hta.busy_us += total(busy);
    b.hta.compute_us += total(comp);
    b.hta.comm_us += total(comm);
    b.hta.overlap_us += total(intersect(comm, comp));
  }
  for (const auto& n : top(names, false, 20)) b.hta.kernels.push_back(n);
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
    s.syncs = std::lower_bound(sync_starts.begin(), sync_starts.end(), s.end) -
              std::lower_bound(sync_starts.begin(), sync_starts.end(), s.start);
  }
}

using Thread = std::pair<int64_t, int64_t>;  // pid, tid

/// The operators: host operators' self time in [lo, hi), per thread, minus the time of the
/// operators directly inside, added to `operators`. Returns each thread's outermost operators,
/// in time order.
std::map<Thread, std::vector<const Event*>> add_operators(
    const Trace& t, double lo, double hi, std::map<std::string, NameTime, std::less<>>& operators) {
  std::map<Thread, std::vector<const Event*>> threads, outermost;
  for (const auto& e : t.events)
    // ProfilerStep#N and the DataLoader's ranges (cat "Operator" in the 2021 schema) are not
    // operators: the steps and the data loader have their own figures.
    if (e.kind == Kind::kCpuOp && e.ts >= lo && e.ts < hi && !is_step(e) && !is_dataloader(e))
      threads[{e.pid, e.tid}].push_back(&e);
  for (auto& [key, ops] : threads) {
    std::sort(ops.begin(), ops.end(), [](const Event* a, const Event* b) {
      return a->ts != b->ts ? a->ts < b->ts : a->dur > b->dur;
    });
    std::vector<std::pair<const Event*, double>> stack;  // op, time of its direct children
    auto pop = [&]() {
      auto [op, children] = stack.back();
      stack.pop_back();
      add(operators, op->name, op->dur, std::max(0.0, op->dur - children));
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

/// Each device's highest allocated memory in `steps` (kept where above an earlier trace's), the
/// operator at it, and the timeline of allocated memory over the step of the highest of all.
void add_memory_peaks(const Trace& t, const std::map<Thread, std::vector<const Event*>>& outermost,
                      const std::vector<StepBreakdown>& steps, Breakdown& b) {
  std::map<int64_t, const MemorySample*> top;  // device -> its highest sample in a step
  std::map<int64_t, const StepBreakdown*> top_step;
  for (const auto& m : t.memory) {
    if (m.allocated < 0) continue;  // the host's samples too (device -1): a CPU trace's memory
    const auto s = std::find_if(steps.begin(), steps.end(),
                                [&](const StepBreakdown& x) { return m.ts >= x.start && m.ts < x.end; });
    if (s == steps.end()) continue;
    if (!top.count(m.device) || m.allocated > top[m.device]->allocated)
      top[m.device] = &m, top_step[m.device] = &*s;
  }
  constexpr double kMb = 1024.0 * 1024.0;
  const double before = b.memory_peaks.empty()
                            ? -1
                            : std::max_element(b.memory_peaks.begin(), b.memory_peaks.end(),
                                               [](const MemoryPeak& x, const MemoryPeak& y) {
                                                 return x.allocated_mb < y.allocated_mb;
                                               })
                                  ->allocated_mb;
  const MemorySample* highest = nullptr;
  for (const auto& [device, m] : top) {
    MemoryPeak p{device,
                 static_cast<double>(m->allocated) / kMb,
                 std::nullopt,
                 std::string(operator_at(outermost, *m)),
                 top_step[device]->name,
                 (m->ts - top_step[device]->start) / 1000.0};
    if (m->reserved >= 0) p.reserved_mb = static_cast<double>(m->reserved) / kMb;
    auto it = std::find_if(b.memory_peaks.begin(), b.memory_peaks.end(),
                           [&](const MemoryPeak& x) { return x.device == device; });
    if (it == b.memory_peaks.end())
      b.memory_peaks.push_back(p);
    else if (p.allocated_mb > it->allocated_mb)
      *it = p;
    // The timeline's: a GPU's highest sample, else the host's.
    if (!highest || (device >= 0) > (highest->device >= 0) ||
        ((device >= 0) == (highest->device >= 0) && m->allocated > highest->allocated))
      highest = m;
  }
  std::sort(b.memory_peaks.begin(), b.memory_peaks.end(),
            [](const MemoryPeak& x, const MemoryPeak& y) { return x.device < y.device; });
  if (!highest || static_cast<double>(highest->allocated) / kMb <= before) return;
  // The timeline of that step on that device, thinned to at most 400 points with the peak kept.
  const StepBreakdown& s = *top_step[highest->device];
  std::vector<const MemorySample*> in;
  for (const auto& m : t.memory)
    if (m.device == highest->device && m.allocated >= 0 && m.ts >= s.start && m.ts < s.end) in.push_back(&m);
  std::sort(in.begin(), in.end(), [](const MemorySample* x, const MemorySample* y) { return x->ts < y->ts; });
  const size_t every = in.size() / 400 + 1;
  b.memory_timeline.clear();
  for (size_t i = 0; i < in.size(); ++i)
    if (i % every == 0 || in[i] == highest)
      b.memory_timeline.emplace_back((in[i]->ts - s.start) / 1000.0,
                                     static_cast<double>(in[i]->allocated) / kMb);
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
  std::sort(ops.begin(), ops.end(), [](const Event* a, const Event* c) { return a->ts < c->ts; });
  for (const Event* e : ops) {
    if (e->name == "aten::embedding") {
      // aten::embedding(weight, indices): the batch is the indices' first dimension.
      auto in = t.inputs.find(static_cast<size_t>(e - t.events.data()));
      if (in != t.inputs.end() && in->second.dims.size() >= 2 && !in->second.dims[1].empty() &&
          in->second.dims[1][0] > 0)
        return in->second.dims[1][0];
      continue;
    }
    if (e->name == "aten::to" || e->name == "aten::_to_copy" || e->name == "aten::copy_" ||
        starts_with(e->name, "aten::conv") || e->name == "aten::linear" ||
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

/// One trace of the process taken apart: its steps appended to `b.steps`, its lists added to
/// `tot`.
void add_trace(const Trace& t, Breakdown& b, Totals& tot) {
  take_metadata(t, b);
  bool from_steps = true;
  double before_us = 0;
  auto steps = windows(t, &from_steps, &before_us, &b.stalls);
  b.before_first_gpu_us += before_us;
  b.from_steps = b.from_steps && from_steps;
  const double lo = steps.front().start, hi = steps.back().end;

  const Waits waits(t);
  TraceRanges r;
  Categorizer(t, waits, lo, hi, b, tot, r).run();
  merge_ranges(t, b, r);
  r.sync_idle = idle_after_syncs(t.has_gpu, r);
  add_device_span(r, lo, hi, b);
  add_hta_view(t, b);
  fill_steps(t, waits, r, steps);
  const auto outermost = add_operators(t, lo, hi, tot.operators);
  add_allocations(t, outermost, lo, hi, b.allocators_gpu, tot.allocators);
  add_memory_peaks(t, outermost, steps, b);
  if (!b.batch_size && from_steps && !steps.empty())
    b.batch_size = batch_size_of(t, r.cat[kDataLoader], steps.front());
  std::set<int64_t> pids;
  for (const auto& e : t.events)
    if (e.kind == Kind::kCpuOp) pids.insert(e.pid);
  b.processes = std::max<int64_t>(b.processes, static_cast<int64_t>(pids.size()));
  tot.origins.add(t, r.sync_calls, r.sync_names, steps);
  for (auto& s : steps) b.steps.push_back(std::move(s));
}

/// The lists over all the traces: the largest kernels, operators, allocators, copies, data
/// loader ranges and syncs, and the kernel-time shares.
void make_lists(const Totals& tot, Breakdown& b) {
  b.sync_origins = tot.origins.list();
  b.kernels = top(tot.kernels, false, kTopN);
  b.operators = top(tot.operators, true, kTopN);
  for (const auto& [name, a] : tot.allocators) b.allocators.push_back(a);
  std::sort(b.allocators.begin(), b.allocators.end(), [](const NameBytes& x, const NameBytes& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.name < y.name;
  });
  if (b.allocators.size() > kTopN) b.allocators.resize(kTopN);
  b.all_kernels = top(tot.kernels, false, SIZE_MAX);
  b.all_operators = top(tot.operators, true, SIZE_MAX);
  b.copies = top(tot.copies, false, SIZE_MAX);
  b.dataloader = top(tot.loaders, false, kTopN);
  b.syncs = top(tot.syncs, false, kTopN);
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

bool is_tensor_core_kernel(std::string_view name) {
  const std::string n = lower(name);
  for (const char* p : {"h884", "s884", "h1688", "s1688", "h16816", "s16816", "i8816", "hmma", "xmma",
                        "tensorop", "wgmma", "gmma_", "tf32", "16816gemm", "1688gemm", "884gemm"})
    if (contains(n, p)) return true;
  return false;
}

bool is_half_kernel(std::string_view name) {
  const std::string n = lower(name);
  for (const char* p : {"f16", "fp16", "bf16", "half", "h884", "h1688", "h16816", "hmma", "bfloat16"})
    if (contains(n, p)) return true;
  return false;
}

bool is_communication(const Event& e) {
  if (e.kind == Kind::kKernel) return starts_with(lower(e.name), "nccl");
  if (!is_host(e)) return false;
  if (starts_with(e.name, "nccl:") || starts_with(e.name, "gloo:") || e.name == "record_param_comms")
    return true;
  if (!starts_with(e.name, "c10d::")) return false;
  for (const char* p :
       {"allreduce", "allgather", "all_gather", "broadcast", "reduce_scatter", "alltoall", "barrier"})
    if (contains(e.name, p)) return true;
  return false;
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

Breakdown break_down(const std::vector<const Trace*>& traces) {
  Breakdown b;
  Totals tot;
  // The allocations listed are the device's where any trace recorded device memory, else the
  // host's: one kind for all the traces, as the list has one heading.
  b.allocators_gpu = std::any_of(traces.begin(), traces.end(), [](const Trace* t) {
    return std::any_of(t->memory.begin(), t->memory.end(),
                       [](const MemorySample& m) { return m.device >= 0; });
  });
  for (const Trace* t : traces) add_trace(*t, b, tot);
  make_lists(tot, b);
  return b;
}

}  // namespace ptune::analyze
