#include "tune/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <thread>

#include <c10/util/Exception.h>

#include "engine/cuda_support.hpp"
#include "engine/device.hpp"
#include "engine/process.hpp"
#include "errors.hpp"
#include "measure/child_side.hpp"
#include "measure/diagnosis.hpp"
#include "report/results.hpp"
#include "tune/sweep.hpp"

namespace ptune::tune {
namespace {

using Json = nlohmann::ordered_json;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string gib(int64_t bytes) { return fmt("%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0)); }

/// The value at a dotted path ("loader.batch_size") of a config document.
Json value_at(const Json& doc, const std::string& path) {
  auto dot = path.find('.');
  if (dot == std::string::npos) return doc.at(path);
  return doc.at(path.substr(0, dot)).at(path.substr(dot + 1));
}

std::string changes_text(const Json& set) {
  std::string s;
  for (auto it = set.begin(); it != set.end(); ++it) {
    if (!s.empty()) s += ", ";
    s += it.key() + "=" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  return s.empty() ? "-" : s;
}

/// The config a trial measures: `cfg` without its sweep, with at least `min_repeats` repeats.
config::ExperimentConfig measured(config::ExperimentConfig cfg, int64_t min_repeats) {
  cfg.sweep.clear();
  cfg.measure.repeats = std::max(cfg.measure.repeats, min_repeats);
  return cfg;
}

/// "[-1.2%, +3.4%]": a speedup's interval as gains; "" without one.
std::string interval_text(const measure::Interval& i) {
  if (!i.valid()) return "";
  return fmt("[%+.1f%%, ", 100 * (i.lo - 1)) + fmt("%+.1f%%]", 100 * (i.hi - 1));
}

/// Budget and interruption: the reason to stop before the next trial, or "".
std::string stop_before_next(const ClockFn& clock, double start, double budget_s,
                             const std::atomic<bool>* interrupted) {
  if (interrupted && interrupted->load()) return "interrupted";
  if (budget_s > 0 && clock() - start >= budget_s) return "budget reached";
  return "";
}

/// An aligned text table: left-aligned text columns, right-aligned where `right`.
std::string text_table(const std::vector<std::string>& header, const std::vector<bool>& right,
                       const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) w[c] = header[c].size();
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(w[c] - cells[c].size(), ' ');
      s += (c ? "  " : "") + (right[c] ? pad + cells[c] : (c + 1 == cells.size() ? cells[c] : cells[c] + pad));
    }
    return s + "\n";
  };
  std::string out = line(header);
  for (const auto& r : rows) out += line(r);
  return out;
}

/// A trial's achieved model FLOP/s: its model FLOPs per sample times the samples/s its line
/// prints; nullopt without either.
std::optional<double> trial_flops(const Trial& t) {
  if (!t.m || !t.m->model_flops_per_sample || !(t.m->samples_per_s > 0)) return std::nullopt;
  return *t.m->model_flops_per_sample * t.m->samples_per_s;
}

/// trial_flops() over the machine's peak in the trial's precision, in %.
std::optional<double> trial_pct_of_peak(const Trial& t) {
  const auto f = trial_flops(t);
  if (!f || !t.m->peak_flops_per_s || !(*t.m->peak_flops_per_s > 0)) return std::nullopt;
  return 100.0 * *f / *t.m->peak_flops_per_s;
}

}  // namespace

MeasureFn default_measure() {
  return [](const config::ExperimentConfig& cfg) {
    // A primer before the first trial, as a sweep's (tune/sweep.cpp says why): the first pipeline
    // of a fresh process runs a little slower than later ones.
    static bool primed = false;
    if (!primed) {
      primed = true;
      measure::prime(cfg);
    }
    return measure::measure(cfg);
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

// ---------------------------------------------------------------- batch-size finder

BatchSearchResult find_batch_size(const config::ExperimentConfig& cfg, const BatchSearchOptions& options) {
  const MeasureFn measure = options.measure ? options.measure : default_measure();
  const ClockFn clock = options.clock ? options.clock : default_clock();
  const std::function<void()> on_oom = options.on_oom ? options.on_oom : [] { engine::cuda::empty_cache(); };
  if (options.margin_pct < 0 || options.margin_pct >= 100)
    throw ConfigError("--margin: " + fmt("%g", options.margin_pct) + " is out of range; allowed: 0 <= margin < 100");

  const c10::Device device = engine::resolve_device(cfg.device);  // ConfigError for a missing GPU
  BatchSearchResult res;
  int64_t total = options.device_memory_bytes;
  if (total <= 0 && device.is_cuda()) total = engine::cuda::total_memory(device.index());
  if (total > 0)
    res.memory_limit_bytes = static_cast<int64_t>(static_cast<double>(total) * (1.0 - options.margin_pct / 100.0));

  res.max_batch = options.max_batch > 0 ? options.max_batch : device.is_cuda() ? kDefaultMaxBatchCuda : kDefaultMaxBatchCpu;
  if (!device.is_cuda() && options.max_batch <= 0)
    res.notes.push_back("on the CPU there is no device memory limit to find: the search stops at batch " +
                        std::to_string(res.max_batch) + " (the CPU default of --max-batch)");
  if (cfg.data.kind == "fake_cifar" && cfg.data.num_samples < res.max_batch) {
    res.max_batch = cfg.data.num_samples;
    res.notes.push_back("capped at data.num_samples (" + std::to_string(res.max_batch) + ")");
  }
  const int64_t start_batch = std::min(cfg.loader.batch_size, res.max_batch);

  res.table.config = config::to_json(cfg);
  res.table.environment = environment(cfg);
  res.table.status = "running";

  const double t0 = clock();
  int64_t lo = 0;                   // largest batch known to fit (0: none yet)
  int64_t hi = res.max_batch + 1;   // smallest batch known not to fit
  std::string stop;

  // Measures batch `b`; false when it does not fit or the search must stop (`stop` set).
  auto try_batch = [&](int64_t b) -> bool {
    if (!res.tries.empty()) {
      stop = stop_before_next(clock, t0, options.budget_s, options.interrupted);
      if (!stop.empty()) return false;
    }
    BatchTry t;
    t.batch_size = b;
    config::ExperimentConfig c = cfg;
    c.loader.batch_size = b;
    c = measured(c, options.min_repeats);
    report::Row row;
    row.name = "batch " + std::to_string(b);
    row.changes = Json{{"loader.batch_size", b}};
    row.num_workers = c.loader.num_workers;
    row.mode = c.measure.mode;
    row.arch = c.model.arch;
    try {
      t.m = measure(c);
      if (res.memory_limit_bytes > 0 && t.m->peak_mem_bytes && *t.m->peak_mem_bytes > res.memory_limit_bytes) {
        t.status = "over the memory margin: peak " + gib(*t.m->peak_mem_bytes) + " > " + gib(res.memory_limit_bytes) +
                   " (" + fmt("%g", 100.0 - options.margin_pct) + "% of " + gib(total) + ")";
      } else {
        t.fits = true;
        t.status = "ok";
      }
    } catch (const Interrupted&) {
      stop = "interrupted";
      return false;
    } catch (const std::exception& e) {
      const bool oom = is_out_of_memory(e);
      // A failure of the starting batch that is not about memory is the config's, not the size's.
      if (!oom && res.tries.empty()) throw;
      t.status = oom ? "out of memory" : (dynamic_cast<const ConfigError*>(&e) ? "skipped: " : "failed: ") + message_of(e);
      if (oom) on_oom();
    }
    row.m = t.m;
    row.status = t.fits ? "ok" : (t.status.rfind("skipped: ", 0) == 0 || t.status.rfind("failed: ", 0) == 0)
                                     ? t.status : "failed: " + t.status;
    if (t.m) {
      row.diagnosis = t.m->peak_mem_bytes && total > 0
                          ? "peak memory " + gib(*t.m->peak_mem_bytes) + " (" +
                                fmt("%.0f", 100.0 * static_cast<double>(*t.m->peak_mem_bytes) / static_cast<double>(total)) +
                                "% of the device)"
                          : measure::diagnose(*t.m, c, {}, {}, engine::cpu_info());
    }
    res.table.rows.push_back(std::move(row));
    report::compute_speedups(res.table.rows);
    if (report::Row& last = res.table.rows.back(); last.m)
      last.diagnosis = measure::with_peak(last.diagnosis, report::pct_of_peak(last), last.m->peak_precision);
    res.tries.push_back(std::move(t));
    if (options.on_try) options.on_try(res.table);
    return res.tries.back().fits;
  };

  // Doubling from the config's batch while it fits.
  for (int64_t b = start_batch;;) {
    const bool fits = try_batch(b);
    if (!stop.empty()) break;
    if (!fits) { hi = b; break; }
    lo = b;
    if (b >= res.max_batch) break;
    b = std::min(2 * b, res.max_batch);
  }
  // Binary search between the largest fit and the smallest failure.
  while (stop.empty()) {
    const int64_t step = lo >= options.granularity ? std::max<int64_t>(1, options.granularity) : 1;
    const auto close_enough = static_cast<int64_t>(static_cast<double>(lo) * options.resolution_pct / 100.0);
    if (hi - lo <= 1 || (lo > 0 && hi - lo <= std::max(step, close_enough))) break;
    int64_t mid = lo + (hi - lo) / 2;
    if (mid >= step && mid / step * step > lo) mid = mid / step * step;
    if (mid <= lo || mid >= hi) break;
    if (try_batch(mid)) lo = mid;
    else if (stop.empty()) hi = mid;
  }
  res.stop_reason = stop.empty() ? "searched" : stop;
  if (stop == "budget reached")
    res.notes.push_back("the budget ran out: the search stopped early, after " + std::to_string(res.tries.size()) + " tries");

  // The winner: the fastest of the batches that fit.
  const BatchTry* fastest = nullptr;
  for (const auto& t : res.tries) {
    if (!t.fits) continue;
    res.largest_fitting = std::max(res.largest_fitting, t.batch_size);
    if (!fastest || t.m->samples_per_s > fastest->m->samples_per_s) fastest = &t;
  }
  if (!fastest) {
    if (stop == "interrupted") throw Interrupted();
    std::string why = res.tries.empty() ? "nothing was tried" : "batch " + std::to_string(res.tries.front().batch_size) +
                                                                    ": " + res.tries.front().status;
    throw std::runtime_error("no batch size fits: " + why + "; lower loader.batch_size or raise --margin/--max-batch");
  }
  res.fastest = fastest->batch_size;
  for (size_t i = 0; i < res.tries.size(); ++i) {
    if (res.tries[i].batch_size == res.fastest && res.tries[i].fits)
      res.table.rows[i].notes.push_back(fmt("fastest: %.1f samples/s", fastest->m->samples_per_s));
    if (res.tries[i].batch_size == res.largest_fitting && res.tries[i].fits)
      res.table.rows[i].notes.push_back(res.memory_limit_bytes > 0
                                            ? "largest batch that fits under the memory margin"
                                            : "largest batch that fits (no memory limit on this device: bounded by the search range)");
  }

  res.best = cfg;
  res.best.loader.batch_size = res.fastest;
  res.best.sweep.clear();
  if (res.fastest != cfg.loader.batch_size) {
    res.best.sweep.push_back({"batch " + std::to_string(cfg.loader.batch_size) + " (before tuning)",
                              Json{{"loader.batch_size", cfg.loader.batch_size}}});
    res.best.sweep.push_back({"batch " + std::to_string(res.fastest) + " (fastest)",
                              Json{{"loader.batch_size", res.fastest}}});
  }
  res.table.config = config::to_json(res.best);
  res.table.status = stop == "interrupted" ? "interrupted" : "complete";
  return res;
}

// ---------------------------------------------------------------- greedy search

NoiseVerdict judge(const measure::Measurement& incumbent, const measure::Measurement& candidate,
                   const measure::NoiseRule& rule, double threshold_pct) {
  NoiseVerdict v;
  v.speedup = measure::speedup_between(incumbent, candidate);
  if (v.speedup.point <= 0) return v;
  v.gain_pct = 100.0 * (v.speedup.point - 1.0);
  v.verdict = measure::verdict_of(v.speedup, rule);
  v.kept = v.verdict == measure::Verdict::kFaster && v.gain_pct >= threshold_pct;
  return v;
}

std::vector<Candidate> candidates(const config::ExperimentConfig& cfg, int64_t cpu_cores, bool cuda) {
  std::vector<Candidate> out;
  const int64_t cores = std::max<int64_t>(1, cpu_cores);
  for (int64_t w : {cores, cores / 2}) {
    bool seen = false;
    for (const auto& c : out) seen = seen || c.set.value("loader.num_workers", int64_t{-1}) == w;
    if (w >= 1 && w != cfg.loader.num_workers && !seen)
      out.push_back({"multi-worker loading (" + std::to_string(w) + ")", Json{{"loader.num_workers", w}}});
  }
  if (!cfg.loader.pin_memory) out.push_back({"pinned memory", Json{{"loader.pin_memory", true}}});
  if (!cfg.loader.uint8_transfer) out.push_back({"uint8 transfer", Json{{"loader.uint8_transfer", true}}});
  // Ship the 32x32 originals and resize on the device (fake_cifar only; worth it on a GPU).
  if (cuda && cfg.data.kind == "fake_cifar" && !cfg.loader.gpu_resize)
    out.push_back({"resize on the GPU", Json{{"loader.gpu_resize", true}}});
  const int64_t doubled = 2 * cfg.loader.batch_size;
  if (cfg.data.kind != "fake_cifar" || doubled <= cfg.data.num_samples)
    out.push_back({"batch " + std::to_string(doubled), Json{{"loader.batch_size", doubled}}});
  if (!cfg.optim.set_to_none) out.push_back({"set_to_none", Json{{"optim.set_to_none", true}}});
  if (cfg.optim.amp == "off") {
    out.push_back({"AMP bf16", Json{{"optim.amp", "bf16"}}});
    if (cuda) out.push_back({"AMP fp16", Json{{"optim.amp", "fp16"}}});
  }
  if (!cfg.model.channels_last) out.push_back({"channels_last", Json{{"model.channels_last", true}}});
  if (!cfg.optim.cudnn_benchmark) out.push_back({"cuDNN benchmark", Json{{"optim.cudnn_benchmark", true}}});
  if (!cfg.optim.cuda_graphs) out.push_back({"CUDA graphs", Json{{"optim.cuda_graphs", true}}});
  // The CPU section (last: each trial starts a child process, while the CUDA ones are skipped at
  // once on a CPU): the allocator (where installed) and thread binding, each a process of its own.
  if (!cuda && cfg.process.allocator == "glibc")
    for (const char* a : {"jemalloc", "tcmalloc", "glibc_tuned"}) {
      config::ProcessConfig p = cfg.process;
      p.allocator = a;
      try {
        engine::plan_process(p);
        out.push_back({std::string("allocator ") + a, Json{{"process.allocator", a}}});
      } catch (const ConfigError&) {  // not installed here
      }
    }
  if (!cuda && !cfg.process.bind_threads) out.push_back({"threads bound to cores", Json{{"process.bind_threads", true}}});
  return out;
}

TuneResult greedy_tune(const config::ExperimentConfig& cfg, const TuneOptions& options) {
  const MeasureFn measure = options.measure ? options.measure : default_measure();
  const ClockFn clock = options.clock ? options.clock : default_clock();
  const std::function<void()> on_oom = options.on_oom ? options.on_oom : [] { engine::cuda::empty_cache(); };
  const bool cuda = engine::resolve_device(cfg.device).is_cuda();  // ConfigError for a missing GPU
  const int64_t cores = options.cpu_cores > 0 ? options.cpu_cores
                                              : std::max<int64_t>(1, std::thread::hardware_concurrency());
  TuneResult res;
  res.path.environment = environment(cfg);
  res.path.status = "running";
  const double t0 = clock();

  config::ExperimentConfig current = cfg;
  current.sweep.clear();
  const Json original = config::to_json(current);

  // The baseline: its failure is the config's, and ends the search.
  Trial base;
  base.name = "baseline";
  base.set = Json::object();
  base.verdict = "baseline";
  base.m = measure(measured(current, options.min_repeats));
  measure::Measurement incumbent = *base.m;
  std::optional<double> base_loss = base.m->loss;
  auto add_path_row = [&](const Trial& t, const config::ExperimentConfig& c) {
    report::Row row;
    row.name = t.name;
    row.changes = t.set;
    row.num_workers = c.loader.num_workers;
    row.mode = c.measure.mode;
    row.arch = c.model.arch;
    row.m = t.m;
    row.rule = measure::window_plan(c).rule;
    row.diagnosis = measure::diagnose(*t.m, c, {}, {}, engine::cpu_info());
    res.path.rows.push_back(std::move(row));
    report::compute_speedups(res.path.rows);
    report::Row& last = res.path.rows.back();
    last.diagnosis = measure::with_peak(last.diagnosis, report::pct_of_peak(last), last.m->peak_precision);
    report::note_semantics(res.path.rows.back(), base_loss);
  };
  add_path_row(base, current);
  res.trials.push_back(base);
  if (options.on_trial) options.on_trial(base);

  std::vector<Trial> kept;
  int64_t version = 0;                          // bumped on every kept change
  std::map<std::string, int64_t> tried_at;      // candidate -> version it was last tried against
  std::set<std::string> unsupported;            // candidates the device cannot honour
  std::string stop;
  for (int64_t pass = 1; pass <= options.max_passes && stop.empty(); ++pass) {
    bool kept_any = false;
    for (const Candidate& cand : candidates(current, cores, cuda)) {
      const std::string key = cand.set.dump();
      if (unsupported.count(key)) continue;
      auto at = tried_at.find(key);
      if (at != tried_at.end() && at->second == version) continue;  // nothing changed since
      Trial t;
      t.pass = pass;
      t.name = cand.name;
      t.set = cand.set;
      config::ExperimentConfig next = current;
      try {
        config::apply_patch(next, cand.set, "tune: " + cand.name);
      } catch (const ConfigError&) {
        continue;  // not a valid value for this config (cannot happen for the built-in list)
      }
      stop = stop_before_next(clock, t0, options.budget_s, options.interrupted);
      if (!stop.empty()) break;
      tried_at[key] = version;
      try {
        t.m = measure(measured(next, options.min_repeats));
      } catch (const Interrupted&) {
        stop = "interrupted";
        break;
      } catch (const ConfigError& e) {
        t.verdict = "skipped";
        t.reason = message_of(e);
        unsupported.insert(key);
      } catch (const std::exception& e) {
        t.verdict = "failed";
        const bool oom = is_out_of_memory(e);
        t.reason = oom ? "out of memory" : message_of(e);
        if (oom) on_oom();
      }
      if (t.m) {
        const NoiseVerdict v = judge(incumbent, *t.m, measure::window_plan(next).rule, options.threshold_pct);
        t.gain_pct = v.gain_pct;
        t.speedup = v.speedup;
        t.noise = measure::verdict_name(v.verdict);
        t.verdict = v.kept ? "kept" : "rejected";
        t.reason = fmt("%+.1f%% ", v.gain_pct) + interval_text(v.speedup) + ": " + t.noise;
        if (v.verdict == measure::Verdict::kFaster && !v.kept)
          t.reason += fmt(", under the %g%% threshold", options.threshold_pct);
        if (incumbent.load.under_load || t.m->load.under_load)
          t.reason += ", measured under competing load (a " + measure::level_text(measure::kSpeedupLevelUnderLoad) + " interval)";
        if (v.kept) {
          current = next;
          incumbent = *t.m;
          ++version;
          kept_any = true;
          kept.push_back(t);
          add_path_row(t, current);
        }
      }
      res.trials.push_back(t);
      if (options.on_trial) options.on_trial(t);
    }
    if (!stop.empty()) break;
    if (!kept_any) stop = "no change beat the noise";
    else if (pass == options.max_passes) stop = "pass limit (" + std::to_string(options.max_passes) + ") reached";
  }
  if (stop == "budget reached") stop = "budget of " + fmt("%g", options.budget_s / 60.0) + " min reached";
  res.stop_reason = stop;
  res.elapsed_s = clock() - t0;

  // The winner; its sweep replays the path: the first row restores the original values of
  // every changed key (the baseline), each next row re-applies one kept change.
  res.best = current;
  res.best.measure = cfg.measure;  // the trials' raised repeats are the tuner's, not the user's
  res.best.sweep.clear();
  if (!kept.empty()) {
    config::SweepRow before{"baseline (before tuning)", Json::object()};
    for (const auto& t : kept)
      for (auto it = t.set.begin(); it != t.set.end(); ++it)
        if (!before.set.contains(it.key())) before.set[it.key()] = value_at(original, it.key());
    res.best.sweep.push_back(before);
    for (const auto& t : kept) res.best.sweep.push_back({t.name, t.set});
  }
  res.path.config = config::to_json(res.best);
  res.path.status = stop == "interrupted" ? "interrupted" : "complete";
  return res;
}

Json to_json(const TuneResult& r) {
  Json doc = report::to_json(r.path);
  Json trials = Json::array();
  for (const auto& t : r.trials) {
    Json j;
    j["pass"] = t.pass;
    j["name"] = t.name;
    j["set"] = t.set.is_null() ? Json::object() : t.set;
    j["verdict"] = t.verdict;
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
                       {"stop_reason", r.stop_reason},
                       {"elapsed_s", std::round(r.elapsed_s * 10) / 10},
                       {"trials", std::move(trials)}};
  doc["best"] = config::to_json(r.best);
  return doc;
}

Json to_json(const BatchSearchResult& r) {
  Json doc = report::to_json(r.table);
  doc["search"] = Json{{"kind", "batch-size"},
                       {"stop_reason", r.stop_reason},
                       {"largest_fitting", r.largest_fitting},
                       {"fastest", r.fastest},
                       {"max_batch", r.max_batch},
                       {"memory_limit_bytes", r.memory_limit_bytes},
                       {"notes", r.notes}};
  doc["best"] = config::to_json(r.best);
  return doc;
}

std::string render_trials(const std::vector<Trial>& trials) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : trials) {
    std::vector<std::string> r = {t.pass ? std::to_string(t.pass) : "-", t.name, changes_text(t.set),
                                  t.m ? fmt("%.1f", t.m->samples_per_s) : "",
                                  trial_flops(t) ? report::flops_text(*trial_flops(t)) : "",
                                  trial_pct_of_peak(t) ? fmt(*trial_pct_of_peak(t) < 10 ? "%.1f%%" : "%.0f%%", *trial_pct_of_peak(t)) : "",
                                  t.m && t.pass ? fmt("%+.1f%% ", t.gain_pct) + interval_text(t.speedup) : "",
                                  t.m && t.pass ? t.noise : "",
                                  t.verdict + (t.reason.empty() || t.m ? "" : ": " + t.reason)};
    rows.push_back(std::move(r));
  }
  const std::string gain = "gain (" + measure::level_text(measure::kSpeedupLevel) + " interval, " +
                           measure::level_text(measure::kSpeedupLevelUnderLoad) + " under load)";
  return text_table({"pass", "trial", "change", "samples/s", "FLOP/s", "% peak", gain, "noise", "verdict"},
                    {true, false, false, true, true, true, true, false, false}, rows);
}

}  // namespace ptune::tune
