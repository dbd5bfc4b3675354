#pragma once
/// Measures one configuration: warm-up steps untimed, then `repeats` x `steps` timed steps,
/// with the wait for data, the copy to the device and the compute timed separately (host
/// clocks on the CPU, CUDA events on a GPU); the device is synchronized at the end of every
/// repeat, before the clock read that ends it. The profiler never runs in measure(): profile()
/// records a row separately, after the timed steps of every row (CUPTI, once attached, stays
/// attached and would slow every later timed step).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "system/load.hpp"
#include "core/stats.hpp"

namespace ptune::measure {

/// What a measured row reports.
struct Measurement {
  int64_t batch_size = 0;            // per rank (process)
  int64_t steps = 0;                 // timed steps per window
  double ms_per_step = 0;            // geometric mean over the windows (of the slowest rank's ms/step)
  double samples_per_s = 0;          // world_size * batch_size / ms_per_step
  stats::Interval samples_per_s_ci;  // samples/s with its 95% t-interval over the windows
  std::vector<double> repeat_ms;     // ms/step of each timed window kept, in order
  std::vector<int> repeat_process;   // the process (0, 1, ...) each of those windows ran in, where
                                     // they ran in several (ProcessGroup); empty: all in one
  int64_t transient_windows = 0;     // windows (pairs, for a compared row) timed before those and
                                     // left out as the start-up transient (notes say so)
  int64_t short_windows = 0;         // of the windows kept, those the row's budget ended before
                                     // measure.steps steps (short_windows_note says so)
  double spread_pct = 0;             // (max - min) / median over the windows, in %
  system::LoadReport load;           // what else ran while the windows were timed
  // The step split, % of step time. On the CPU from host clocks; on a GPU from CUDA events on
  // the compute stream (the host does not wait for the device inside a step):
  double data_wait_pct = 0;                 // CPU: host blocked waiting for a batch; GPU: the device
                                            // idle between steps, waiting for the host (the batch)
  double h2d_pct = 0;                       // host-to-device copy (and uint8 normalize); GPU: the
                                            // compute stream waiting for the copy stream + normalize
  double compute_pct = 0;                   // forward, backward, update
  std::optional<double> loss;               // loss after the measured steps (train, synthetic)
  std::optional<int64_t> peak_mem_bytes;    // CUDA caching allocator peak; none on the CPU
  std::optional<int64_t> device_mem_bytes;  // the GPU's total memory; none on the CPU
  std::optional<double> gpu_busy_pct;       // profile(): merged kernel time per profiled step over
                                            // the timed ms/step; none on the CPU or unprofiled
  std::string trace_path;                   // Chrome trace written by profile(), or ""
  std::string eager_fallback;               // optim.cuda_graphs: why the capture failed and every
                                            // step ran eagerly; "" otherwise
  std::vector<std::string> notes;           // what did not go as configured (e.g. a graph fallback)
  // How far from the limit (train and synthetic rows; none on a data row):
  std::optional<double> model_flops_per_sample;  // forward + backward FLOPs of one sample (models/flops.hpp)
  std::optional<double> peak_flops_per_s;        // the machine's peak in the row's precision, all ranks
                                                 // (measure/peak.hpp); none when it could not be had
  std::string peak_precision;                    // fp32 | tf32 | bf16 | fp16
  std::string peak_source;                       // where the peak came from, one line
  bool peak_under_load = false;                  // the peak was calibrated under competing load: no
                                                 // ceiling, so the row's % peak is left out
  // The operating system's share (CPU rows): minor page faults per step (pages the allocator
  // handed back to the kernel and took again), and the time the process spent in the kernel per
  // step, in % of the step's wall time (all its threads' system time: it can pass 100).
  std::optional<double> page_faults_per_step;
  std::optional<double> system_time_pct;
  // A program row (config's `program`), seen from outside its processes: the cores its process
  // tree kept busy over the timed windows (CPU time / wall time), and its resident memory at the
  // highest (the sum of each of its processes' own peak).
  std::optional<double> cpu_cores_busy;
  std::optional<int64_t> peak_rss_bytes;
  // With measure.profile, a program row's trace (proc::profile_program): `ptune analyze`'s
  // verdict on it, one line; "" unprofiled.
  std::string trace_verdict;
};

/// Progress callback: (phase "warmup"/"measure", step done, steps in all). While measuring,
/// "steps in all" is the planned minimum; measuring may go on beyond it (the interval is not
/// tight yet), and then the count grows past it.
using Progress = std::function<void(const std::string&, int64_t, int64_t)>;

/// A row's time budget on the wall clock (measure.max_s), counted from the row's start: building
/// its pipeline, its warm-up and the windows of both sides of a comparison all spend it. Measuring
/// stops between steps where the next step would end past it. A copy keeps the same start.
class Deadline {
 public:
  /// Milliseconds on a monotonic clock.
  using Clock = std::function<double()>;
  /// No limit.
  Deadline() = default;
  /// `budget_ms` from now; 0 or less: automatic (kAutoBudgetMs at most; settle() then lowers it).
  /// `clock` is a steady clock unless one is given (tests give a fake one).
  explicit Deadline(double budget_ms, Clock clock = {});
  /// Answers alike on every rank of a data-parallel run: `max_over_ranks` returns the largest of
  /// the ranks' values (a collective); the deadline is then the group's, as seen by the rank with
  /// the least time left. Every question below becomes a collective.
  void agree_with(std::function<double(double)> max_over_ranks);
  /// A deadline `elapsed_ms` into a limit of `limit_ms` from the row's start (kNone: no limit), whose
  /// budget was configured as `budget_s` (0: automatic, already settled): a row's child process
  /// continues its parent's deadline with it.
  static Deadline continuing(double limit_ms, double elapsed_ms, double budget_s);
  /// Whether there is a limit at all.
  bool limited() const { return limit_ms_ < kNone; }
  /// Whether `next_ms` more milliseconds of work end by the deadline. Throws what the collective
  /// throws.
  bool fits(double next_ms) const;
  /// How many steps of `step_ms` fit in the time left: between 1 and `max_steps`. Throws what the
  /// collective throws.
  int64_t steps_that_fit(double step_ms, int64_t max_steps) const;
  /// A copy for the first of `windows` windows that must share the time left: it ends once
  /// kShareFraction of the time left over `windows` is spent (so the step counts of
  /// steps_that_fit shrink to fit). Itself where `windows` is 1 or less, or there is no limit.
  Deadline share(int64_t windows) const;
  /// An automatic budget, once the row's first measure.repeats windows (pairs) are timed: at most
  /// kAutoBudgetFactor times the row's time so far (and kAutoBudgetMs in all). Only the first call
  /// counts; a fixed budget is left as it is.
  void settle();
  /// Milliseconds since the row's start, on this rank.
  double elapsed_ms() const;
  /// The budget as configured, seconds (0: automatic).
  double budget_s() const { return budget_s_; }
  /// The limit now, ms from the row's start (kAutoBudgetMs for an automatic one not settled yet).
  double limit_ms() const { return limit_ms_; }

