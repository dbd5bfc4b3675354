#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/errors.hpp"
#include "report/figures.hpp"
#include "report/results.hpp"

/// The results document's one codec (docs/results.md): to_json writes a sweep's Results,
/// results_from_json reads such a document back into the same type, so that a saved run renders
/// as the sweep that wrote it did (`ptune report --format`). A key is added to both here.

namespace ptune::report {
namespace {

using Json = nlohmann::ordered_json;

double round_to(double v, int digits) {
  double p = std::pow(10.0, digits);
  return std::round(v * p) / p;
}

/// `v` to `significant` significant digits: times from a data-loading row's microseconds to a
/// slow row's seconds keep their precision (a fixed 0.001 ms wrote such a row's windows as 0).
double round_significant(double v, int significant) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int magnitude = static_cast<int>(std::floor(std::log10(std::abs(v))));
  return round_to(v, std::clamp(significant - 1 - magnitude, 0, 12));
}

}  // namespace

const std::vector<std::string>& row_keys() {
  static const std::vector<std::string> kKeys = {"name",
                                                 "changes",
                                                 "mode",
                                                 "arch",
                                                 "num_workers",
                                                 "batch_size",
                                                 "steps",
                                                 "windows",
                                                 "ms_per_step",
                                                 "repeat_ms_per_step",
                                                 "repeat_process",
                                                 "spread_pct",
                                                 "samples_per_s",
                                                 "samples_per_s_lo",
                                                 "samples_per_s_hi",
                                                 "samples_per_s_interval",
                                                 "speedup_vs_prev",
                                                 "speedup_vs_prev_lo",
                                                 "speedup_vs_prev_hi",
                                                 "speedup_vs_prev_interval",
                                                 "verdict_vs_prev",
                                                 "speedup_vs_base",
                                                 "speedup_vs_base_lo",
                                                 "speedup_vs_base_hi",
                                                 "speedup_vs_base_interval",
                                                 "verdict_vs_base",
                                                 "compared_with",
                                                 "interleaved",
                                                 "prev_ms_per_step",
                                                 "prev_process",
                                                 "under_load",
                                                 "other_cpu_cores",
                                                 "steal_pct",
                                                 "load_average",
                                                 "gpu_other_processes",
                                                 "gpu_notes",
                                                 "data_wait_pct",
                                                 "h2d_pct",
                                                 "compute_pct",
                                                 "page_faults_per_step",
                                                 "system_time_pct",
                                                 "cpu_cores_busy",
                                                 "peak_rss_bytes",
                                                 "model_flops_per_sample",
                                                 "flops_per_s",
                                                 "peak_flops_per_s",
                                                 "pct_of_peak",
                                                 "peak_precision",
                                                 "peak_source",
                                                 "peak_under_load",
                                                 "peak_mem_bytes",
                                                 "device_mem_bytes",
                                                 "gpu_busy_pct",
                                                 "trace",
                                                 "loss",
                                                 "loss_curve",
                                                 "diagnosis",
                                                 "notes",
                                                 "status"};
  return kKeys;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> kColumns = [] {
    std::vector<std::string> c = {"index"};
    for (const auto& k : row_keys())
      if (k != "repeat_ms_per_step" && k != "repeat_process" && k != "loss_curve" &&
          k != "prev_ms_per_step" && k != "prev_process")
        c.push_back(k);
    return c;
  }();
  return kColumns;
}

namespace {

/// A row's load keys (docs/results.md).
void load_json(Json& j, const system::LoadReport& load) {
  if (load.sampled || load.gpu_sampled) j["under_load"] = load.under_load;
  if (load.sampled) {
    j["other_cpu_cores"] = round_to(load.other_cpu_cores, 3);
    j["steal_pct"] = round_to(load.steal_pct, 2);
    j["load_average"] = round_to(load.loadavg_1m, 2);
  }
  if (load.gpu_other_processes) j["gpu_other_processes"] = *load.gpu_other_processes;
  if (load.gpu_sampled) j["gpu_notes"] = load.gpu_notes;  // null: the GPU's view was not read
}

/// A measured row's FLOP/s and peak keys (docs/results.md).
void flops_json(Json& j, const Row& row) {
  const auto& m = *row.m;
  if (m.model_flops_per_sample) j["model_flops_per_sample"] = std::round(*m.model_flops_per_sample);
  if (const auto achieved = achieved_flops(row)) j["flops_per_s"] = std::round(*achieved);
  if (m.peak_flops_per_s) j["peak_flops_per_s"] = std::round(*m.peak_flops_per_s);
  if (const auto p = pct_of_peak(row)) j["pct_of_peak"] = round_to(*p, 2);
  if (!m.peak_precision.empty()) j["peak_precision"] = m.peak_precision;
  if (!m.peak_source.empty()) j["peak_source"] = m.peak_source;
  if (m.peak_flops_per_s) j["peak_under_load"] = m.peak_under_load;
}

}  // namespace

