#include "tune/tuner.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <new>

#include <c10/util/Exception.h>

#include "core/errors.hpp"
#include "core/table.hpp"
#include "report/changes.hpp"
#include "report/results.hpp"
#include "system/process.hpp"
#include "tune/search.hpp"
#include "tune/sides.hpp"

namespace ptune::tune {
namespace {

using Json = nlohmann::ordered_json;

/// A trial's achieved model FLOP/s: its model FLOPs per sample times the samples/s its line
/// prints; nullopt without either.
std::optional<double> trial_flops(const Trial& t) {
  if (!t.m || !t.m->model_flops_per_sample || !(t.m->samples_per_s > 0)) return std::nullopt;
  return *t.m->model_flops_per_sample * t.m->samples_per_s;
}

/// trial_flops() over the machine's peak in the trial's precision, in %.
std::optional<double> trial_pct_of_peak(const Trial& t) {
  const auto f = trial_flops(t);
  if (!f || !t.m->peak_flops_per_s || !(*t.m->peak_flops_per_s > 0) || t.m->peak_under_load)
    return std::nullopt;
  return 100.0 * *f / *t.m->peak_flops_per_s;
}

}  // namespace

MeasureFn default_measure(const measure::Progress& progress) {
  // What the copies of the function share: whether the primer ran, and its companion.
  struct Primed {
    bool done = false;
    std::unique_ptr<measure::RowSide> companion;
  };
  auto primed = std::make_shared<Primed>();
  return [progress, primed](const config::ExperimentConfig& cfg) {
    // A primer before the first trial, as a sweep's (tune/sweep.cpp says why): the first pipeline
    // of a fresh process runs a little slower than later ones. On a CPU its companion stays
    // alive, idle, while every trial is timed, as a sweep's rows each are beside another live
    // pipeline: under glibc's default malloc where a pipeline's memory lands sets how often its
    // steps fault pages in, and a first trial timed with no other pipeline alive ran 1.5x faster
    // than every later one (an A/A config: the baseline 50 ms a step with no faults, then every
    // trial 72-77 ms with 13,700 faults a step, and workers and uint8 transfer were rejected as
    // 31-35% slower where a sweep finds them 1.00x). On a GPU prime keeps none: its device
    // memory would count against a trial's (the batch-size search).
    if (!primed->done) {
      primed->done = true;
      primed->companion = side_kind(cfg).prime(cfg, progress);
    }
    // Each trial's pipeline on pages no earlier trial used (the memory they freed handed back),
    // as a sweep's rows are.
    system::return_free_memory();
    return tune::measure_row(cfg, progress);
  };
}

ClockFn default_clock() {
  return [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  if (dynamic_cast<const std::bad_alloc*>(&e)) return true;
  const std::string what = message_of(e);
  for (const char* s : {"out of memory", "Out of memory", "OUT OF MEMORY", "OutOfMemory", "not enough memory",
                        "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                        // cuDNN 9 answers a workspace it cannot allocate with no engine at all
                        "unable to find an engine"})
    if (what.find(s) != std::string::npos) return true;
  return false;
}

Json to_json(const TuneResult& r) {
  Json doc = report::to_json(r.path);
  Json trials = Json::array();
  for (const auto& t : r.trials) {
    Json j;
    j["pass"] = t.pass;
    j["name"] = t.name;
    j["set"] = t.set.is_null() ? Json::object() : t.set;
    j["verdict"] = trial_verdict_text(t.verdict);
    j["reason"] = t.reason;
    j["samples_per_s"] = t.m ? Json(std::round(t.m->samples_per_s * 100) / 100) : Json(nullptr);
    j["spread_pct"] = t.m ? Json(std::round(t.m->spread_pct * 100) / 100) : Json(nullptr);
    const auto achieved = trial_flops(t);
    j["flops_per_s"] = achieved ? Json(std::round(*achieved)) : Json(nullptr);
    const auto of_peak = trial_pct_of_peak(t);
    j["pct_of_peak"] = of_peak ? Json(std::round(*of_peak * 100) / 100) : Json(nullptr);
    j["gain_pct"] = t.m && t.pass ? Json(std::round(t.gain_pct * 100) / 100) : Json(nullptr);
    const bool ci = t.m && t.pass && t.speedup.valid();
    j["gain_lo_pct"] = ci ? Json(std::round((t.speedup.lo - 1) * 10000) / 100) : Json(nullptr);
    j["gain_hi_pct"] = ci ? Json(std::round((t.speedup.hi - 1) * 10000) / 100) : Json(nullptr);
    j["noise_verdict"] = t.m && t.pass ? Json(t.noise) : Json(nullptr);
    trials.push_back(std::move(j));
  }
  doc["search"] = Json{{"kind", "greedy"},
                       {"stop_reason", r.stop.text()},
                       {"elapsed_s", std::round(r.elapsed_s * 10) / 10},
                       {"trials", std::move(trials)}};
  doc["best"] = config::to_json(r.best);
  return doc;
}

Json to_json(const BatchSearchResult& r) {
  Json doc = report::to_json(r.table);
  doc["search"] = Json{
      {"kind", "batch-size"}, {"stop_reason", r.stop.text()}, {"largest_fitting", r.largest_fitting},
      {"fastest", r.fastest}, {"max_batch", r.max_batch},     {"memory_limit_bytes", r.memory_limit_bytes},
      {"notes", r.notes}};
  doc["best"] = config::to_json(r.best);
  return doc;
}

std::string render_trials(const std::vector<Trial>& trials) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : trials) {
    std::vector<std::string> r = {
        t.pass ? std::to_string(t.pass) : "-",
        t.name,
        report::changes_text(t.set),
        t.m ? fmt("%.1f", t.m->samples_per_s) : "",
        trial_flops(t) ? report::flops_text(*trial_flops(t)) : "",
        trial_pct_of_peak(t) ? fmt(*trial_pct_of_peak(t) < 10 ? "%.1f%%" : "%.0f%%", *trial_pct_of_peak(t))
                             : "",
        t.m && t.pass ? fmt("%+.1f%% ", t.gain_pct) + interval_text(t.speedup) : "",
        t.m && t.pass ? t.noise : "",
        trial_verdict_text(t.verdict) + (t.reason.empty() || t.m ? "" : ": " + t.reason)};
    rows.push_back(std::move(r));
  }
  const std::string gain = "gain (" + stats::level_text(stats::kSpeedupLevel) + " interval, " +
                           stats::level_text(stats::kSpeedupLevelUnderLoad) + " under load)";
  return table::text({{{"pass", true},
                       {"trial"},
                       {"change"},
                       {"samples/s", true},
                       {"FLOP/s", true},
                       {"% peak", true},
                       {gain, true},
                       {"noise"},
                       {"verdict"}},
                      std::move(rows)});
}

}  // namespace ptune::tune
