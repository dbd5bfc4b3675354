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
                                 return n.find(" windows were outliers") != std::string::npos;
                               }),
                m.notes.end());
  const auto odd = stats::outliers(window_ms);
  if (!odd.empty()) {
    std::string list;
    for (size_t i : odd) list += (list.empty() ? "" : ", ") + std::to_string(i + 1);
    m.notes.push_back(std::to_string(odd.size()) + " of " + std::to_string(window_ms.size()) +
                      " windows were outliers (window " + list +
                      ", far from the median): something else may have run then; they are kept");
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

Json interval_json(const stats::Interval& i) {
  return {{"point", i.point}, {"lo", i.lo}, {"hi", i.hi}, {"n", i.n}, {"level", i.level}};
}

stats::Interval interval_from(const Json& j) {
  stats::Interval i;
  i.point = j.value("point", 0.0);
  i.lo = j.value("lo", 0.0);
  i.hi = j.value("hi", 0.0);
  i.n = j.value("n", int64_t{0});
  i.level = j.value("level", 0.0);
  return i;
}

template <class T>
Json optional_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

template <class T>
std::optional<T> optional_from(const Json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

}  // namespace

Json measurement_json(const Measurement& m) {
  return {{"batch_size", m.batch_size},
          {"steps", m.steps},
          {"ms_per_step", m.ms_per_step},
          {"samples_per_s", m.samples_per_s},
          {"samples_per_s_ci", interval_json(m.samples_per_s_ci)},
          {"repeat_ms", m.repeat_ms},
          {"transient_windows", m.transient_windows},
          {"short_windows", m.short_windows},
          {"spread_pct", m.spread_pct},
          {"data_wait_pct", m.split ? Json(m.split->data_wait_pct) : Json(nullptr)},
          {"h2d_pct", m.split ? Json(m.split->h2d_pct) : Json(nullptr)},
          {"compute_pct", m.split ? Json(m.split->compute_pct) : Json(nullptr)},
          {"loss", optional_json(m.loss)},
          {"peak_mem_bytes", optional_json(m.peak_mem_bytes)},
          {"device_mem_bytes", optional_json(m.device_mem_bytes)},
          {"gpu_busy_pct", optional_json(m.gpu_busy_pct)},
          {"trace_path", m.trace_path},
          {"eager_fallback", m.eager_fallback},
          {"notes", m.notes},
          {"model_flops_per_sample", optional_json(m.model_flops_per_sample)},
          {"peak_flops_per_s", optional_json(m.peak_flops_per_s)},
          {"peak_precision", m.peak_precision},
          {"peak_source", m.peak_source},
          {"peak_under_load", m.peak_under_load},
          {"page_faults_per_step", optional_json(m.page_faults_per_step)},
          {"system_time_pct", optional_json(m.system_time_pct)}};
}

Measurement measurement_from_json(const Json& j) {
  Measurement m;
  m.batch_size = j.at("batch_size").get<int64_t>();
  m.steps = j.at("steps").get<int64_t>();
  m.ms_per_step = j.at("ms_per_step").get<double>();
  m.samples_per_s = j.at("samples_per_s").get<double>();
  m.samples_per_s_ci = interval_from(j.at("samples_per_s_ci"));
  m.repeat_ms = j.at("repeat_ms").get<std::vector<double>>();
  m.transient_windows = j.value("transient_windows", int64_t{0});
  m.short_windows = j.value("short_windows", int64_t{0});
  m.spread_pct = j.value("spread_pct", 0.0);
  if (const auto wait = optional_from<double>(j, "data_wait_pct"))
    m.split = Measurement::StepSplit{*wait, optional_from<double>(j, "h2d_pct").value_or(0),
                                     optional_from<double>(j, "compute_pct").value_or(0)};
  m.loss = optional_from<double>(j, "loss");
  m.peak_mem_bytes = optional_from<int64_t>(j, "peak_mem_bytes");
  m.device_mem_bytes = optional_from<int64_t>(j, "device_mem_bytes");
  m.gpu_busy_pct = optional_from<double>(j, "gpu_busy_pct");
  m.trace_path = j.value("trace_path", std::string());
  m.eager_fallback = j.value("eager_fallback", std::string());
  m.notes = j.value("notes", std::vector<std::string>{});
  m.model_flops_per_sample = optional_from<double>(j, "model_flops_per_sample");
  m.peak_flops_per_s = optional_from<double>(j, "peak_flops_per_s");
  m.peak_precision = j.value("peak_precision", std::string());
  m.peak_source = j.value("peak_source", std::string());
  m.peak_under_load = j.value("peak_under_load", false);
  m.page_faults_per_step = optional_from<double>(j, "page_faults_per_step");
  m.system_time_pct = optional_from<double>(j, "system_time_pct");
  return m;
}

}  // namespace ptune::measure
