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

#include "runtime/cuda_support.hpp"
#include "engine/cannot_help.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "bench/child_side.hpp"
#include "tune/sides.hpp"
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

std::string gib(int64_t bytes) {
  return fmt("%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

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
std::string interval_text(const stats::Interval& i) {
  if (!i.valid()) return "";
  return fmt("[%+.1f%%, ", 100 * (i.lo - 1)) + fmt("%+.1f%%]", 100 * (i.hi - 1));
}

/// Budget and interruption: the reason to stop before the next trial, if any.
std::optional<StopReason> stop_before_next(const ClockFn& clock, double start, double budget_s,
                                           const std::atomic<bool>* interrupted) {
  if (interrupted && interrupted->load()) return StopReason{StopReason::Kind::kInterrupted};
  if (budget_s > 0 && clock() - start >= budget_s) return StopReason{StopReason::Kind::kBudget};
  return std::nullopt;
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
      s +=
          (c ? "  " : "") + (right[c] ? pad + cells[c] : (c + 1 == cells.size() ? cells[c] : cells[c] + pad));
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
  if (!f || !t.m->peak_flops_per_s || !(*t.m->peak_flops_per_s > 0) || t.m->peak_under_load)
    return std::nullopt;
  return 100.0 * *f / *t.m->peak_flops_per_s;
}

}  // namespace

MeasureFn default_measure(const measure::Progress& progress) {
  // What the copies of the function share: whether the primer ran, and its companion.
  struct Primed {
    bool done = false;
    std::unique_ptr<bench::Bench> companion;
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
      primed->companion = bench::prime(cfg, progress);
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

// ---------------------------------------------------------------- batch-size finder

namespace {

/// What a search calls out to: its options' hooks, or the real ones where unset.
struct Hooks {
  MeasureFn measure;
  ClockFn clock;
  std::function<void()> on_oom;
};

template <class Options>
Hooks hooks_of(const Options& o) {
  return {o.measure ? o.measure : default_measure(), o.clock ? o.clock : default_clock(),
          o.on_oom ? o.on_oom : [] { runtime::cuda::empty_cache(); }};
}

/// One batch-size search: its limits, the tries (doubling from the config's batch, then a
/// binary search between the largest fit and the smallest failure), the winner.
class BatchSearch {
 public:
  BatchSearch(const config::ExperimentConfig& cfg, const BatchSearchOptions& options)
      : cfg_(cfg), options_(options), hooks_(hooks_of(options)) {}

  BatchSearchResult run() {
    if (options_.margin_pct < 0 || options_.margin_pct >= 100)
      throw ConfigError("--margin: " + fmt("%g", options_.margin_pct) +
                        " is out of range; allowed: 0 <= margin < 100");
    set_limits(runtime::resolve_device(cfg_.device));  // ConfigError for a missing GPU
    hi_ = res_.max_batch + 1;
    res_.table.config = config::to_json(cfg_);
    res_.table.environment = environment(cfg_);
    res_.table.status = report::RunStatus::kRunning;
    t0_ = hooks_.clock();
    double_up();
    bisect();
    res_.stop = stop_.value_or(StopReason{});
    if (res_.stop.is(StopReason::Kind::kBudget))
      res_.notes.push_back("the budget ran out: the search stopped early, after " +
                           std::to_string(res_.tries.size()) + " tries");
    pick_winner();
    res_.table.status = res_.stop.is(StopReason::Kind::kInterrupted) ? report::RunStatus::kInterrupted
                                                                     : report::RunStatus::kComplete;
    return std::move(res_);
  }

 private:
  /// The device's memory limit (CUDA: total less the margin) and the largest batch tried.
  void set_limits(const c10::Device& device) {
    total_ = options_.device_memory_bytes;
    if (total_ <= 0 && device.is_cuda()) total_ = runtime::cuda::total_memory(device.index());
    if (total_ > 0)
      res_.memory_limit_bytes =
          static_cast<int64_t>(static_cast<double>(total_) * (1.0 - options_.margin_pct / 100.0));
    res_.max_batch = options_.max_batch > 0 ? options_.max_batch
                     : device.is_cuda()     ? kDefaultMaxBatchCuda
                                            : kDefaultMaxBatchCpu;
    if (!device.is_cuda() && options_.max_batch <= 0)
      res_.notes.push_back("on the CPU there is no device memory limit to find: the search stops at batch " +
                           std::to_string(res_.max_batch) + " (the CPU default of --max-batch)");
    if (cfg_.data.kind == config::DataKind::kFakeCifar && cfg_.data.num_samples < res_.max_batch) {
      res_.max_batch = cfg_.data.num_samples;
      res_.notes.push_back("capped at data.num_samples (" + std::to_string(res_.max_batch) + ")");
    }
  }

  /// Doubling from the config's batch while it fits.
  void double_up() {
    for (int64_t b = std::min(cfg_.loader.batch_size, res_.max_batch);;) {
      const bool fits = try_batch(b);
      if (stop_) break;
      if (!fits) {
        hi_ = b;
        break;
      }
      lo_ = b;
      if (b >= res_.max_batch) break;
      b = std::min(2 * b, res_.max_batch);
    }
  }

  /// Binary search between the largest fit and the smallest failure, on multiples of
  /// options.granularity, until the gap is within options.resolution_pct.
  void bisect() {
    while (!stop_) {
      const int64_t step = lo_ >= options_.granularity ? std::max<int64_t>(1, options_.granularity) : 1;
      const auto close_enough =
          static_cast<int64_t>(static_cast<double>(lo_) * options_.resolution_pct / 100.0);
      if (hi_ - lo_ <= 1 || (lo_ > 0 && hi_ - lo_ <= std::max(step, close_enough))) break;
      int64_t mid = lo_ + (hi_ - lo_) / 2;
      if (mid >= step && mid / step * step > lo_) mid = mid / step * step;
      if (mid <= lo_ || mid >= hi_) break;
      if (try_batch(mid))
        lo_ = mid;
      else if (!stop_)
        hi_ = mid;
    }
  }

  /// Measures batch `b`; false when it does not fit or the search must stop (`stop_` set).
  bool try_batch(int64_t b) {
    if (!res_.tries.empty()) {
      stop_ = stop_before_next(hooks_.clock, t0_, options_.budget_s, options_.interrupted);
      if (stop_) return false;
    }
    BatchTry t;
    t.batch_size = b;
    config::ExperimentConfig c = cfg_;
    c.loader.batch_size = b;
    c = measured(c, options_.min_repeats);
    try {
      t.m = hooks_.measure(c);
      if (res_.memory_limit_bytes > 0 && t.m->peak_mem_bytes &&
          *t.m->peak_mem_bytes > res_.memory_limit_bytes) {
        t.state = TryState::kOverMargin;
        t.why = "peak " + gib(*t.m->peak_mem_bytes) + " > " + gib(res_.memory_limit_bytes) + " (" +
                fmt("%g", 100.0 - options_.margin_pct) + "% of " + gib(total_) + ")";
      } else {
        t.fits = true;
      }
    } catch (const Interrupted&) {
      stop_ = StopReason{StopReason::Kind::kInterrupted};
      return false;
    } catch (const std::exception& e) {
      const bool oom = is_out_of_memory(e);
      // A failure of the starting batch that is not about memory is the config's, not the size's.
      if (!oom && res_.tries.empty()) throw;
      t.state = oom                                    ? TryState::kOutOfMemory
                : dynamic_cast<const ConfigError*>(&e) ? TryState::kSkipped
                                                       : TryState::kFailed;
      if (!oom) t.why = message_of(e);
      if (oom) hooks_.on_oom();
    }
    add_row(t, c);
    res_.tries.push_back(std::move(t));
    if (options_.on_try) options_.on_try(res_.table);
    return res_.tries.back().fits;
  }

  /// The try's row in the table: its figures, and its peak memory (CUDA) or diagnosis.
  void add_row(const BatchTry& t, const config::ExperimentConfig& c) {
    report::Row row;
    row.name = "batch " + std::to_string(t.batch_size);
    row.changes = Json{{"loader.batch_size", t.batch_size}};
    row.num_workers = c.loader.num_workers;
    row.mode = c.measure.mode;
    row.arch = c.model.arch;
    row.m = t.m;
    row.status = t.row_status();
    if (t.m)
      row.diagnosis = t.m->peak_mem_bytes && total_ > 0
                          ? "peak memory " + gib(*t.m->peak_mem_bytes) + " (" +
                                fmt("%.0f", 100.0 * static_cast<double>(*t.m->peak_mem_bytes) /
                                                static_cast<double>(total_)) +
                                "% of the device)"
                          : measure::diagnose(*t.m, c, {}, {}, runtime::cpu_info());
    res_.table.rows.push_back(std::move(row));
    report::compute_speedups(res_.table.rows);
    if (report::Row& last = res_.table.rows.back(); last.m)
      last.diagnosis = measure::with_peak(last.diagnosis, report::pct_of_peak(last), last.m->peak_precision);
  }

  /// The winner, the fastest of the batches that fit; its notes; the winning config.
  void pick_winner() {
    const BatchTry* fastest = nullptr;
    for (const auto& t : res_.tries) {
      if (!t.fits) continue;
      res_.largest_fitting = std::max(res_.largest_fitting, t.batch_size);
      if (!fastest || t.m->samples_per_s > fastest->m->samples_per_s) fastest = &t;
    }
    if (!fastest) {
      if (res_.stop.is(StopReason::Kind::kInterrupted)) throw Interrupted();
      std::string why = res_.tries.empty() ? "nothing was tried"
                                           : "batch " + std::to_string(res_.tries.front().batch_size) + ": " +
                                                 res_.tries.front().status_text();
      throw std::runtime_error("no batch size fits: " + why +
                               "; lower loader.batch_size or raise --margin/--max-batch");
    }
    res_.fastest = fastest->batch_size;
    for (size_t i = 0; i < res_.tries.size(); ++i) {
      if (res_.tries[i].batch_size == res_.fastest && res_.tries[i].fits)
        res_.table.rows[i].notes.push_back(fmt("fastest: %.1f samples/s", fastest->m->samples_per_s));
      if (res_.tries[i].batch_size == res_.largest_fitting && res_.tries[i].fits)
        res_.table.rows[i].notes.push_back(
            res_.memory_limit_bytes > 0
                ? "largest batch that fits under the memory margin"
                : "largest batch that fits (no memory limit on this device: bounded by the search range)");
    }
    res_.best = cfg_;
    res_.best.loader.batch_size = res_.fastest;
    res_.best.sweep.clear();
    if (res_.fastest != cfg_.loader.batch_size) {
      res_.best.sweep.push_back({"batch " + std::to_string(cfg_.loader.batch_size) + " (before tuning)",
                                 Json{{"loader.batch_size", cfg_.loader.batch_size}}});
      res_.best.sweep.push_back({"batch " + std::to_string(res_.fastest) + " (fastest)",
                                 Json{{"loader.batch_size", res_.fastest}}});
    }
    res_.table.config = config::to_json(res_.best);
  }

  const config::ExperimentConfig& cfg_;
  const BatchSearchOptions& options_;
  const Hooks hooks_;
  BatchSearchResult res_;
  int64_t total_ = 0;  // the device's memory; 0: none known (the CPU)
  double t0_ = 0;
  int64_t lo_ = 0;  // largest batch known to fit (0: none yet)
  int64_t hi_ = 0;  // smallest batch known not to fit (set by double_up)
  std::optional<StopReason> stop_;
};

}  // namespace

BatchSearchResult find_batch_size(const config::ExperimentConfig& cfg, const BatchSearchOptions& options) {
  return BatchSearch(cfg, options).run();
}

// ---------------------------------------------------------------- greedy search

namespace {

/// The noise rule's answer for a speedup's interval: its gain, verdict and whether it is kept.
NoiseVerdict verdict_for(const stats::Interval& speedup, const stats::NoiseRule& rule, double threshold_pct) {
  NoiseVerdict v;
  v.speedup = speedup;
  if (v.speedup.point <= 0) return v;
  v.gain_pct = 100.0 * (v.speedup.point - 1.0);
  v.verdict = stats::verdict_of(v.speedup, rule);
  v.kept = v.verdict == stats::Verdict::kFaster && v.gain_pct >= threshold_pct;
  return v;
}

}  // namespace

NoiseVerdict judge(const measure::Measurement& incumbent, const measure::Measurement& candidate,
                   const stats::NoiseRule& rule, double threshold_pct) {
  return verdict_for(measure::speedup_between(incumbent, candidate), rule, threshold_pct);
}

NoiseVerdict judge_paired(const measure::Measurement& incumbent, const std::vector<double>& incumbent_ms,
                          const std::vector<int>& incumbent_process, const measure::Measurement& candidate,
                          const stats::NoiseRule& rule, double threshold_pct) {
  const double a_sps = incumbent.samples_per_s * incumbent.ms_per_step;
  const double b_sps = candidate.samples_per_s * candidate.ms_per_step;
  if (a_sps <= 0 || b_sps <= 0 || incumbent_ms.size() != candidate.repeat_ms.size()) return {};
  std::vector<double> a_ms = incumbent_ms;
  for (double& ms : a_ms) ms *= b_sps / a_sps;  // per sample, as judge()
  const auto& a_process = incumbent_process.size() == a_ms.size() ? incumbent_process : std::vector<int>{};
  const auto& b_process =
      candidate.repeat_process.size() == a_ms.size() ? candidate.repeat_process : std::vector<int>{};
  return verdict_for(stats::speedup_interval(a_ms, a_process, candidate.repeat_ms, b_process, true,
                                             stats::speedup_level(candidate.load.under_load)),
                     rule, threshold_pct);
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
  if (cuda && cfg.data.kind == config::DataKind::kFakeCifar && !cfg.loader.gpu_resize)
    out.push_back({"resize on the GPU", Json{{"loader.gpu_resize", true}}});
  const int64_t doubled = 2 * cfg.loader.batch_size;
  if (cfg.data.kind != config::DataKind::kFakeCifar || doubled <= cfg.data.num_samples)
    out.push_back({"batch " + std::to_string(doubled), Json{{"loader.batch_size", doubled}}});
  if (!cfg.optim.set_to_none) out.push_back({"set_to_none", Json{{"optim.set_to_none", true}}});
  if (cfg.optim.amp == config::Amp::kOff) {
    out.push_back({"AMP bf16", Json{{"optim.amp", config::name(config::Amp::kBf16)}}});
    if (cuda) out.push_back({"AMP fp16", Json{{"optim.amp", config::name(config::Amp::kFp16)}}});
  }
  if (!cfg.model.channels_last) out.push_back({"channels_last", Json{{"model.channels_last", true}}});
  // bf16 with channels_last as one candidate too: oneDNN's bf16 kernels (and Tensor Cores) want
  // channels_last tensors, so bf16 alone can be slower than fp32 where the pair is faster.
  if (cfg.optim.amp == config::Amp::kOff && !cfg.model.channels_last)
    out.push_back({"AMP bf16 with channels_last",
                   Json{{"optim.amp", config::name(config::Amp::kBf16)}, {"model.channels_last", true}}});
  if (!cfg.optim.cudnn_benchmark) out.push_back({"cuDNN benchmark", Json{{"optim.cudnn_benchmark", true}}});
  if (!cfg.optim.cuda_graphs) out.push_back({"CUDA graphs", Json{{"optim.cuda_graphs", true}}});
  // The CPU section (last: each trial starts a child process, while the CUDA ones are skipped at
  // once on a CPU): the allocator (where installed) and thread binding, each a process of its own.
  if (!cuda && cfg.process.allocator == config::Allocator::kGlibc)
    for (const auto a :
         {config::Allocator::kJemalloc, config::Allocator::kTcmalloc, config::Allocator::kGlibcTuned}) {
      config::ProcessConfig p = cfg.process;
      p.allocator = a;
      try {
        system::plan_process(p);
        out.push_back(
            {std::string("allocator ") + config::name(a), Json{{"process.allocator", config::name(a)}}});
      } catch (const ConfigError&) {  // not installed here
      }
    }
  if (!cuda && !cfg.process.bind_threads)
    out.push_back({"threads bound to cores", Json{{"process.bind_threads", true}}});
  return out;
}

std::string StopReason::text() const {
  switch (kind) {
    case Kind::kSearched:
      return "searched";
    case Kind::kBudget:
      return budget_s > 0 ? "budget of " + fmt("%g", budget_s / 60.0) + " min reached" : "budget reached";
    case Kind::kInterrupted:
      return "interrupted";
    case Kind::kNoGain:
      return "no change beat the noise";
    case Kind::kPassLimit:
      break;
  }
  return "pass limit (" + std::to_string(max_passes) + ") reached";
}

std::string BatchTry::status_text() const {
  switch (state) {
    case TryState::kOk:
      return "ok";
    case TryState::kOutOfMemory:
      return "out of memory";
    case TryState::kOverMargin:
      return "over the memory margin: " + why;
    case TryState::kSkipped:
      return "skipped: " + why;
    case TryState::kFailed:
      break;
  }
  return "failed: " + why;
}

report::RowStatus BatchTry::row_status() const {
  if (fits) return report::RowStatus::ok();
  if (state == TryState::kSkipped) return report::RowStatus::skipped(why);
  if (state == TryState::kFailed) return report::RowStatus::failed(why);
  return report::RowStatus::failed(status_text());
}

const char* trial_verdict_text(TrialVerdict v) {
  switch (v) {
    case TrialVerdict::kBaseline:
      return "baseline";
    case TrialVerdict::kKept:
      return "kept";
    case TrialVerdict::kRejected:
      return "rejected";
    case TrialVerdict::kSkipped:
      return "skipped";
    case TrialVerdict::kFailed:
      break;
  }
  return "failed";
}

namespace {

/// One greedy search: the baseline, then passes over the candidates, each measured against the
/// incumbent and kept when faster beyond noise by the threshold; the winner's sweep replays the
/// path.
class GreedySearch {
 public:
  GreedySearch(const config::ExperimentConfig& cfg, const TuneOptions& options)
      : cfg_(cfg),
        options_(options),
        hooks_(hooks_of(options)),
        against_(options.measure_against),
        cannot_help_(options.cannot_help) {
    if (!cannot_help_) cannot_help_ = engine::cannot_help_here;
    if (!against_)
      against_ = [interrupted = options.interrupted](const config::ExperimentConfig& incumbent,
                                                     const config::ExperimentConfig& trial) {
        return time_in_processes(incumbent, trial, interrupted);
      };
  }

  TuneResult run() {
    const bool cuda = runtime::resolve_device(cfg_.device).is_cuda();  // ConfigError for a missing GPU
    const int64_t cores = options_.cpu_cores > 0 ? options_.cpu_cores
                                                 : std::max<int64_t>(1, std::thread::hardware_concurrency());
    res_.path.environment = environment(cfg_);
    res_.path.status = report::RunStatus::kRunning;
    t0_ = hooks_.clock();
    current_ = cfg_;
    current_.sweep.clear();
    const Json original = config::to_json(current_);
    measure_baseline();
    for (int64_t pass = 1; pass <= options_.max_passes && !stop_; ++pass) {
      bool kept_any = false;
      for (const Candidate& cand : candidates(current_, cores, cuda)) {
        if (!worth_trying(cand)) continue;
        if (!try_candidate(pass, cand, kept_any)) break;
      }
      if (stop_) break;
      if (!kept_any)
        stop_ = StopReason{StopReason::Kind::kNoGain};
      else if (pass == options_.max_passes)
        stop_ = StopReason{StopReason::Kind::kPassLimit, 0, options_.max_passes};
    }
    diagnose_path_with_trials();
    res_.stop = stop_.value_or(StopReason{});
    if (res_.stop.is(StopReason::Kind::kBudget)) res_.stop.budget_s = options_.budget_s;
    res_.elapsed_s = hooks_.clock() - t0_;
    res_.best = winner(original);
    res_.path.config = config::to_json(res_.best);
    res_.path.status = res_.stop.is(StopReason::Kind::kInterrupted) ? report::RunStatus::kInterrupted
                                                                    : report::RunStatus::kComplete;
    return std::move(res_);
  }

 private:
  /// Each row of the path diagnosed again with every trial of the search: a change the search
  /// measured as within noise or slower is not advised (the kept path's last row is not told to
  /// try the bf16 that its trial found slower); the path row of each kept change keeps its own.
  void diagnose_path_with_trials() {
    std::vector<measure::Tried> tried;
    for (size_t i = 0; i < res_.trials.size(); ++i) {
      const Trial& t = res_.trials[i];
      if (t.verdict != TrialVerdict::kRejected || !t.m || !t.set.is_object()) continue;
      for (auto it = t.set.begin(); it != t.set.end(); ++it)
        tried.push_back({it.key(), it.value(), i, t.name, t.noise, t.speedup.point, true});
    }
    for (size_t k = 0; k < res_.path.rows.size() && k < path_cfgs_.size(); ++k) {
      report::Row& row = res_.path.rows[k];
      if (!row.m) continue;
      row.diagnosis =
          measure::with_peak(measure::diagnose(*row.m, path_cfgs_[k], tried, {}, runtime::cpu_info()),
                             report::pct_of_peak(row), row.m->peak_precision);
    }
  }

  /// The baseline: its failure is the config's, and ends the search.
  void measure_baseline() {
    Trial base;
    base.name = "baseline";
    base.set = Json::object();
    base.verdict = TrialVerdict::kBaseline;
    base.m = hooks_.measure(measured(current_, options_.min_repeats));
    incumbent_ = *base.m;
    base_loss_ = base.m->loss;
    add_path_row(base, current_);
    res_.trials.push_back(base);
    if (options_.on_trial) options_.on_trial(base);
  }

  /// Whether `cand` is worth a trial: the device can honour it, and something changed since it
  /// was last tried.
  bool worth_trying(const Candidate& cand) const {
    const std::string key = cand.set.dump();
    if (unsupported_.count(key)) return false;
    const auto at = tried_at_.find(key);
    return at == tried_at_.end() || at->second != version_;
  }

  /// A trial of `cand` on top of the incumbent, recorded; a kept one becomes the incumbent
  /// (`kept_any` set). False when the search must stop first (budget, interruption).
  bool try_candidate(int64_t pass, const Candidate& cand, bool& kept_any) {
    Trial t;
    t.pass = pass;
    t.name = cand.name;
    t.set = cand.set;
    config::ExperimentConfig next = current_;
    try {
      config::apply_patch(next, cand.set, "tune: " + cand.name);
    } catch (const ConfigError&) {
      return true;  // not a valid value for this config (cannot happen for the built-in list)
    }
    stop_ = stop_before_next(hooks_.clock, t0_, options_.budget_s, options_.interrupted);
    if (stop_) return false;
    const std::string key = cand.set.dump();
    tried_at_[key] = version_;
    try {
      if (const std::string why = cannot_help_(current_, next); !why.empty()) throw ConfigError(why);
      // A process-level setting on either side: the two timed alike, each in child processes of
      // its own, against each other (a pipeline in ptune's own process, which has built and freed
      // others, does not run as a fresh process's does).
      if (!system::default_process(next.process) || !system::default_process(current_.process)) {
        PairedTiming p =
            against_(measured(current_, options_.min_repeats), measured(next, options_.min_repeats));
        t.m = std::move(p.m);
        t.prev_ms = std::move(p.prev_ms);
        t.prev_process = std::move(p.prev_process);
      } else {
        t.m = hooks_.measure(measured(next, options_.min_repeats));
      }
    } catch (const Interrupted&) {
      stop_ = StopReason{StopReason::Kind::kInterrupted};
      return false;
    } catch (const ConfigError& e) {
      t.verdict = TrialVerdict::kSkipped;
      t.reason = message_of(e);
      unsupported_.insert(key);
    } catch (const std::exception& e) {
      t.verdict = TrialVerdict::kFailed;
      t.out_of_memory = is_out_of_memory(e);
      t.reason = t.out_of_memory ? "out of memory" : message_of(e);
      if (t.out_of_memory) hooks_.on_oom();
    }
    if (t.m && judge_trial(t, next)) {
      current_ = next;
      incumbent_ = *t.m;
      ++version_;
      kept_any = true;
      kept_.push_back(t);
      add_path_row(t, current_);
    }
    res_.trials.push_back(t);
    if (options_.on_trial) options_.on_trial(t);
    return true;
  }

  /// A measured trial's verdict against the incumbent, with its reason; true when kept.
  bool judge_trial(Trial& t, const config::ExperimentConfig& next) const {
    // Trials in child processes carry each window's process: judge() counts their spread.
    const stats::NoiseRule rule = measure::window_plan(next).rule;
    const bool paired = !t.prev_ms.empty();
    const NoiseVerdict v =
        paired ? judge_paired(incumbent_, t.prev_ms, t.prev_process, *t.m, rule, options_.threshold_pct)
               : judge(incumbent_, *t.m, rule, options_.threshold_pct);
    t.gain_pct = v.gain_pct;
    t.speedup = v.speedup;
    t.noise = stats::verdict_name(v.verdict);
    t.verdict = v.kept ? TrialVerdict::kKept : TrialVerdict::kRejected;
    t.reason = fmt("%+.1f%% ", v.gain_pct) + interval_text(v.speedup) + ": " + t.noise;
    if (v.verdict == stats::Verdict::kFaster && !v.kept)
      t.reason += fmt(", under the %g%% threshold", options_.threshold_pct);
    if (paired) t.reason += ", timed against the best so far in alternating windows, both in child processes";
    if ((!paired && incumbent_.load.under_load) || t.m->load.under_load)
      t.reason += ", measured under competing load (a " + stats::level_text(stats::kSpeedupLevelUnderLoad) +
                  " interval)";
    return v.kept;
  }

  /// A row of the path (the baseline or a kept change), as `ptune sweep` prints it.
  void add_path_row(const Trial& t, const config::ExperimentConfig& c) {
    report::Row row;
    row.name = t.name;
    row.changes = t.set;
    row.num_workers = c.loader.num_workers;
    row.mode = c.measure.mode;
    row.arch = c.model.arch;
    row.m = t.m;
    row.prev_ms = t.prev_ms;
    row.prev_process = t.prev_process;
    row.rule = measure::window_plan(c).rule;
    row.diagnosis = measure::diagnose(*t.m, c, {}, {}, runtime::cpu_info());
    res_.path.rows.push_back(std::move(row));
    path_cfgs_.push_back(c);
    report::compute_speedups(res_.path.rows);
    report::Row& last = res_.path.rows.back();
    last.diagnosis = measure::with_peak(last.diagnosis, report::pct_of_peak(last), last.m->peak_precision);
    report::note_semantics(last, base_loss_);
  }

  /// The winner; its sweep replays the path: the first row restores the original values of
  /// every changed key (the baseline), each next row re-applies one kept change.
  config::ExperimentConfig winner(const Json& original) const {
    config::ExperimentConfig best = current_;
    best.measure = cfg_.measure;  // the trials' raised repeats are the tuner's, not the user's
    best.sweep.clear();
    if (kept_.empty()) return best;
    config::SweepRow before{"baseline (before tuning)", Json::object()};
    for (const auto& t : kept_)
      for (auto it = t.set.begin(); it != t.set.end(); ++it)
        if (!before.set.contains(it.key())) before.set[it.key()] = value_at(original, it.key());
    best.sweep.push_back(before);
    for (const auto& t : kept_) best.sweep.push_back({t.name, t.set});
    return best;
  }

  const config::ExperimentConfig& cfg_;
  const TuneOptions& options_;
  const Hooks hooks_;
  PairedMeasureFn against_;  // options.measure_against, or time_in_processes
  std::function<std::string(const config::ExperimentConfig&, const config::ExperimentConfig&)>
      cannot_help_;  // options.cannot_help, or engine::cannot_help_here
  TuneResult res_;
  double t0_ = 0;
  config::ExperimentConfig current_;  // the incumbent's config
  measure::Measurement incumbent_;
  std::optional<double> base_loss_;
  std::vector<Trial> kept_;
  int64_t version_ = 0;                              // bumped on every kept change
  std::map<std::string, int64_t> tried_at_;          // candidate -> version it was last tried against
  std::vector<config::ExperimentConfig> path_cfgs_;  // the config of each row of res_.path
  std::set<std::string> unsupported_;                // candidates the device cannot honour
  std::optional<StopReason> stop_;
};

}  // namespace

TuneResult greedy_tune(const config::ExperimentConfig& cfg, const TuneOptions& options) {
  return GreedySearch(cfg, options).run();
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
        changes_text(t.set),
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
  return text_table({"pass", "trial", "change", "samples/s", "FLOP/s", "% peak", gain, "noise", "verdict"},
                    {true, false, false, true, true, true, true, false, false}, rows);
}

}  // namespace ptune::tune
