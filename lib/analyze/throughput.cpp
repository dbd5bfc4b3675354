#include "analyze/throughput.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analyze/breakdown.hpp"
#include "analyze/correlations.hpp"
#include "analyze/events.hpp"
#include "analyze/intervals.hpp"

namespace ptune::analyze {
namespace {

/// An operator counted: its cost, with the trace's FLOPs where it gives them.
struct Counted {
  const Event* e;
  OpCost cost;
};

/// Whether `ts` lies in one of `steps` (sorted by start, not overlapping).
bool in_steps(const std::vector<std::pair<double, double>>& steps, double ts) {
  auto it = std::upper_bound(steps.begin(), steps.end(), ts,
                             [](double v, const std::pair<double, double>& s) { return v < s.first; });
  return it != steps.begin() && ts < std::prev(it)->second;
}

/// The operators counted in `steps` that start in [lo, hi): per thread the outermost of those
/// with a class (a class's operators call each other: aten::conv2d calls aten::convolution).
std::vector<Counted> counted_ops(const Trace& t, const std::vector<std::pair<double, double>>& steps,
                                 double lo, double hi, bool* from_trace) {
  std::map<std::pair<int64_t, int64_t>, std::vector<Counted>> threads;
  for (const auto& [idx, c] : t.costs) {
    const Event& e = t.events[idx];
    if (!in_steps(steps, e.ts)) continue;
    if (c.from_trace) *from_trace = true;
    if (c.cls) threads[{e.pid, e.tid}].push_back({&e, c});
  }
  std::vector<Counted> out;
  for (auto& [key, ops] : threads) {
    sort_runs(ops.begin(), ops.end(),
              [](const Counted& a, const Counted& b) { return nests_before(a.e, b.e); });
    double end = -1e300;
    for (const auto& c : ops) {
      if (c.e->end() <= end) continue;  // inside the one counted before
      if (c.e->ts >= lo && c.e->ts < hi) out.push_back(c);
      end = c.e->end();
    }
  }
  return out;
}

/// The kernel time an operator launched, by the precision the kernels' names say (an index in
/// precisions()).
struct KernelTime {
  std::array<double, 8> us{};
  uint32_t present = 0;  // bit i: precision i seen
  void add(size_t i, double d) { us[i] += d, present |= 1u << i; }
  void add(const KernelTime& k) {
    for (size_t i = 0; i < us.size(); ++i)
      if (k.present & (1u << i)) add(i, k.us[i]);
  }
};

/// On a GPU: each counted operator's time is that of the kernels it launched (the runtime calls
/// inside it on its thread, linked by correlation). Returns, for each of `ops`, its kernels' time
/// by precision.
std::vector<KernelTime> kernel_time(const Trace& t, const std::vector<Counted>& ops) {
  std::vector<std::pair<int64_t, KernelTime>> kernels;
  for (const auto& e : t.events)
    if (e.kind == Kind::kKernel && e.correlation >= 0) {
      kernels.emplace_back(e.correlation, KernelTime{});
      kernels.back().second.add(precision_index(e), e.dur);
    }
  const ByCorrelation<KernelTime> by_corr(std::move(kernels),
                                          [](KernelTime& a, const KernelTime& b) { a.add(b); });
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<const Event*, const KernelTime*>>> launches;
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.correlation >= 0)
      if (const KernelTime* k = by_corr.find(e.correlation)) launches[{e.pid, e.tid}].emplace_back(&e, k);
  for (auto& [k, v] : launches)
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first->ts < b.first->ts; });
  std::vector<KernelTime> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const Event* e = ops[i].e;
    auto it = launches.find({e->pid, e->tid});
    if (it == launches.end()) continue;
    auto l = std::lower_bound(it->second.begin(), it->second.end(), e->ts,
                              [](const auto& x, double ts) { return x.first->ts < ts; });
    for (; l != it->second.end() && l->first->ts <= e->end(); ++l) out[i].add(*l->second);
  }
  return out;
}

/// The time of `k`, summed in the order of the precisions' names.
double total(const KernelTime& k) {
  double s = 0;
  for (size_t i = 0; i < k.us.size(); ++i)
    if (k.present & (1u << i)) s += k.us[i];
  return s;
}

double total(const std::map<std::string, double>& k) {
  double s = 0;
  for (const auto& [p, us] : k) s += us;
  return s;
}

std::string pct_text(double v) { return std::to_string(static_cast<int>(v + 0.5)) + "%"; }

