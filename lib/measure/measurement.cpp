#include "measure/measurement.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/stats.hpp"

namespace ptune::measure {

using Json = nlohmann::json;

// ---------------------------------------------------------------- windows

void set_windows(Measurement& m, const std::vector<double>& window_ms, int64_t world,
                 const std::vector<int>& process) {
  m.repeat_ms = window_ms;
  m.repeat_process = process;
  const stats::Interval ms = stats::mean_interval(window_ms, process, stats::kRowLevel);
  m.ms_per_step = ms.point;
  // Global throughput: every rank's batch per step of the slowest rank.
  const double samples = 1000.0 * static_cast<double>(m.batch_size * world);
  m.samples_per_s = m.ms_per_step > 0 ? samples / m.ms_per_step : 0;
  m.samples_per_s_ci = stats::Interval{};
  m.samples_per_s_ci.point = m.samples_per_s;
  m.samples_per_s_ci.n = ms.n;
  if (ms.valid()) {
    m.samples_per_s_ci.lo = samples / ms.hi;
    m.samples_per_s_ci.hi = samples / ms.lo;
    m.samples_per_s_ci.level = ms.level;
  }
  m.spread_pct = 0;
  if (window_ms.size() > 1) {
    const double med = stats::median(window_ms);
    auto [lo, hi] = std::minmax_element(window_ms.begin(), window_ms.end());
    if (med > 0) m.spread_pct = 100.0 * (*hi - *lo) / med;
  }
  m.notes.erase(std::remove_if(m.notes.begin(), m.notes.end(),
                               [](const std::string& n) {
                                 return n.find(" windows w") != std::string::npos &&
                                        n.find(" outlier") != std::string::npos;
                               }),
                m.notes.end());
  const auto odd = stats::outliers(window_ms);
  if (!odd.empty()) {
    // The first few, and how many more: a note a person reads.
    constexpr size_t kListed = 5;
    std::string list;
    for (size_t k = 0; k < std::min(odd.size(), kListed); ++k)
      list += (list.empty() ? "" : ", ") + std::to_string(odd[k] + 1);
    if (odd.size() > kListed) list += " and " + std::to_string(odd.size() - kListed) + " more";
    const bool one = odd.size() == 1;
    m.notes.push_back(std::to_string(odd.size()) + " of " + std::to_string(window_ms.size()) +
                      (one ? " windows was an outlier (window " : " windows were outliers (windows ") + list +
                      ", far from the median): something else may have run then; " +
                      (one ? "it is" : "they are") + " kept");
  }
}

std::string short_windows_note(int64_t short_count, size_t kept, int64_t steps) {
  const std::string why =
      "the row's budget (measure.max_s) shortened them so that the windows measure.repeats asks for fit in "
      "it, or ended them between steps; each is kept, its ms/step over the steps it ran";
  return std::to_string(short_count) + " of its " + std::to_string(kept) +
         " windows ran fewer than measure.steps (" + std::to_string(steps) + ") steps: " + why;
}

stats::Interval speedup_between(const Measurement& a, const Measurement& b) {
  const double a_sps = a.samples_per_s * a.ms_per_step, b_sps = b.samples_per_s * b.ms_per_step;
  if (a_sps <= 0 || b_sps <= 0) return {};
  std::vector<double> a_ms = a.repeat_ms.empty() ? std::vector<double>{a.ms_per_step} : a.repeat_ms;
  const std::vector<double> b_ms = b.repeat_ms.empty() ? std::vector<double>{b.ms_per_step} : b.repeat_ms;
  for (double& v : a_ms) v *= b_sps / a_sps;
  // Each side's processes where it ran in several (a single figure has none).
  const auto& a_process = a.repeat_process.size() == a_ms.size() ? a.repeat_process : std::vector<int>{};
  const auto& b_process = b.repeat_process.size() == b_ms.size() ? b.repeat_process : std::vector<int>{};
  return stats::speedup_interval(a_ms, a_process, b_ms, b_process, false,
                                 stats::speedup_level(a.load.under_load || b.load.under_load));
}

namespace {

// ---- the child's wire format: one entry per member, written and read by its type ------------

Json value_json(const stats::Interval& i) {
  return {{"point", i.point}, {"lo", i.lo}, {"hi", i.hi}, {"n", i.n}, {"level", i.level}};
}
Json value_json(const Measurement::StepSplit& s) {
  return {{"data_wait_pct", s.data_wait_pct}, {"h2d_pct", s.h2d_pct}, {"compute_pct", s.compute_pct}};
}
template <class T>
Json value_json(const T& v) {
  return Json(v);
}
template <class T>
Json value_json(const std::optional<T>& v) {
  return v ? value_json(*v) : Json(nullptr);
}

void read_value(const Json& j, stats::Interval& i) {
  i.point = j.value("point", 0.0);
  i.lo = j.value("lo", 0.0);
  i.hi = j.value("hi", 0.0);
  i.n = j.value("n", int64_t{0});
  i.level = j.value("level", 0.0);
}
void read_value(const Json& j, Measurement::StepSplit& s) {
  s.data_wait_pct = j.value("data_wait_pct", 0.0);
  s.h2d_pct = j.value("h2d_pct", 0.0);
  s.compute_pct = j.value("compute_pct", 0.0);
}
template <class T>
void read_value(const Json& j, T& v) {
  v = j.get<T>();
}
template <class T>
void read_value(const Json& j, std::optional<T>& v) {
  if (j.is_null()) return v.reset();
  T x{};
  read_value(j, x);
  v = std::move(x);
}

/// Calls `f(key, member)` for every member the child sends: its whole Measurement but the load,
/// which the parent observes itself (system/load) over the same windows.
template <class M, class F>
void for_each_member(M& m, F&& f) {
  f("batch_size", m.batch_size);
  f("steps", m.steps);
  f("ms_per_step", m.ms_per_step);
  f("samples_per_s", m.samples_per_s);
  f("samples_per_s_ci", m.samples_per_s_ci);
  f("repeat_ms", m.repeat_ms);
  f("repeat_process", m.repeat_process);
  f("transient_windows", m.transient_windows);
  f("short_windows", m.short_windows);
  f("spread_pct", m.spread_pct);
  f("split", m.split);
  f("loss", m.loss);
  f("peak_mem_bytes", m.peak_mem_bytes);
  f("device_mem_bytes", m.device_mem_bytes);
  f("gpu_busy_pct", m.gpu_busy_pct);
  f("trace_path", m.trace_path);
  f("eager_fallback", m.eager_fallback);
  f("notes", m.notes);
  f("model_flops_per_sample", m.model_flops_per_sample);
  f("peak_flops_per_s", m.peak_flops_per_s);
  f("peak_precision", m.peak_precision);
  f("peak_source", m.peak_source);
  f("peak_under_load", m.peak_under_load);
  f("page_faults_per_step", m.page_faults_per_step);
  f("system_time_pct", m.system_time_pct);
  f("cpu_cores_busy", m.cpu_cores_busy);
  f("peak_rss_bytes", m.peak_rss_bytes);
  f("trace_verdict", m.trace_verdict);
}

}  // namespace

Json measurement_json(const Measurement& m) {
  Json j = Json::object();
  for_each_member(m, [&](const char* key, const auto& v) { j[key] = value_json(v); });
  return j;
}

Measurement measurement_from_json(const Json& j) {
  Measurement m;
  for_each_member(m, [&](const char* key, auto& v) {
    const auto it = j.find(key);
    if (it == j.end()) throw std::invalid_argument(std::string("a measurement without \"") + key + "\"");
    read_value(*it, v);
  });
  return m;
}

}  // namespace ptune::measure
