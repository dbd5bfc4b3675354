#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/errors.hpp"
#include "report/figures.hpp"
#include "report/results.hpp"

/// The results document's one codec (docs/results.md), driven by one table of the row's keys
/// (fields()): each entry is a key, what it holds, its writer and its reader side by side. to_json
/// writes a sweep's Results through it, results_from_json reads a document back into the same
/// type (a saved run renders as the sweep that wrote it did: `ptune report --format`), and the
/// key list, the CSV's columns and the check of files read (run_file's normalize) are made from
/// it. A key is one entry there (and its line in docs/results.md).

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

// ---- the row's fields: one entry per key, its writer beside its reader ------------------------

/// How a row's keys are read: `level` is its speedups' confidence level (under load or not).
struct ReadContext {
  double level = stats::kSpeedupLevel;
};

struct RowField {
  const char* key;
  KeyKind kind;
  bool measured;                  // written and read only for a row with numbers (Row::m)
  Json (*write)(const Row& row);  // null: no value
  void (*read)(const Json& j, Row& row, const ReadContext& c);  // nullptr: read with another key
};

template <typename T>
Json opt(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}
Json opt_round(const std::optional<double>& v, int digits) {
  return v ? Json(round_to(*v, digits)) : Json(nullptr);
}
Json nonempty(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }
Json windows_json(const std::vector<double>& ms) {
  Json a = Json::array();
  for (double v : ms) a.push_back(round_significant(v, 6));
  return a;
}

/// An interval's bound, rounded to `digits`; null without an interval.
Json bound(const stats::Interval& ci, bool hi, int digits) {
  return ci.valid() ? Json(round_to(hi ? ci.hi : ci.lo, digits)) : Json(nullptr);
}
/// An interval's text as every output prints it (figures.hpp); null without an interval or
/// where it has no finite printing (an upper bound past a double's range, from a t-quantile of
/// very few degrees of freedom): every writer prints the figure alone then.
Json interval_json(const stats::Interval& ci) {
  if (!ci.valid()) return nullptr;
  const std::string t = interval_text(ci);
  return t.empty() ? Json(nullptr) : Json(t.substr(1));
}

/// The step split of a row that gives the wait or the copy; compute_pct absent (a file that gives
/// those two alone): the rest of the step.
measure::Measurement::StepSplit split_of(const Json& j) {
  const double w = number(j, "data_wait_pct").value_or(0), c = number(j, "h2d_pct").value_or(0);
  return {w, c, number(j, "compute_pct").value_or(std::max(0.0, 100 - w - c))};
}

using Ctx = ReadContext;