/// Why a class's FLOP/s pass its ceiling: the assumption that failed.
std::string over_reason(const ClassRate& c, const std::string& source) {
  double unnamed = 0, all = 0;
  for (const auto& [p, us] : c.us_by_precision) (p.empty() ? unnamed : all) += us;
  all += unnamed;
  if (all > 0 && unnamed > 0)
    return pct_text(100.0 * unnamed / all) +
           " of its kernel time is in kernels whose names say no precision " +
           "(an unknown family, read as " + c.precision + "): a ceiling too low if they ran on Tensor Cores";
  return source == "trace"
             ? "the trace's FLOPs are more than its kernels can do in their time"
             : "its FLOPs, counted from the input shapes, are more than its kernels did (a count "
               "the kernels did not do)";
}

/// The ceilings of a GPU class from the precisions its kernels ran in, time-weighted.
void class_ceiling(ClassRate& c, const std::string& device, std::vector<system::Peak>& peaks,
                   std::string& missing) {
  std::map<std::string, double> by = c.us_by_precision;
  if (const auto it = by.find(""); it != by.end()) {  // kernels that say no precision: the op's
    const double us = it->second;
    by.erase(it);
    by[c.precision] += us;
  }
  const double all = total(by);
  if (all <= 0) return;
  double weighted = 0;
  std::string text;
  for (const auto& [p, us] : by) {
    const auto peak = system::known_gpu_peak(device, p);
    if (!peak) {
      missing = "no datasheet figure for `" + device + "` in " + p;
      return;
    }
    if (std::none_of(peaks.begin(), peaks.end(),
                     [&p = p](const system::Peak& q) { return q.precision == p; }))
      peaks.push_back(*peak);
    weighted += us * peak->flops_per_s;
    text += (text.empty() ? "" : ", ") + p + (by.size() > 1 ? " " + pct_text(100.0 * us / all) : "");
  }
  c.ceiling = weighted / all;
  c.ceiling_text = by.size() > 1 ? text + " of its kernel time" : text;
}

/// Each class's ceiling, the step's, and why a figure above its ceiling is left out.
void class_ceilings(Throughput& th, const Breakdown& b) {
  const std::string device = b.devices.empty() ? "" : b.devices.front();
  double ideal_us = 0;  // the step's FLOPs at their classes' ceilings
  for (auto& c : th.classes) {
    if (b.has_gpu && !device.empty()) {
      std::string missing;
      class_ceiling(c, device, th.peaks, missing);
      if (!missing.empty() && th.no_ceilings.empty()) th.no_ceilings = missing;
    } else if (th.ceilings && c.precision == th.precision) {
      c.ceiling = th.ceilings->peak.flops_per_s;
      c.ceiling_text = th.precision;
    }
    if (c.ceiling > 0 && c.flops_per_s() > c.ceiling) c.over = over_reason(c, th.source);
    const double ceiling = c.ceiling > 0 ? c.ceiling : th.ceilings ? th.ceilings->peak.flops_per_s : 0;
    if (ceiling > 0) ideal_us += c.flops / ceiling * 1e6;
  }
  if (th.ceilings && th.peaks.empty()) th.peaks.push_back(th.ceilings->peak);
  if (ideal_us > 0 && th.flops > 0) th.step_ceiling = th.flops * 1e6 / ideal_us;
  if (th.step_ceiling > 0 && th.flops_per_s() > th.step_ceiling)
    th.step_over = "the step's FLOPs are more than its time at the classes' ceilings allows";
}

/// The precision of the most FLOPs (bytes where none) in `by`; fp32 when empty.
std::string most_of(const std::map<std::string, double>& by) {
  std::string p = "fp32";
  double most = 0;
  for (const auto& [name, f] : by)
    if (f > most) most = f, p = name;
  return p;
}

/// The ceilings of the rank's device in `precision`.
void find_ceilings(Throughput& th, const Breakdown& b, const CpuCeilings& cpu) {
  if (b.has_gpu) {
    const std::string name = b.devices.empty() ? "" : b.devices.front();
    auto peak = system::known_gpu_peak(name, th.precision);
    auto bw = system::known_gpu_bandwidth(name);
    if (peak && bw)
      th.ceilings = Ceilings{*peak, *bw};
    else
      th.no_ceilings = name.empty() ? "the trace names no device (deviceProperties)"
                                    : "no datasheet figures for `" + name + "` in " + th.precision;
    return;
  }
  if (!cpu || (th.precision != "fp32" && th.precision != "bf16")) {
    th.no_ceilings = cpu ? "no " + th.precision + " calibration on a CPU" : "no CPU calibration";
    return;
  }
  auto c = cpu(th.precision);
  if (c && c->peak.under_load)  // load pulls a calibration down by any amount: no ceiling
    th.no_ceilings = "the " + th.precision +
                     " peak was calibrated under competing load, so it is no ceiling (" + c->peak.source +
                     "); analyze again when the cores are quiet";
  else if (c && c->peak.flops_per_s > 0)
    th.ceilings = c;
  else
    th.no_ceilings = c ? c->peak.source : "no " + th.precision + " calibration on this CPU";
}

}  // namespace