  static constexpr double kAutoBudgetMs = 30000;  // measure.max_s 0: never more than this
  static constexpr double kAutoBudgetFactor = 4;  // ... nor more than 4x the first windows' time
  static constexpr double kNone = 1e300;
  /// share(): what the windows get of the time left; the rest is for the time between them
  /// (switching the sides, starting the next window).
  static constexpr double kShareFraction = 0.9;

 private:
  double left_ms() const;  // on this rank
  Clock clock_;
  double start_ms_ = 0, limit_ms_ = kNone, budget_s_ = 0;
  bool automatic_ = false, settled_ = false;
  std::function<double(double)> max_over_ranks_;
};

/// Something that can be timed a window at a time: a Bench, or a fake in tests.
class Side {
 public:
  virtual ~Side() = default;
  /// Times one window of steps_per_window() steps, fewer where `deadline` would pass first (at
  /// least one); returns its ms/step. Throws what measuring throws.
  virtual double window(const Deadline& deadline) = 0;
  /// Steps in a full window.
  virtual int64_t steps_per_window() const { return 1; }
  /// Samples one step processes (all ranks): speedups compare time per sample, so that rows
  /// with different batch sizes compare by throughput.
  virtual double samples_per_step() const { return 1; }
  /// Called before another side's window / before this side's window after another's.
  virtual void pause() {}
  virtual void resume() {}
  /// The process the last window ran in, for a side timed in several processes in turn
  /// (ProcessGroup: 0, 1, ...); -1 for a side in one process.
  virtual int last_process() const { return -1; }
};

/// A sweep row's side: a Side that also gives the row's Measurement. The sweep takes every kind
/// through this interface: a pipeline in ptune's process (Bench), a pipeline in a child process
/// (ChildSide), an instance of the user's program (proc::ProgramInstance), or several processes of
/// either timed in turn (ProcessGroup).
class RowSide : public Side {
 public:
  /// Processes the side is timed in: 0 for a side in ptune's own process.
  virtual size_t processes() const { return 0; }
  /// Whether the side, kept from the previous row, can be the other side of a comparison of
  /// `count` processes a side (ProcessGroup::reusable). Throws nothing.
  virtual bool reusable(size_t count) const { return false; }
  /// Starts a new comparison with the same processes, in plain or `shifted` turns
  /// (ProcessGroup::restart); its errors then speak of the previous row's processes.
  virtual void restart(bool shifted) {}
  /// What the side's processes reported of themselves, one line; "" in ptune's own process.
  virtual std::string process_description() const { return ""; }
  /// From now on the side is the previous row's (kept as a later row's other side).
  virtual void mark_previous() {}
  /// The Measurement of `count` windows from the `first` one timed (all by default): the point,
  /// its interval, the split, the loss, memory and notes. Throws std::runtime_error when that
  /// leaves no window.
  virtual Measurement result(size_t first = 0, size_t count = SIZE_MAX) = 0;
  /// Sets the progress callback (phase "measure": windows done, of `planned`).
  virtual void set_progress(const Progress& progress, int64_t planned) = 0;
};

/// One configuration's pipeline (trainer, loader, feeder), built and warmed up once, then timed
/// in windows of measure.steps steps. Two benches interleave their windows (compare()): both
/// are built and warm, the idle one's loader paused.
class Bench : public RowSide {
 public:
  /// Builds the pipeline and runs its warm-up steps (untimed), stopping early once `deadline`
  /// has passed: then the last warm-up step is kept as the bench's first window (one step, not
  /// warm) and its notes say so. Throws ConfigError for options
  /// the device cannot honour, DataError for bad data, std::runtime_error (out of memory, a
  /// failing collective).
  explicit Bench(const config::ExperimentConfig& cfg, const Progress& progress = {},
                 const Deadline& deadline = {});
  ~Bench() override;
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  /// Times measure.steps steps, synchronizing the device before the clock read that ends the
  /// window; returns ms/step (in a data-parallel run, the slowest rank's: every rank gets the
  /// same value, so decisions taken on it agree across ranks). Where `deadline` would pass first
  /// the window is cut short between steps (at least one) and kept: its ms/step is over the
  /// steps it ran. The ranks of a data-parallel run agree before the window how many of its
  /// steps fit (by the slowest rank's last ms/step), so that every rank stops at the same step;
  /// a single process also checks between steps. The window the warm-up left (see the
  /// constructor) is returned first, without running a step.
  double window(const Deadline& deadline) override;
  int64_t steps_per_window() const override;
  double samples_per_step() const override;
  /// Holds the loader's workers (and sets the process-wide settings back on resume()).
  void pause() override;
  void resume() override;
  /// RowSide::result; collective in a data-parallel run.
  Measurement result(size_t first = 0, size_t count = SIZE_MAX) override;
  void set_progress(const Progress& progress, int64_t planned) override;
  const config::ExperimentConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Sets `m`'s window figures from `window_ms` (ms/step per window) and the processes they ran in
/// (`process`, one per window; empty: one process): repeat_ms, repeat_process, the geometric
/// mean ms/step (over several processes: of the process means) and samples/s (`world` ranks of
/// m.batch_size) with its 95% interval (mean_interval), the spread, and a note naming outlying
/// windows. Throws std::invalid_argument when `process` is neither empty nor one per window.
void set_windows(Measurement& m, const std::vector<double>& window_ms, int64_t world,
                 const std::vector<int>& process = {});

/// The note of a row `short_count` of whose `kept` windows ran fewer than `steps` (measure.steps)
/// steps, the budget having ended them. Throws nothing.
std::string short_windows_note(int64_t short_count, size_t kept, int64_t steps);

/// The speedup of `b` over `a` in samples/s from their windows measured apart (two runs, two
/// trials): stats::welch_speedup on time per sample, or over processes where a side ran in
/// several (speedup_interval), at speedup_level(either was measured under competing load).
/// Throws nothing.
stats::Interval speedup_between(const Measurement& a, const Measurement& b);

/// How long a row is measured (from its config's measure section).
struct WindowPlan {
  int64_t min_pairs = 3;     // measure.repeats: windows of each side, after the start-up
                             // transient, before any decision
  Deadline deadline;         // measure.max_s, from the row's start
  stats::NoiseRule rule;     // measure.target_ci_pct, measure.noise_pct
  int64_t max_pairs = 1000;  // a hard stop for very short windows
  int64_t processes = 0;     // sides in child processes: this many a side (in_processes())
  /// Asked at every look of compare() (after each pair from min_pairs on) until it says yes:
  /// whether the row has run under competing load so far. From then on the interval is read at
  /// kSpeedupLevelUnderLoad, and faster or slower no longer ends the row early: it is read
  /// once, when the budget is spent (within noise still ends it). Unset: never under load.
  std::function<bool()> under_load;
};

/// The plan for `cfg`; its deadline starts now (make it at the row's start, before the pipeline
/// is built): measure.max_s > 0 is the budget; 0 (auto) is at most 30 s, and at most 4x what
/// the row took to time its first measure.repeats windows (pairs). In a data-parallel run the
/// deadline is agreed across the ranks (Deadline::agree_with): make the plan on every rank.
WindowPlan window_plan(const config::ExperimentConfig& cfg);

/// `plan` for sides in `processes` child processes each (measure.processes): min_pairs at least
/// two windows for each process. Throws nothing.
WindowPlan in_processes(WindowPlan plan, int64_t processes);

/// Why timing a row stopped: a verdict (or a tight enough interval alone) was reached, the
/// row's budget was spent, or WindowPlan::max_pairs.
enum class StopRule { kDecided, kBudget, kMaxPairs };

/// A speedup measured interleaved.
struct Comparison {
  std::vector<double> a_ms, b_ms;         // the pairs' windows (ms/step), the transient left out
  std::vector<int> a_process, b_process;  // the process each of those ran in, for sides timed in
                                          // several (Side::last_process); else empty
  int64_t transient = 0;                  // pairs left out at the front: the start-up transient
                                          // (transient_pairs); each side's windows timed in the
                                          // comparison are [transient, transient + b_ms.size())
  stats::Interval speedup;                // of B over A in samples/s, at speedup_level(under_load)
  stats::Verdict verdict = stats::Verdict::kUndecided;
  bool under_load = false;              // plan.under_load said so at a look (it then stays so)
  StopRule stop = StopRule::kMaxPairs;  // why measuring stopped
  bool unpaired = false;                // the budget ran out between a pair's two windows: the first
                                        // was timed (the last of its side's) and left out
  double pair_ms = 0;                   // wall time of a pair, on average over every pair timed
};

/// The note of a row left undecided by its budget on a quiet machine: how much one pair's
/// speedup varied, and about how many pairs (and how long) that spread would need for a verdict
/// (pairs_to_decide), so that the user can raise measure.max_s or steady the machine. Empty
/// where it does not apply (decided, under load, fewer than 3 pairs kept). Throws nothing.
std::string undecided_note(const Comparison& c, const WindowPlan& plan);

/// `load.stop(gpu)`, with `under_load` agreed across the ranks of a data-parallel run (true when
/// any rank's is): what a rank decides by it, every rank decides alike. Collective in a
/// data-parallel run (every rank calls it at the same point). Throws what the collective throws.
system::LoadReport agreed_load(system::LoadSampler& load, int gpu, const config::ExperimentConfig& cfg);

/// Times `a` and `b` interleaved, in blocks of two pairs, A B then B A or B A then A B, each
/// block's order drawn from a fixed-seed generator (kPairOrderSeed: the same for every row and
/// run). Within a block a linear drift cancels, as in ABBA; and no periodic disturbance (the
/// scheduler sharing the cores with another program in a rhythm of a few windows) can line up
/// with one side, as it can with a fixed ABBA ABBA order. The first pairs that transient_pairs()
/// calls the start-up transient are left out of every figure (recomputed at every pair). Until
/// at least plan.min_pairs pairs after the transient and then until plan.deadline leaves no time
/// for another pair (one step of each side, at their last ms/step), or earlier at a look (after
/// each pair) that decides: within noise; or faster or slower when the interval at
/// kEarlyStopLevel says so too, never under load (WindowPlan::under_load). The first pair is
/// always timed, whatever the deadline; a pair's second window only when one step of it fits
/// (else the first is left out: Comparison::unpaired). The verdict is read from the interval at
/// speedup_level(under_load) of the pairs kept.
/// `on_pair` (if set) is called after every pair with the comparison so far (progress; it may
/// throw to stop). Throws what the sides throw.
Comparison compare(Side& a, Side& b, const WindowPlan& plan,
                   const std::function<void(const Comparison&)>& on_pair = {});
inline constexpr uint32_t kPairOrderSeed = 20261125;

/// What measure_alone() timed.
struct AloneRun {
  std::vector<double> ms;    // the windows' ms/step, the transient left out
  std::vector<int> process;  // the process each ran in (Side::last_process); empty: one process
  int64_t transient = 0;     // windows left out at the front (transient_end)
  StopRule stop = StopRule::kMaxPairs;
};

/// Times `s` alone until at least plan.min_pairs windows after the start-up transient and its 95%
/// interval's half-width is at most plan.rule.target_pct, or plan.deadline leaves no time for
/// another step (the first window is always timed).
AloneRun measure_alone(Side& s, const WindowPlan& plan,
                       const std::function<void(const std::vector<double>&)>& on_window = {});

/// The notes a timed row gets from how its measuring ended: the start-up transient left out
/// (`transient` windows, or pairs when `paired`), and a row that ran out of its time (`stop`
/// kBudget) with fewer than plan.min_pairs windows (pairs) kept. Throws nothing.
std::vector<std::string> run_notes(int64_t transient, size_t kept, StopRule stop, const WindowPlan& plan,
                                   bool paired);

/// Measures one configuration alone (Bench + measure_alone), with the load sampled. In
/// a data-parallel run (dist::process_group names a world) every rank measures its shard;
/// ms/step is the slowest rank's, the shares and the loss are the ranks' means, the peak memory
/// their maximum. Data rows time the loader, the copy and (uint8 batches) the conversion on the
/// device: the input as the model would get it. measure.warmup_steps is raised to what the
/// config needs (Trainer::warmup_steps_needed; a note says so), so that a CUDA-graph capture
/// or cuDNN's autotuning never lands in the timed steps.
/// Throws ConfigError for options the device cannot honour, DataError for bad data,
/// std::runtime_error when a collective fails.
/// measure.max_s bounds the whole measurement, the pipeline's construction and warm-up included
/// (Deadline); the first windows' start-up transient is left out (transient_end) and noted.
Measurement measure(const config::ExperimentConfig& cfg, const Progress& progress = {});

/// What profile() adds to a measured row.
struct ProfileResult {
  std::optional<double> gpu_busy_pct;  // CUDA: merged kernel time per recorded step over
                                       // `timed_ms_per_step`, at most 100; none on the CPU
  std::string trace_path;              // this rank's Chrome trace, or "" when none was written
};

/// Where profile() writes a row's trace, and what the trace says about the row.
struct TraceTarget {
  std::string folder;  // the row's folder (every rank writes its trace there); "": no trace
  std::string row;     // the row's name ("ptune" metadata)
  nlohmann::ordered_json changes = nlohmann::ordered_json::object();  // the row's overrides
};

/// The trace's "ptune" metadata (JSON text), which tells ptune's traces from others: {"version",
/// "experiment", "row", "changes", "mode", "device" (the device the rank ran on, e.g. "cuda:0"),
/// "batch_size" (per rank), "profile_steps", "warmup_steps"}, and with `load` "load":
/// {"under_load", "summary"}, the load seen while the steps were recorded.
std::string trace_identity_json(const config::ExperimentConfig& cfg, const TraceTarget& target,
                                const std::string& device, const system::LoadReport* load = nullptr);

/// Profiles a row: builds it afresh, runs its warm-up, then records measure.profile_steps
/// steps with the profiler (kernels on a GPU), each inside a "ProfilerStep#<n>" range with
/// the ranges of core/ranges.hpp in it. GPU busy is the recorded steps' merged kernel time
/// per step over `timed_ms_per_step` (the row's measured ms/step): kernel durations come from
/// the device and are not slowed by recording, while the recorded steps' wall time is.
/// With measure.profile on and a `target.folder`, every rank writes its Chrome trace there as
/// trace_file_name() names it, with "distributedInfo" in a data-parallel run and "ptune"
/// (trace_identity_json) as metadata; the traces an earlier run left in the folder (files
/// named so, and the trace.json of older ptune versions) are removed first, by the first rank
/// of each machine, before any rank records. Run it after every timed measurement of the process: CUPTI stays
/// attached. Throws as measure(), and std::runtime_error when the folder cannot be written.
ProfileResult profile(const config::ExperimentConfig& cfg, double timed_ms_per_step,
                      const TraceTarget& target = {}, const Progress& progress = {});

/// The warm-up steps a row runs: measure.warmup_steps, raised to
/// engine::Trainer::warmup_steps_needed (data rows excepted); when raised, `note` (if given)
/// says "measure.warmup_steps raised from N to M: <why>, which must not be timed".
int64_t warmup_steps(const config::ExperimentConfig& cfg, std::string* note = nullptr);

/// Whether a measured row gets profile(): on a CUDA device (GPU busy) or with measure.profile.
bool wants_profile(const config::ExperimentConfig& cfg);

/// Trains a fresh model (seeded as every row) for `steps` steps and returns the loss of each
/// step (in a data-parallel run, the mean over ranks). Used to compare convergence.
std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps);

/// Compares a loss curve with a reference one over the last quarter of the shorter: the
/// verdict "unchanged" when their mean losses there differ by at most `tolerance` (relative),
/// else "altered"; `text` says it with the numbers.
struct ConvergenceVerdict {
  bool altered = false;
  double mean_loss = 0, reference_mean_loss = 0;
  std::string text;
};
ConvergenceVerdict compare_convergence(const std::vector<double>& curve, const std::vector<double>& reference,
                                       double tolerance = 0.10);

}  // namespace ptune::measure