Json to_json(const Results& r) {
  Json rows = Json::array();
  for (const auto& row : r.rows) {
    Json j;
    for (const auto& k : row_keys()) j[k] = nullptr;  // every key, in order; null = no value
    j["name"] = row.name;
    j["changes"] = row.changes.is_null() ? Json::object() : row.changes;
    j["mode"] = config::name(row.mode);
    if (!row.arch.empty()) j["arch"] = row.arch;
    if (row.num_workers) j["num_workers"] = *row.num_workers;
    if (row.m) {
      const auto& m = *row.m;
      // What a file of another program did not say stays null (report reads such files).
      if (m.batch_size > 0) j["batch_size"] = m.batch_size;
      if (m.steps > 0) j["steps"] = m.steps;
      if (!m.repeat_ms.empty()) j["windows"] = static_cast<int64_t>(m.repeat_ms.size());
      if (const double ms = printed_ms_per_step(row); ms > 0) j["ms_per_step"] = round_significant(ms, 6);
      j["repeat_ms_per_step"] = Json::array();
      for (double v : m.repeat_ms) j["repeat_ms_per_step"].push_back(round_significant(v, 6));
      if (!m.repeat_process.empty()) j["repeat_process"] = m.repeat_process;
      j["spread_pct"] = round_to(m.spread_pct, 2);
      // The interval's text beside its bounds: every output prints this one text (figures.hpp).
      auto interval = [&](const std::string& key, const stats::Interval& ci, int digits) {
        if (!ci.valid()) return;
        j[key + "_lo"] = round_to(ci.lo, digits);
        j[key + "_hi"] = round_to(ci.hi, digits);
        // No text where the interval has no finite printing (an upper bound past a double's
        // range, from a t-quantile of very few degrees of freedom): null, as every writer prints
        // the figure alone then.
        if (const std::string text = interval_text(ci); !text.empty()) j[key + "_interval"] = text.substr(1);
      };
      const stats::Interval rate = printed_rate(row);
      j["samples_per_s"] = round_to(rate.point, 2);
      interval("samples_per_s", rate, 2);
      j["speedup_vs_prev"] = round_to(row.speedup_vs_prev, 4);
      interval("speedup_vs_prev", row.prev_ci, 4);
      if (!row.verdict_prev.empty()) j["verdict_vs_prev"] = row.verdict_prev;
      j["speedup_vs_base"] = round_to(row.speedup_vs_base, 4);
      interval("speedup_vs_base", row.base_ci, 4);
      if (!row.verdict_base.empty()) j["verdict_vs_base"] = row.verdict_base;
      if (row.compared_with) j["compared_with"] = static_cast<int64_t>(*row.compared_with);
      j["interleaved"] = !row.prev_ms.empty();
      if (!row.prev_ms.empty()) {
        j["prev_ms_per_step"] = Json::array();
        for (double v : row.prev_ms) j["prev_ms_per_step"].push_back(round_significant(v, 6));
        if (!row.prev_process.empty()) j["prev_process"] = row.prev_process;
      }
      load_json(j, m.load);
      if (m.split) {
        j["data_wait_pct"] = round_to(m.split->data_wait_pct, 2);
        j["h2d_pct"] = round_to(m.split->h2d_pct, 2);
        j["compute_pct"] = round_to(m.split->compute_pct, 2);
      }
      if (m.page_faults_per_step) j["page_faults_per_step"] = round_to(*m.page_faults_per_step, 1);
      if (m.system_time_pct) j["system_time_pct"] = round_to(*m.system_time_pct, 1);
      if (m.cpu_cores_busy) j["cpu_cores_busy"] = round_to(*m.cpu_cores_busy, 2);
      if (m.peak_rss_bytes) j["peak_rss_bytes"] = *m.peak_rss_bytes;
      flops_json(j, row);
      if (m.peak_mem_bytes) j["peak_mem_bytes"] = *m.peak_mem_bytes;
      if (m.device_mem_bytes) j["device_mem_bytes"] = *m.device_mem_bytes;
      if (m.gpu_busy_pct) j["gpu_busy_pct"] = round_to(*m.gpu_busy_pct, 2);
      if (!m.trace_path.empty()) j["trace"] = m.trace_path;
      if (m.loss) j["loss"] = round_to(*m.loss, 6);
    }
    if (!row.loss_curve.empty()) {
      j["loss_curve"] = Json::array();
      for (double v : row.loss_curve) j["loss_curve"].push_back(round_to(v, 6));
    }
    if (!row.diagnosis.empty()) j["diagnosis"] = row.diagnosis;
    j["notes"] = row.notes;
    j["status"] = row.status.text();
    rows.push_back(j);
  }
  const Environment& e = r.environment;
  return Json{{"ptune_version", kVersion},
              {"config", r.config},
              {"environment", Json{{"torch", e.torch},
                                   {"device", e.device},
                                   {"device_kind", e.device_kind},
                                   {"cuda", e.cuda.empty() ? Json(nullptr) : Json(e.cuda)},
                                   {"cpu_threads", e.cpu_threads > 0 ? Json(e.cpu_threads) : Json(nullptr)},
                                   {"world_size", e.world_size > 0 ? Json(e.world_size) : Json(nullptr)},
                                   {"cpu", e.cpu ? Json(system::cpu_json(*e.cpu)) : Json(nullptr)}}},
              {"rows", rows},
              {"status", run_status_text(r.status)}};
}