std::optional<double> roof_of(const ClassRate& c, const std::optional<Ceilings>& ceil) {
  const auto ai = c.intensity();
  const double peak = c.ceiling > 0 ? c.ceiling : ceil ? ceil->peak.flops_per_s : 0;
  if (!ceil || !ai || peak <= 0 || ceil->bandwidth.bytes_per_s <= 0) return std::nullopt;
  return std::min(peak, *ai * ceil->bandwidth.bytes_per_s);
}

std::optional<double> peak_pct(const ClassRate& c) {
  if (c.ceiling <= 0 || !c.over.empty()) return std::nullopt;
  return 100.0 * c.flops_per_s() / c.ceiling;
}

/// "156 TFLOP/s", "19.5 TFLOP/s", "44.9 GFLOP/s" (`unit` "FLOP/s" or "B/s"): three digits.
std::string rate_text(double v, const char* unit) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P"};
  size_t i = 0;
  while (v >= 999.5 && i + 1 < std::size(kPrefix)) v /= 1000, ++i;
  char buf[48];
  std::snprintf(buf, sizeof buf,
                v >= 99.95   ? "%.0f %s%s"
                : v >= 9.995 ? "%.1f %s%s"
                             : "%.2f %s%s",
                v, kPrefix[i], unit);
  return buf;
}

std::string ceilings_text(const Throughput& th) {
  if (th.peaks.empty()) return "";
  std::string s, source;
  for (const auto& p : th.peaks) {
    s += (s.empty() ? "" : ", ") + rate_text(p.flops_per_s) + " " + p.precision;
    // A datasheet's source names the precision last (", dense tf32"): one source for them all.
    const auto cut = p.source.rfind(", dense ");
    source = cut == std::string::npos ? p.source : p.source.substr(0, cut) + ", dense";
  }
  s += " (" + source + ")";
  if (th.ceilings && th.ceilings->bandwidth.bytes_per_s > 0)
    s += "; " + rate_text(th.ceilings->bandwidth.bytes_per_s, "B/s") + " (" + th.ceilings->bandwidth.source +
         ")";
  return s;
}

std::vector<std::string> over_notes(const Throughput& th) {
  std::vector<std::string> out;
  for (const auto& c : th.classes)
    if (!c.over.empty())
      out.push_back(c.name + ": " + rate_text(c.flops_per_s()) + " is more than its ceiling (" +
                    rate_text(c.ceiling) + " " + c.ceiling_text + "), so no % of peak: " + c.over);
  if (!th.step_over.empty())
    out.push_back("step: " + rate_text(th.flops_per_s()) + " is more than its ceiling (" +
                  rate_text(th.step_ceiling) + "), so no % of peak: " + th.step_over);
  return out;
}

std::optional<double> step_peak_pct(const Throughput& th) {
  if (th.step_ceiling <= 0 || !th.step_over.empty()) return std::nullopt;
  return 100.0 * th.flops_per_s() / th.step_ceiling;
}

std::string bound_of(const ClassRate& c, const std::optional<Ceilings>& ceil) {
  const auto ai = c.intensity();
  if (!roof_of(c, ceil)) return c.bytes && c.flops == 0 ? "memory-bound" : "";
  const double peak = c.ceiling > 0 ? c.ceiling : ceil->peak.flops_per_s;
  return *ai * ceil->bandwidth.bytes_per_s < peak ? "memory-bound" : "compute-bound";
}

struct ThroughputBuilder::Sums {
  std::vector<std::pair<double, double>> windows;  // the steps so far, sorted by start
  size_t seen = 0;                                 // of BreakdownBuilder's steps
  bool from_trace = false, shapes = false;
  std::map<std::string, ClassRate> classes;
  std::map<std::string, double> by_precision;
  std::map<std::string, std::map<std::string, double>> class_precision;  // class -> precision -> FLOPs
};

