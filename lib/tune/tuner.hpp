#pragma once
/// `ptune tune`: searches for a faster configuration by measuring it.
///  - find_batch_size: doubles loader.batch_size from the config's value, then binary-searches
///    the largest batch that fits in device memory with a margin (out-of-memory caught, the
///    cache emptied, the search goes on), and picks the fastest batch among those tried.
///  - greedy_tune: tries each optimization not yet on, one at a time, and keeps a change only
///    when its median gain beats the noise; passes repeat until nothing helps or time runs out.
/// Both take the measuring function and the clock as seams, so tests inject fakes.

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "config/tune_defaults.hpp"
#include "measure/schedule.hpp"
#include "report/results.hpp"
#include "tune/sides.hpp"

namespace ptune::tune {

/// Measures one configuration (default: default_measure, which calls tune::measure_row). May throw
/// what that throws.
using MeasureFn = std::function<measure::Measurement(const config::ExperimentConfig&)>;
/// Seconds on a monotonic clock (default: std::chrono::steady_clock).
using ClockFn = std::function<double()>;

/// Returns a MeasureFn for trials in ptune's own process: before its first trial a primer
/// (bench::prime), whose companion pipeline it keeps alive and idle beside every trial on a CPU
/// (freed on a GPU), before every trial the memory earlier ones freed handed back
/// (system::return_free_memory), then tune::measure_row(cfg, progress). Never throws itself.
MeasureFn default_measure(const measure::Progress& progress = {});

/// Times a trial (the second configuration) against the incumbent (the first) in child
/// processes, their windows alternating (default: time_in_processes). May throw what it throws.
using PairedMeasureFn =
    std::function<PairedTiming(const config::ExperimentConfig&, const config::ExperimentConfig&)>;

/// Returns a ClockFn reading std::chrono::steady_clock in seconds. Never throws.
ClockFn default_clock();

/// Returns true when `e` is an allocation failure: c10::OutOfMemoryError, or a message with
/// "out of memory" (CUDA), "not enough memory" (LibTorch's CPU allocator), std::bad_alloc,
/// or a cuBLAS/cuDNN allocation failure (cuDNN's "unable to find an engine", when no
/// algorithm's workspace fits). Never throws.
bool is_out_of_memory(const std::exception& e);

// ---------------------------------------------------------------- batch-size finder

/// Options of find_batch_size. The CLI copies its flags here and nothing else.
struct BatchSearchOptions {
  // CUDA: a batch fits when its peak memory <= (100 - margin)% of the device's
  double margin_pct = config::kDefaultMarginPct;
  int64_t max_batch = 0;    // largest batch tried; 0 = default (kDefaultMaxBatchCuda / kDefaultMaxBatchCpu)
  int64_t min_repeats = 3;  // measure.repeats is raised to at least this (medians compare)
  double budget_s = 0;      // stop starting new tries after this many seconds; 0 = no limit
  int64_t granularity = 8;  // binary-search midpoints are multiples of this (when above it)
  double resolution_pct = 12.5;     // binary search stops when the gap is <= this % of the largest fit
  int64_t device_memory_bytes = 0;  // 0 = runtime::cuda::total_memory of the config's device (tests set it)
  MeasureFn measure;                // empty = default_measure()
  ClockFn clock;                    // empty = default_clock()
  std::function<void()> on_oom;     // after an out-of-memory try; empty = runtime::cuda::empty_cache
  std::function<void(const report::Results&)> on_try;  // after every try (progress, partial output)
  const std::atomic<bool>* interrupted = nullptr;      // set (SIGINT) to stop before the next try
};

using config::kDefaultMaxBatchCpu;  // --max-batch's defaults (config/tune_defaults.hpp)
using config::kDefaultMaxBatchCuda;

/// Why a search ended. Its text (the JSON's "stop_reason", the summary line) is text().
struct StopReason {
  enum class Kind { kSearched, kBudget, kInterrupted, kNoGain, kPassLimit };
  Kind kind = Kind::kSearched;
  double budget_s = 0;     // kBudget: the budget, named in the text when set
  int64_t max_passes = 0;  // kPassLimit: the limit
  /// "searched" | "budget reached" | "budget of 2 min reached" | "interrupted" | "no change
  /// beat the noise" | "pass limit (5) reached". Throws nothing.
  std::string text() const;
  bool is(Kind k) const { return kind == k; }
};

/// How one try of the finder ended.
enum class TryState { kOk, kOutOfMemory, kOverMargin, kSkipped, kFailed };

/// One try of the finder.
struct BatchTry {
  int64_t batch_size = 0;
  bool fits = false;  // measured, and under the memory limit
  TryState state = TryState::kOk;
  std::string why;                        // kOverMargin, kSkipped, kFailed: the detail
  std::optional<measure::Measurement> m;  // present when it ran to the end
  /// "ok" | "out of memory" | "over the memory margin: <why>" | "skipped: <why>" | "failed:
  /// <why>". Throws nothing.
  std::string status_text() const;
  /// Its row's status: ok when it fits, else skipped or failed with status_text(). Throws nothing.
  report::RowStatus row_status() const;
};

struct BatchSearchResult {
  std::vector<BatchTry> tries;     // in the order tried
  int64_t largest_fitting = 0;     // largest batch that fits
  int64_t fastest = 0;             // fitting batch with the highest samples/s (the winner)
  int64_t max_batch = 0;           // the cap the search used
  int64_t memory_limit_bytes = 0;  // (100 - margin)% of the device's memory; 0 on the CPU
  std::vector<std::string> notes;  // e.g. the CPU cap, the budget running out
  StopReason stop;                 // searched, budget reached or interrupted
  report::Results table;           // one row per try, for report::render_results
  config::ExperimentConfig best;   // the input config with loader.batch_size = fastest (see docs/tuning.md)
};

/// Runs the batch-size search on `cfg` (its top-level settings; its sweep is ignored).
/// Returns the tries, the largest fitting and the fastest batch, and the winning config.
/// Throws ConfigError for an invalid config or a device that cannot run it, and
/// std::runtime_error when no batch fits (naming the first failure). Interruption (through
/// options.interrupted) ends the search early, stopped as interrupted.
BatchSearchResult find_batch_size(const config::ExperimentConfig& cfg, const BatchSearchOptions& options);

// ---------------------------------------------------------------- greedy search

/// One optimization the greedy search may try.
struct Candidate {
  std::string name;            // label, e.g. "multi-worker loading"
  nlohmann::ordered_json set;  // "path": value overrides, applied to the current best config
};

/// What became of a trial of the greedy search.
enum class TrialVerdict { kBaseline, kKept, kRejected, kSkipped, kFailed };

/// "baseline" | "kept" | "rejected" | "skipped" | "failed". Throws nothing.
const char* trial_verdict_text(TrialVerdict v);

/// One measured (or skipped) trial of the greedy search.
struct Trial {
  int64_t pass = 0;  // 1-based pass; 0 for the baseline
  std::string name;
  nlohmann::ordered_json set;  // the overrides tried
  TrialVerdict verdict = TrialVerdict::kBaseline;
  std::string reason;          // why (gain vs noise, the error message)
  bool out_of_memory = false;  // failed for lack of memory (what a search probes)
  std::optional<measure::Measurement> m;
  std::vector<double> prev_ms;    // timed in child processes: the incumbent's windows, paired with
                                  // m->repeat_ms; else empty
  std::vector<int> prev_process;  // the process each of prev_ms ran in
  double gain_pct = 0;            // samples/s vs the incumbent, in % (point estimate)
  stats::Interval speedup;        // over the incumbent, with its 99% interval
  std::string noise;              // the statistics' verdict: faster | slower | within noise | undecided
};

/// Options of greedy_tune.
struct TuneOptions {
  // a change must be faster beyond noise and gain at least this to be kept
  double threshold_pct = config::kDefaultThresholdPct;
  int64_t min_repeats = 3;  // measure.repeats is raised to at least this for every trial
  double budget_s = 0;      // no new trial starts after this many seconds; 0 = no limit
  int64_t max_passes = 5;   // passes over the candidates at most
  int64_t cpu_cores = 0;    // cores for the loader.num_workers candidates; 0 = hardware_concurrency
  MeasureFn measure;        // empty = default_measure()
  /// A trial with process-level settings, or on an incumbent with them (system::default_process
  /// false for either): timed against the incumbent in child processes. Empty = time_in_processes
  /// with `interrupted`.
  PairedMeasureFn measure_against;
  ClockFn clock;                 // empty = default_clock()
  std::function<void()> on_oom;  // after an out-of-memory trial; empty = runtime::cuda::empty_cache
  /// Why a trial (the incumbent, then the trial's config) cannot help on this machine, "" where
  /// it can; asked before the trial is timed, and a reason skips it. Empty =
  /// engine::cannot_help_here, this machine's answer.
  std::function<std::string(const config::ExperimentConfig&, const config::ExperimentConfig&)> cannot_help;
  std::function<void(const Trial&)> on_trial;      // after every trial (progress)
  const std::atomic<bool>* interrupted = nullptr;  // set (SIGINT) to stop before the next trial
};

/// The noise rule's answer for one comparison.
struct NoiseVerdict {
  double gain_pct = 0;      // 100 * (speedup - 1): samples/s of the candidate over the incumbent
  stats::Interval speedup;  // Welch interval (99%) over both measurements' windows, per sample
  stats::Verdict verdict = stats::Verdict::kUndecided;  // stats::verdict_of(speedup, rule)
  bool kept = false;                                    // verdict faster and gain_pct >= threshold_pct
};

/// Returns whether `candidate` beats `incumbent` beyond the noise, by the statistics a sweep's
/// rows and `ptune report --fail-if-slower` use: the speedup's 99% interval over both
/// measurements' windows (time per sample, so batch sizes compare by throughput) gets the
/// verdict of stats::verdict_of under `rule`; the candidate is kept when it is faster and
/// its gain is at least threshold_pct. Never throws.
NoiseVerdict judge(const measure::Measurement& incumbent, const measure::Measurement& candidate,
                   const stats::NoiseRule& rule, double threshold_pct);

/// judge() for a candidate timed against the incumbent in alternating windows: the speedup's
/// interval from the pairs (`incumbent_ms` with its processes, against candidate.repeat_ms and
/// candidate.repeat_process), per sample (`incumbent`'s samples per step against the
/// candidate's), at stats::speedup_level of the candidate's load. Never throws.
NoiseVerdict judge_paired(const measure::Measurement& incumbent, const std::vector<double>& incumbent_ms,
                          const std::vector<int>& incumbent_process, const measure::Measurement& candidate,
                          const stats::NoiseRule& rule, double threshold_pct);

/// Returns the optimizations tried on top of `cfg`, in order: loader.num_workers (cores, then
/// cores/2), loader.pin_memory, loader.uint8_transfer, loader.gpu_resize (fake_cifar, when
/// `cuda`), loader.batch_size x2, optim.set_to_none,
/// optim.amp (bf16; fp16 too when `cuda`), model.channels_last, optim.cudnn_benchmark,
/// optim.cuda_graphs; those already on in `cfg` are left out. Never throws.
std::vector<Candidate> candidates(const config::ExperimentConfig& cfg, int64_t cpu_cores, bool cuda);

struct TuneResult {
  std::vector<Trial> trials;      // every trial, in order (the baseline first)
  report::Results path;           // baseline + kept changes, as `ptune sweep` prints them
  config::ExperimentConfig best;  // the winner: input config + kept changes; its sweep replays the path
  StopReason stop;                // why the search ended
  double elapsed_s = 0;           // time spent (by options.clock)
};

/// Runs the greedy search from `cfg` (its top-level settings; its sweep is ignored).
/// Returns the trials, the path and the winning config. Throws what measuring the baseline
/// throws (ConfigError for a config the device cannot run); a failing trial is recorded and
/// the search goes on. Interruption ends the search, stopped as interrupted.
TuneResult greedy_tune(const config::ExperimentConfig& cfg, const TuneOptions& options);

/// The greedy search as one JSON document: the path as `ptune sweep` writes its results (DESIGN
/// §5), plus "search": {"kind": "greedy", "stop_reason", "elapsed_s", "trials": [...]} and
/// "best": the winning config. Never throws.
nlohmann::ordered_json to_json(const TuneResult& r);
/// The batch-size search likewise: its tries as results rows, plus "search": {"kind":
/// "batch-size", "stop_reason", "largest_fitting", "fastest", "max_batch",
/// "memory_limit_bytes", "notes"} and "best". Never throws.
nlohmann::ordered_json to_json(const BatchSearchResult& r);

/// Returns the trials as an aligned text table (pass, trial, change, samples/s, gain with its
/// 99% interval, the statistics' verdict, the trial's verdict). Never throws.
std::string render_trials(const std::vector<Trial>& trials);

}  // namespace ptune::tune