const std::vector<RowField>& fields() {
  using K = KeyKind;
  static const std::vector<RowField> kFields = {
      {"index", K::kNumber, false, [](const Row& r) { return r.index ? Json(*r.index) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) {
         if (const auto i = integer(j, "index"); i && *i >= 0) r.index = static_cast<size_t>(*i);
       }},
      {"name", K::kText, false, [](const Row& r) { return Json(r.name); },
       [](const Json& j, Row& r, const Ctx&) { r.name = text(j, "name"); }},
      {"changes", K::kObject, false,
       [](const Row& r) { return r.changes.is_null() ? Json::object() : r.changes; },
       [](const Json& j, Row& r, const Ctx&) { r.changes = object_at(j, "changes"); }},
      {"mode", K::kText, false, [](const Row& r) { return Json(config::name(r.mode)); },
       [](const Json& j, Row& r, const Ctx&) {
         r.mode = config::enum_from<config::Mode>(text(j, "mode")).value_or(config::Mode::kTrain);
       }},
      {"arch", K::kText, false, [](const Row& r) { return nonempty(r.arch); },
       [](const Json& j, Row& r, const Ctx&) { r.arch = text(j, "arch"); }},
      {"num_workers", K::kNumber, false, [](const Row& r) { return opt(r.num_workers); },
       [](const Json& j, Row& r, const Ctx&) { r.num_workers = integer(j, "num_workers"); }},
      // What a file of another program did not say stays null (report reads such files).
      {"batch_size", K::kNumber, true,
       [](const Row& r) { return r.m->batch_size > 0 ? Json(r.m->batch_size) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) { r.m->batch_size = integer(j, "batch_size").value_or(0); }},
      {"steps", K::kNumber, true,
       [](const Row& r) { return r.m->steps > 0 ? Json(r.m->steps) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) { r.m->steps = integer(j, "steps").value_or(0); }},
      {"windows", K::kNumber, true,  // read as repeat_ms_per_step's length
       [](const Row& r) {
         return r.m->repeat_ms.empty() ? Json(nullptr) : Json(static_cast<int64_t>(r.m->repeat_ms.size()));
       },
       nullptr},
      {"ms_per_step", K::kFigure, true,
       [](const Row& r) {
         const double ms = printed_ms_per_step(r);
         return ms > 0 ? Json(round_significant(ms, 6)) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) { r.m->ms_per_step = number(j, "ms_per_step").value_or(0); }},
      {"repeat_ms_per_step", K::kWindows, true, [](const Row& r) { return windows_json(r.m->repeat_ms); },
       [](const Json& j, Row& r, const Ctx&) { r.m->repeat_ms = list<double>(j, "repeat_ms_per_step"); }},
      {"repeat_process", K::kNumbers, true,
       [](const Row& r) { return r.m->repeat_process.empty() ? Json(nullptr) : Json(r.m->repeat_process); },
       [](const Json& j, Row& r, const Ctx&) { r.m->repeat_process = list<int>(j, "repeat_process"); }},
      {"spread_pct", K::kNumber, true, [](const Row& r) { return Json(round_to(r.m->spread_pct, 2)); },
       [](const Json& j, Row& r, const Ctx&) { r.m->spread_pct = number(j, "spread_pct").value_or(0); }},
      // Each figure with its interval: its point, bounds and the text every output prints.
      {"samples_per_s", K::kFigure, true,
       [](const Row& r) { return Json(round_to(printed_rate(r).point, 2)); },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->samples_per_s_ci = interval_of(j, "samples_per_s", stats::kRowLevel);
         r.m->samples_per_s = r.m->samples_per_s_ci.point;
         r.rate = r.m->samples_per_s_ci;
       }},
      {"samples_per_s_lo", K::kBound, true, [](const Row& r) { return bound(printed_rate(r), false, 2); },
       nullptr},
      {"samples_per_s_hi", K::kBound, true, [](const Row& r) { return bound(printed_rate(r), true, 2); },
       nullptr},
      {"samples_per_s_interval", K::kText, true, [](const Row& r) { return interval_json(printed_rate(r)); },
       nullptr},
      {"speedup_vs_prev", K::kFigure, true, [](const Row& r) { return Json(round_to(r.speedup_vs_prev, 4)); },
       [](const Json& j, Row& r, const Ctx& c) {
         r.speedup_vs_prev = number(j, "speedup_vs_prev").value_or(0);
         r.prev_ci = interval_of(j, "speedup_vs_prev", c.level);
       }},
      {"speedup_vs_prev_lo", K::kBound, true, [](const Row& r) { return bound(r.prev_ci, false, 4); },
       nullptr},
      {"speedup_vs_prev_hi", K::kBound, true, [](const Row& r) { return bound(r.prev_ci, true, 4); },
       nullptr},
      {"speedup_vs_prev_interval", K::kText, true, [](const Row& r) { return interval_json(r.prev_ci); },
       nullptr},
      {"verdict_vs_prev", K::kText, true, [](const Row& r) { return nonempty(r.verdict_prev); },
       [](const Json& j, Row& r, const Ctx&) { r.verdict_prev = text(j, "verdict_vs_prev"); }},
      {"speedup_vs_base", K::kFigure, true, [](const Row& r) { return Json(round_to(r.speedup_vs_base, 4)); },
       [](const Json& j, Row& r, const Ctx& c) {
         r.speedup_vs_base = number(j, "speedup_vs_base").value_or(0);
         r.base_ci = interval_of(j, "speedup_vs_base", c.level);
       }},
      {"speedup_vs_base_lo", K::kBound, true, [](const Row& r) { return bound(r.base_ci, false, 4); },
       nullptr},
      {"speedup_vs_base_hi", K::kBound, true, [](const Row& r) { return bound(r.base_ci, true, 4); },
       nullptr},
      {"speedup_vs_base_interval", K::kText, true, [](const Row& r) { return interval_json(r.base_ci); },
       nullptr},
      {"verdict_vs_base", K::kText, true, [](const Row& r) { return nonempty(r.verdict_base); },
       [](const Json& j, Row& r, const Ctx&) { r.verdict_base = text(j, "verdict_vs_base"); }},
      {"compared_with", K::kNumber, true,
       [](const Row& r) {
         return r.compared_with ? Json(static_cast<int64_t>(*r.compared_with)) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) {
         if (const auto c = integer(j, "compared_with"); c && *c >= 0)
           r.compared_with = static_cast<size_t>(*c);
       }},
      {"interleaved", K::kFlag, true,  // read as prev_ms_per_step holding pairs
       [](const Row& r) { return Json(!r.prev_ms.empty()); }, nullptr},
      {"prev_ms_per_step", K::kWindows, true,
       [](const Row& r) { return r.prev_ms.empty() ? Json(nullptr) : windows_json(r.prev_ms); },
       [](const Json& j, Row& r, const Ctx&) { r.prev_ms = list<double>(j, "prev_ms_per_step"); }},
      {"prev_process", K::kNumbers, true,
       [](const Row& r) {
         return r.prev_ms.empty() || r.prev_process.empty() ? Json(nullptr) : Json(r.prev_process);
       },
       [](const Json& j, Row& r, const Ctx&) { r.prev_process = list<int>(j, "prev_process"); }},
      // The load (docs/results.md): what else ran while the row was timed.
      {"under_load", K::kFlag, true,
       [](const Row& r) {
         const auto& l = r.m->load;
         return l.sampled || l.gpu_sampled ? Json(l.under_load) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) { r.m->load.under_load = flag(j, "under_load"); }},
      {"other_cpu_cores", K::kNumber, true,
       [](const Row& r) {
         return r.m->load.sampled ? Json(round_to(r.m->load.other_cpu_cores, 3)) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) {
         const auto v = number(j, "other_cpu_cores");
         r.m->load.sampled = v.has_value();
         r.m->load.other_cpu_cores = v.value_or(0);
       }},
      {"steal_pct", K::kNumber, true,
       [](const Row& r) {
         return r.m->load.sampled ? Json(round_to(r.m->load.steal_pct, 2)) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) { r.m->load.steal_pct = number(j, "steal_pct").value_or(0); }},
      {"load_average", K::kNumber, true,
       [](const Row& r) {
         return r.m->load.sampled ? Json(round_to(r.m->load.loadavg_1m, 2)) : Json(nullptr);
       },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->load.loadavg_1m = number(j, "load_average").value_or(0);
       }},
      {"gpu_other_processes", K::kNumber, true,
       [](const Row& r) { return opt(r.m->load.gpu_other_processes); },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->load.gpu_other_processes = integer(j, "gpu_other_processes");
       }},
      {"gpu_notes", K::kTexts, true,  // null: the GPU's view was not read
       [](const Row& r) { return r.m->load.gpu_sampled ? Json(r.m->load.gpu_notes) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->load.gpu_sampled = j.contains("gpu_notes") && j["gpu_notes"].is_array();
         r.m->load.gpu_notes = list<std::string>(j, "gpu_notes");
       }},
      // The step split: the three shares together, or none.
      {"data_wait_pct", K::kNumber, true,
       [](const Row& r) { return r.m->split ? Json(round_to(r.m->split->data_wait_pct, 2)) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) {
         if (number(j, "data_wait_pct") || number(j, "h2d_pct")) r.m->split = split_of(j);
       }},
      {"h2d_pct", K::kNumber, true,
       [](const Row& r) { return r.m->split ? Json(round_to(r.m->split->h2d_pct, 2)) : Json(nullptr); },
       nullptr},
      {"compute_pct", K::kNumber, true,
       [](const Row& r) { return r.m->split ? Json(round_to(r.m->split->compute_pct, 2)) : Json(nullptr); },
       nullptr},
      {"page_faults_per_step", K::kNumber, true,
       [](const Row& r) { return opt_round(r.m->page_faults_per_step, 1); },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->page_faults_per_step = number(j, "page_faults_per_step");
       }},
      {"system_time_pct", K::kNumber, true, [](const Row& r) { return opt_round(r.m->system_time_pct, 1); },
       [](const Json& j, Row& r, const Ctx&) { r.m->system_time_pct = number(j, "system_time_pct"); }},
      {"cpu_cores_busy", K::kNumber, true, [](const Row& r) { return opt_round(r.m->cpu_cores_busy, 2); },
       [](const Json& j, Row& r, const Ctx&) { r.m->cpu_cores_busy = number(j, "cpu_cores_busy"); }},
      {"peak_rss_bytes", K::kNumber, true, [](const Row& r) { return opt(r.m->peak_rss_bytes); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_rss_bytes = integer(j, "peak_rss_bytes"); }},
      // How far from the limit; FLOP/s and % peak are read again from the samples/s written.
      {"model_flops_per_sample", K::kNumber, true,
       [](const Row& r) { return opt_round(r.m->model_flops_per_sample, 0); },
       [](const Json& j, Row& r, const Ctx&) {
         r.m->model_flops_per_sample = number(j, "model_flops_per_sample");
       }},
      {"flops_per_s", K::kNumber, true, [](const Row& r) { return opt_round(achieved_flops(r), 0); },
       nullptr},
      {"peak_flops_per_s", K::kNumber, true, [](const Row& r) { return opt_round(r.m->peak_flops_per_s, 0); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_flops_per_s = number(j, "peak_flops_per_s"); }},
      {"pct_of_peak", K::kNumber, true, [](const Row& r) { return opt_round(pct_of_peak(r), 2); }, nullptr},
      {"peak_precision", K::kText, true, [](const Row& r) { return nonempty(r.m->peak_precision); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_precision = text(j, "peak_precision"); }},
      {"peak_source", K::kText, true, [](const Row& r) { return nonempty(r.m->peak_source); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_source = text(j, "peak_source"); }},
      {"peak_under_load", K::kFlag, true,
       [](const Row& r) { return r.m->peak_flops_per_s ? Json(r.m->peak_under_load) : Json(nullptr); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_under_load = flag(j, "peak_under_load"); }},
      {"peak_mem_bytes", K::kNumber, true, [](const Row& r) { return opt(r.m->peak_mem_bytes); },
       [](const Json& j, Row& r, const Ctx&) { r.m->peak_mem_bytes = integer(j, "peak_mem_bytes"); }},
      {"device_mem_bytes", K::kNumber, true, [](const Row& r) { return opt(r.m->device_mem_bytes); },
       [](const Json& j, Row& r, const Ctx&) { r.m->device_mem_bytes = integer(j, "device_mem_bytes"); }},
      {"gpu_busy_pct", K::kNumber, true, [](const Row& r) { return opt_round(r.m->gpu_busy_pct, 2); },
       [](const Json& j, Row& r, const Ctx&) { r.m->gpu_busy_pct = number(j, "gpu_busy_pct"); }},
      {"trace", K::kText, true, [](const Row& r) { return nonempty(r.m->trace_path); },
       [](const Json& j, Row& r, const Ctx&) { r.m->trace_path = text(j, "trace"); }},
      {"loss", K::kNumber, true, [](const Row& r) { return opt_round(r.m->loss, 6); },
       [](const Json& j, Row& r, const Ctx&) { r.m->loss = number(j, "loss"); }},
      {"loss_curve", K::kNumbers, false,
       [](const Row& r) {
         if (r.loss_curve.empty()) return Json(nullptr);
         Json a = Json::array();
         for (double v : r.loss_curve) a.push_back(round_to(v, 6));
         return a;
       },
       [](const Json& j, Row& r, const Ctx&) { r.loss_curve = list<double>(j, "loss_curve"); }},
      {"diagnosis", K::kText, false, [](const Row& r) { return nonempty(r.diagnosis); },
       [](const Json& j, Row& r, const Ctx&) { r.diagnosis = text(j, "diagnosis"); }},
      {"notes", K::kNotes, false, [](const Row& r) { return Json(r.notes); },
       [](const Json& j, Row& r, const Ctx&) { r.notes = list<std::string>(j, "notes"); }},
      {"status", K::kText, false, [](const Row& r) { return Json(r.status.text()); },
       [](const Json& j, Row& r, const Ctx&) { r.status = RowStatus::from_text(text(j, "status")); }},
  };
  return kFields;
}

}  // namespace