ThroughputBuilder::ThroughputBuilder(size_t steps, bool has_gpu)
    : nsteps_(static_cast<double>(std::max<size_t>(steps, 1))),
      has_gpu_(has_gpu),
      sums_(std::make_unique<Sums>()) {}
ThroughputBuilder::~ThroughputBuilder() = default;

void ThroughputBuilder::add(const Trace& t, const std::vector<StepBreakdown>& windows,
                            std::pair<double, double> own) {
  Sums& z = *sums_;
  // The windows not seen before, added to the sorted list once (not the whole list per part).
  auto& steps = z.windows;
  const bool in_order =
      z.seen >= windows.size() || steps.empty() || windows[z.seen].start >= steps.back().first;
  for (; z.seen < windows.size(); ++z.seen) steps.emplace_back(windows[z.seen].start, windows[z.seen].end);
  if (!in_order) std::sort(steps.begin(), steps.end());
  z.shapes = z.shapes || t.has_shapes;
  const auto ops = counted_ops(t, steps, own.first, own.second, &z.from_trace);
  const auto kernels = has_gpu_ ? kernel_time(t, ops) : std::vector<KernelTime>{};
  // The sums each class and precision adds to, found once per distinct name (the names are the
  // cost functions' literals), not once per operator.
  struct Into {
    ClassRate* r;
    std::map<std::string, double>* precision;
    std::array<double*, 8> us{};  // r->us_by_precision's entries, by index in precisions()
  };
  std::unordered_map<const char*, Into> into;
  std::unordered_map<const char*, double*> by_precision;
  std::map<std::pair<const char*, const char*>, double*> class_precision;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Counted& c = ops[i];
    auto cls = into.find(c.cost.cls);
    if (cls == into.end()) {
      ClassRate& r = z.classes[c.cost.cls];
      r.name = c.cost.cls;
      cls = into.emplace(c.cost.cls, Into{&r, &z.class_precision[c.cost.cls]}).first;
    }
    ClassRate& r = *cls->second.r;
    r.calls += 1 / nsteps_;
    r.flops += c.cost.flops / nsteps_;
    if (c.cost.bytes >= 0) r.bytes = r.bytes.value_or(0) + c.cost.bytes / nsteps_;
    r.us += (has_gpu_ ? total(kernels[i]) : c.e->dur) / nsteps_;
    if (has_gpu_) {
      const KernelTime& k = kernels[i];
      for (size_t j = 0; j < k.us.size(); ++j) {
        if (!(k.present & (1u << j))) continue;
        double*& us = cls->second.us[j];
        if (!us) us = &r.us_by_precision[precisions()[j]];
        *us += k.us[j] / nsteps_;
      }
    }
    const double flops = c.cost.flops > 0 ? c.cost.flops : 1e-9;
    double*& all = by_precision[c.cost.precision];
    if (!all) all = &z.by_precision[c.cost.precision];
    *all += flops;
    double*& mine = class_precision[{c.cost.cls, c.cost.precision}];
    if (!mine) mine = &(*cls->second.precision)[c.cost.precision];
    *mine += flops;
  }
}

Throughput ThroughputBuilder::finish(const Breakdown& b, const CpuCeilings& cpu) {
  Sums& z = *sums_;
  Throughput th;
  const auto mean = b.mean();
  th.step_us = mean.end - mean.start;
  if (!z.from_trace && !z.shapes) {
    th.missing = b.writer == "ptune"
                     ? "no input shapes in the trace"
                     : "add `record_shapes=True` (or `with_flops=True`) to `torch.profiler.profile(...)` for "
                       "FLOP/s and bytes per operator class";
    return th;
  }
  th.source = z.from_trace ? "trace" : "shapes";
  th.precision = most_of(z.by_precision);
  // Per step of the steps the breakdown kept (it leaves out steps with nothing in them).
  const double scale = b.from_steps && !b.steps.empty() ? nsteps_ / static_cast<double>(b.steps.size()) : 1.0;
  for (auto& [n, r] : z.classes) {
    if (scale != 1.0) {
      r.calls *= scale, r.flops *= scale, r.us *= scale;
      if (r.bytes) *r.bytes *= scale;
      for (auto& [precision, us] : r.us_by_precision) us *= scale;
    }
    r.precision = most_of(z.class_precision[n]);
    th.flops += r.flops;
    th.classes.push_back(r);
  }
  std::sort(th.classes.begin(), th.classes.end(),
            [](const ClassRate& x, const ClassRate& y) { return x.us > y.us; });
  find_ceilings(th, b, cpu);
  class_ceilings(th, b);
  return th;
}

}  // namespace ptune::analyze