namespace {

std::optional<double> number(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>()) : std::nullopt;
}

std::optional<int64_t> integer(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? std::optional<int64_t>(it->get<int64_t>()) : std::nullopt;
}

std::string text(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// The object at `key`; an empty one when absent or of another type.
Json object_at(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : Json::object();
}

bool flag(const Json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

template <typename T>
std::vector<T> list(const Json& j, const std::string& key) {
  std::vector<T> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    } else if constexpr (std::is_integral_v<T>) {  // process numbers: whole, or left out
      if (v.is_number_integer()) out.push_back(v.get<T>());
    } else if (v.is_number()) {
      out.push_back(v.get<T>());
    }
  }
  return out;
}

/// The interval `key` with `key`_lo and `key`_hi at `level` (none without both bounds), printed
/// as `key`_interval says. A lower bound the file rounded to 0 (a t-quantile of few degrees of
/// freedom) is kept as the smallest positive number, so that the interval still prints.
stats::Interval interval_of(const Json& j, const std::string& key, double level) {
  stats::Interval i;
  i.point = number(j, key).value_or(0);
  const auto lo = number(j, key + "_lo"), hi = number(j, key + "_hi");
  if (!lo || !hi || *hi < *lo) return i;
  i.lo = *lo > 0 ? *lo : std::numeric_limits<double>::denorm_min();
  i.hi = *hi, i.level = level, i.n = 2;
  if (const std::string t = text(j, key + "_interval"); !t.empty()) i.text = " " + t;
  return i;
}

system::LoadReport load_of(const Json& j) {
  system::LoadReport l;
  l.sampled = number(j, "other_cpu_cores").has_value();
  l.other_cpu_cores = number(j, "other_cpu_cores").value_or(0);
  l.steal_pct = number(j, "steal_pct").value_or(0);
  l.loadavg_1m = number(j, "load_average").value_or(0);
  l.under_load = flag(j, "under_load");
  l.gpu_other_processes = integer(j, "gpu_other_processes");
  l.gpu_sampled = j.contains("gpu_notes") && j["gpu_notes"].is_array();
  l.gpu_notes = list<std::string>(j, "gpu_notes");
  return l;
}

measure::Measurement measurement_of(const Json& j) {
  measure::Measurement m;
  m.batch_size = integer(j, "batch_size").value_or(0);
  m.steps = integer(j, "steps").value_or(0);
  m.ms_per_step = number(j, "ms_per_step").value_or(0);
  m.samples_per_s_ci = interval_of(j, "samples_per_s", stats::kRowLevel);
  m.samples_per_s = m.samples_per_s_ci.point;
  m.repeat_ms = list<double>(j, "repeat_ms_per_step");
  m.repeat_process = list<int>(j, "repeat_process");
  m.spread_pct = number(j, "spread_pct").value_or(0);
  m.load = load_of(j);
  if (const auto wait = number(j, "data_wait_pct"), h2d = number(j, "h2d_pct"); wait || h2d) {
    // compute_pct absent (a file that gives the wait and the copy alone): the rest of the step.
    const double w = wait.value_or(0), c = h2d.value_or(0);
    m.split =
        measure::Measurement::StepSplit{w, c, number(j, "compute_pct").value_or(std::max(0.0, 100 - w - c))};
  }
  m.page_faults_per_step = number(j, "page_faults_per_step");
  m.system_time_pct = number(j, "system_time_pct");
  m.cpu_cores_busy = number(j, "cpu_cores_busy");
  m.peak_rss_bytes = integer(j, "peak_rss_bytes");
  m.model_flops_per_sample = number(j, "model_flops_per_sample");
  m.peak_flops_per_s = number(j, "peak_flops_per_s");
  m.peak_precision = text(j, "peak_precision");
  m.peak_source = text(j, "peak_source");
  m.peak_under_load = flag(j, "peak_under_load");
  m.peak_mem_bytes = integer(j, "peak_mem_bytes");
  m.device_mem_bytes = integer(j, "device_mem_bytes");
  m.gpu_busy_pct = number(j, "gpu_busy_pct");
  m.trace_path = text(j, "trace");
  m.loss = number(j, "loss");
  return m;
}

