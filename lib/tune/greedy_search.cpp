// The greedy search over the optimizations (tuner.hpp: greedy_tune, candidates, judge).
#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "core/errors.hpp"
#include "engine/cannot_help.hpp"
#include "measure/diagnosis.hpp"
#include "measure/schedule.hpp"
#include "report/results.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "tune/search.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {
namespace {

using Json = nlohmann::ordered_json;

/// The value at a dotted path ("loader.batch_size") of a config document.
Json value_at(const Json& doc, const std::string& path) {
  auto dot = path.find('.');
  if (dot == std::string::npos) return doc.at(path);
  return doc.at(path.substr(0, dot)).at(path.substr(dot + 1));
}

}  // namespace

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

namespace {

/// The loader's workers: as many as the cores, and half as many (each where it is a change).
void add_worker_candidates(std::vector<Candidate>& out, const config::ExperimentConfig& cfg,
                           int64_t cpu_cores) {
  const int64_t cores = std::max<int64_t>(1, cpu_cores);
  for (int64_t w : {cores, cores / 2}) {
    bool seen = false;
    for (const auto& c : out) seen = seen || c.set.value("loader.num_workers", int64_t{-1}) == w;
    if (w >= 1 && w != cfg.loader.num_workers && !seen)
      out.push_back({"multi-worker loading (" + std::to_string(w) + ")", Json{{"loader.num_workers", w}}});
  }
}

/// The rest of the loader: pinned memory, uint8 transfer, resize on the GPU, a doubled batch.
void add_loader_candidates(std::vector<Candidate>& out, const config::ExperimentConfig& cfg, bool cuda) {
  if (!cfg.loader.pin_memory) out.push_back({"pinned memory", Json{{"loader.pin_memory", true}}});
  if (!cfg.loader.uint8_transfer) out.push_back({"uint8 transfer", Json{{"loader.uint8_transfer", true}}});
  // Ship the 32x32 originals and resize on the device (fake_cifar only; worth it on a GPU).
  if (cuda && cfg.data.kind == config::DataKind::kFakeCifar && !cfg.loader.gpu_resize)
    out.push_back({"resize on the GPU", Json{{"loader.gpu_resize", true}}});
  const int64_t doubled = 2 * cfg.loader.batch_size;
  if (cfg.data.kind != config::DataKind::kFakeCifar || doubled <= cfg.data.num_samples)
    out.push_back({"batch " + std::to_string(doubled), Json{{"loader.batch_size", doubled}}});
}

/// The training step: set_to_none, AMP, channels_last (and bf16 with it), cuDNN benchmark, CUDA
/// graphs.
void add_step_candidates(std::vector<Candidate>& out, const config::ExperimentConfig& cfg, bool cuda) {
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
}

/// The CPU section (last: each trial starts a child process, while the CUDA ones are skipped at
/// once on a CPU): the allocator (where installed) and thread binding, each a process of its own.
void add_cpu_candidates(std::vector<Candidate>& out, const config::ExperimentConfig& cfg) {
  if (cfg.process.allocator == config::Allocator::kGlibc)
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
  if (!cfg.process.bind_threads)
    out.push_back({"threads bound to cores", Json{{"process.bind_threads", true}}});
}

}  // namespace

std::vector<Candidate> candidates(const config::ExperimentConfig& cfg, int64_t cpu_cores, bool cuda) {
  std::vector<Candidate> out;
  add_worker_candidates(out, cfg, cpu_cores);
  add_loader_candidates(out, cfg, cuda);
  add_step_candidates(out, cfg, cuda);
  if (!cuda) add_cpu_candidates(out, cfg);
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
      row.diagnosis = measure::with_peak(
          side_kind(path_cfgs_[k]).diagnose(*row.m, path_cfgs_[k], tried, runtime::cpu_info()),
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
    const stats::NoiseRule rule = measure::noise_rule(next);
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
    row.rule = measure::noise_rule(c);
    row.diagnosis = side_kind(c).diagnose(*t.m, c, {}, runtime::cpu_info());
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

}  // namespace ptune::tune