const std::vector<RowKey>& row_key_kinds() {
  static const std::vector<RowKey> kKeys = [] {
    std::vector<RowKey> k;
    for (const auto& f : fields()) k.push_back({f.key, f.kind});
    return k;
  }();
  return kKeys;
}

const std::vector<std::string>& row_keys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> k;
    for (const auto& f : fields()) k.push_back(f.key);
    return k;
  }();
  return kKeys;
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> kColumns = [] {
    std::vector<std::string> c;
    for (const auto& k : row_keys())
      if (k != "repeat_ms_per_step" && k != "repeat_process" && k != "loss_curve" &&
          k != "prev_ms_per_step" && k != "prev_process")
        c.push_back(k);
    return c;
  }();
  return kColumns;
}

Json to_json(const Results& r) {
  Json rows = Json::array();
  for (const auto& row : r.rows) {
    Json j;
    for (const auto& f : fields()) j[f.key] = f.measured && !row.m ? Json(nullptr) : f.write(row);
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
  if (number(j, "samples_per_s")) row.m.emplace();
  const ReadContext c{flag(j, "under_load") ? stats::kSpeedupLevelUnderLoad : stats::kSpeedupLevel};
  for (const auto& f : fields())
    if (f.read && (!f.measured || row.m)) f.read(j, row, c);
  rule = rule_of(measure_cfg, row.changes, rule);
  row.rule = rule;
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
    for (const auto& j : doc["rows"]) {
      r.rows.push_back(row_of(j, rule, measure_cfg));
      // A file written before rows had an index: their place in it.
      if (!r.rows.back().index) r.rows.back().index = r.rows.size() - 1;
    }
  const std::string status = text(doc, "status");
  r.status = status == "complete"      ? RunStatus::kComplete
             : status == "interrupted" ? RunStatus::kInterrupted
                                       : RunStatus::kRunning;
  return r;
}

}  // namespace ptune::report