/// The noise rule the rows' verdicts used: the config's measure keys, as each row's cumulative
/// changes left them.
stats::NoiseRule rule_of(const Json& measure, const Json& changes, stats::NoiseRule rule) {
  if (const auto t = number(measure, "target_ci_pct")) rule.target_pct = *t;
  if (const auto f = number(measure, "noise_pct")) rule.floor_pct = *f;
  if (const auto t = number(changes, "measure.target_ci_pct")) rule.target_pct = *t;
  if (const auto f = number(changes, "measure.noise_pct")) rule.floor_pct = *f;
  return rule;
}

Row row_of(const Json& j, stats::NoiseRule& rule, const Json& measure_cfg) {
  Row row;
  row.name = text(j, "name");
  row.changes = object_at(j, "changes");
  row.mode = config::enum_from<config::Mode>(text(j, "mode")).value_or(config::Mode::kTrain);
  row.arch = text(j, "arch");
  row.num_workers = integer(j, "num_workers");
  row.status = RowStatus::from_text(text(j, "status"));
  rule = rule_of(measure_cfg, row.changes, rule);
  row.rule = rule;
  if (number(j, "samples_per_s")) {
    const double level = flag(j, "under_load") ? stats::kSpeedupLevelUnderLoad : stats::kSpeedupLevel;
    row.m = measurement_of(j);
    row.rate = row.m->samples_per_s_ci;
    row.speedup_vs_prev = number(j, "speedup_vs_prev").value_or(0);
    row.prev_ci = interval_of(j, "speedup_vs_prev", level);
    row.verdict_prev = text(j, "verdict_vs_prev");
    row.speedup_vs_base = number(j, "speedup_vs_base").value_or(0);
    row.base_ci = interval_of(j, "speedup_vs_base", level);
    row.verdict_base = text(j, "verdict_vs_base");
    if (const auto c = integer(j, "compared_with"); c && *c >= 0) row.compared_with = static_cast<size_t>(*c);
    row.prev_ms = list<double>(j, "prev_ms_per_step");
    row.prev_process = list<int>(j, "prev_process");
  }
  row.diagnosis = text(j, "diagnosis");
  row.notes = list<std::string>(j, "notes");
  row.loss_curve = list<double>(j, "loss_curve");
  return row;
}

system::CpuInfo cpu_of(const Json& j) {
  system::CpuInfo c;
  c.model = text(j, "model");
  c.arch = text(j, "arch");
  c.aten_isa = text(j, "aten_isa");
  c.onednn_isa = text(j, "onednn_isa");
  c.bf16_native = flag(j, "bf16_native");
  c.fp16_native = flag(j, "fp16_native");
  c.amx = flag(j, "amx");
  c.bf16_flag = text(j, "bf16_flag");
  c.bf16_capped = text(j, "bf16_capped");
  c.physical_cores = integer(j, "physical_cores").value_or(0);
  c.logical_cores = integer(j, "logical_cores").value_or(0);
  c.caps = list<std::string>(j, "caps");
  return c;
}

}  // namespace

Results results_from_json(const Json& doc) {
  Results r;
  r.config = object_at(doc, "config");
  const Json env = object_at(doc, "environment");
  Environment& e = r.environment;
  e.torch = text(env, "torch");
  e.device = text(env, "device");
  e.device_kind = text(env, "device_kind");
  e.cuda = text(env, "cuda");
  e.cpu_threads = integer(env, "cpu_threads").value_or(0);
  e.world_size = integer(env, "world_size").value_or(0);
  if (env.contains("cpu") && env["cpu"].is_object()) e.cpu = cpu_of(env["cpu"]);
  const Json measure_cfg = object_at(r.config, "measure");
  stats::NoiseRule rule;
  if (doc.contains("rows") && doc["rows"].is_array())
    for (const auto& j : doc["rows"]) r.rows.push_back(row_of(j, rule, measure_cfg));
  const std::string status = text(doc, "status");
  r.status = status == "complete"      ? RunStatus::kComplete
             : status == "interrupted" ? RunStatus::kInterrupted
                                       : RunStatus::kRunning;
  return r;
}

}  // namespace ptune::report
