#include "tune/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>

#include <torch/version.h>

#include "analyze/advice.hpp"
#include "analyze/trace_reader.hpp"
#include "system/rendezvous.hpp"
#include "dist/group.hpp"
#include "engine/cannot_help.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "system/process.hpp"
#include "bench/child_side.hpp"
#include "tune/sides.hpp"
#include "measure/diagnosis.hpp"
#include "bench/bench.hpp"
#include "bench/convergence.hpp"
#include "bench/profile.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/schedule.hpp"
#include "measure/side.hpp"
#include "bench/trace.hpp"
#include "proc/program.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {

std::vector<size_t> parse_rows(const std::string& spec, size_t n) {
  const std::string allowed = n == 1 ? "the sweep has one row, 0" : "allowed: 0 to " + std::to_string(n - 1);
  auto index = [&](const std::string& part, const std::string& text) -> size_t {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
        throw std::invalid_argument(text);
      v = std::stoull(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size())
      throw UsageError("--rows: '" + part + "' is not a row index or range (e.g. 7, 0,3 or 5-7)");
    if (v >= n) throw UsageError("--rows: row " + text + " does not exist; " + allowed);
    return static_cast<size_t>(v);
  };
  std::vector<size_t> rows;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string part = spec.substr(start, comma - start);
    const size_t dash = part.find('-');
    if (dash == std::string::npos) {
      rows.push_back(index(part, part));
    } else {
      const size_t lo = index(part, part.substr(0, dash)), hi = index(part, part.substr(dash + 1));
      if (lo > hi) throw UsageError("--rows: '" + part + "' is an empty range (write it low-high)");
      for (size_t i = lo; i <= hi; ++i) rows.push_back(i);
    }
    start = comma + 1;
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

report::Environment environment(const config::ExperimentConfig& cfg) {
  report::Environment e;
  e.torch = TORCH_VERSION;
  c10::Device device(c10::kCPU);
  try {
    device = runtime::resolve_device(cfg.device);
  } catch (const ConfigError&) {
  }
  // What each rank uses (a data-parallel rank gets its share of the cores); the row's Bench sets it.
  e.device = runtime::device_name(device);
  e.device_kind = device.is_cuda() ? "cuda" : "cpu";
  e.cuda = runtime::cuda::version();
  e.cpu_threads = dist::rank_cpu_threads(cfg.cpu_threads);
  e.world_size = system::world_size();
  e.cpu = runtime::cpu_info();
  return e;
}

namespace {

/// What pass 1 learns about one row.
struct Timed {
  std::optional<measure::Measurement> m;
  std::vector<double> prev_ms;              // the previous row's windows, paired with m->repeat_ms
  std::vector<int> prev_process;            // the process each of prev_ms ran in (in_child)
  bool rebuilt = false;                     // interleaved by rebuilding per window
  std::unique_ptr<measure::RowSide> bench;  // kept for the next row of the mode (null when rebuilt)
};

/// A configuration rebuilt for every window (two pipelines, or two programs' instances, that do
/// not fit in memory at once): each window builds the pipeline (or starts one instance of the
/// program), runs its warm-up, times the window and frees it all (ends the instance); the row's
/// deadline counts every construction, start-up and warm-up.
class RebuildSide : public measure::Side {
 public:
  RebuildSide(const config::ExperimentConfig& cfg, measure::Progress progress)
      : cfg_(cfg), progress_(std::move(progress)) {}
  double window(const measure::Deadline& deadline) override {
    const std::unique_ptr<measure::RowSide> side = tune::make_side(cfg_, progress_, deadline);
    side->resume();
    const double ms = side->window(deadline);
    windows_.push_back(ms);
    last_ = side->result();
    side->pause();
    return ms;
  }
  int64_t steps_per_window() const override { return cfg_.measure.steps; }
  double samples_per_step() const override {
    if (cfg_.program.enabled()) return proc::samples_per_step(cfg_.program);
    return static_cast<double>(cfg_.loader.batch_size * system::world_size());
  }
  /// The last side's figures with `count` windows' times from the `first` one. Throws when that
  /// leaves no window.
  measure::Measurement result(size_t first, size_t count) const {
    if (!last_ || first >= windows_.size()) throw std::runtime_error("no window was timed");
    measure::Measurement m = *last_;
    const auto begin = windows_.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = begin + static_cast<std::ptrdiff_t>(std::min(count, windows_.size() - first));
    measure::set_windows(m, std::vector<double>(begin, end),
                         cfg_.program.enabled() ? 1 : system::world_size());
    return m;
  }

 private:
  config::ExperimentConfig cfg_;
  measure::Progress progress_;
  std::vector<double> windows_;
  std::optional<measure::Measurement> last_;
};

/// The comparison's own notes on the row (the transient left out, a row that ran out of time) and
/// its count of transient pairs.
void add_run_notes(measure::Measurement& m, const measure::Comparison& c, const measure::WindowPlan& plan) {
  m.transient_windows = c.transient;
  for (auto& n : measure::run_notes(c.transient, c.b_ms.size(), c.stop, plan, true))
    m.notes.push_back(std::move(n));
  if (std::string n = measure::undecided_note(c, plan); !n.empty()) m.notes.push_back(std::move(n));
}

/// The notes of a row that ran in child processes `b`: what they reported of their process, and
/// for a row compared with processes `a` how the comparison counted their spread (`kept`: the
/// previous row's own processes, else fresh ones started in turn with the row's).
void add_process_notes(measure::Measurement& m, const measure::RowSide& b,
                       const config::ExperimentConfig& cfg, const measure::Comparison* compared,
                       const measure::RowSide* a = nullptr, bool kept = false) {
  for (const auto& n : system::plan_process(cfg.process).notes) m.notes.push_back(n);
  m.notes.push_back(
      std::string(cfg.program.enabled() ? "this row's program: " : "this row's child processes: ") +
      b.process_description());
  if (!compared || !a) return;
  const auto t =
      stats::speedup_terms(compared->a_ms, compared->a_process, compared->b_ms, compared->b_process, true);
  const std::string n = std::to_string(a->processes());
  std::string text =
      (kept ? "timed against the " + n +
                  " processes of the row it is compared with, kept warm "
                  "since that row"
            : "timed against " + n +
                  " fresh processes of the settings of the row it is compared with, started in "
                  "turn with its own") +
      "; the interval counts the spread between processes";
  if (t.size() == 2 && t[1].df >= 1) {
    char spread[120];
    std::snprintf(spread, sizeof spread,
                  " (this row's processes' own speed varied by %.1f%%, one standard deviation)",
                  100.0 * (std::exp(std::sqrt(t[1].var * (t[1].df + 1))) - 1.0));
    text += spread;
  }
  m.notes.push_back(text);
}

/// Times one row: against `prev` (the previous ok row of its mode, built and warm) when there
/// is one, else alone. When the two do not fit in memory together, `release` frees every kept
/// pipeline and both are rebuilt for every window instead. measure.max_s bounds it all, from
/// the construction of its pipeline (measure::Deadline), the rebuilt windows included. With
/// `in_child` (a sweep with process-level rows: every row of it runs in child processes;
/// bench/child_side.hpp) the row runs in measure.processes fresh processes started with its
/// settings, against `prev`'s processes (the previous row's, kept warm: a ProcessGroup) or, without
/// it, as many fresh processes of `prev_cfg`; its processes are kept for the next row.
Timed time_row(const config::ExperimentConfig& cfg, measure::RowSide* prev,
               const config::ExperimentConfig* prev_cfg, bool in_child, const measure::Progress& progress,
               const std::function<void()>& release, const std::atomic<bool>* interrupted) {
  // The previous row's windows count as this row's pairs: progress speaks of this row, but an
  // interruption stops them too.
  const measure::Progress prev_progress = [interrupted](const std::string&, int64_t, int64_t) {
    if (interrupted && interrupted->load()) throw Interrupted();
  };
  const c10::Device device = dist::rank_device(cfg.device);
  const int gpu = device.is_cuda() ? device.index() : -1;
  measure::WindowPlan plan =
      measure::window_plan(cfg, bench::rank_max(cfg));  // the row's deadline starts here
  // The load, sampled from the row's start (its build and warm-up are this job's time too, and a
  // longer span is one /proc's tick counters resolve); whether it competed is agreed across the
  // ranks (any rank's), at every look and at the end, so that every rank decides alike.
  system::LoadSampler load;
  auto start_load = [&] {
    load.start(gpu, gpu >= 0 ? runtime::cuda::device_uuid(gpu) : "");
    plan.under_load = [&load, gpu, &cfg] { return bench::agreed_load(load, gpu, cfg).under_load; };
  };
  // The row's load: at its end, or at any look of the comparison (which judged by it).
  auto finish_load = [&](measure::Measurement& m, bool compared_under_load) {
    m.load = bench::agreed_load(load, gpu, cfg);
    m.load.under_load = m.load.under_load || compared_under_load;
  };
  Timed t;
  start_load();
  try {
    std::unique_ptr<measure::RowSide> prev_processes;  // the previous row's, for this row alone
    if (in_child) {
      plan = measure::in_processes(plan, cfg.measure.processes);
      // The previous row's processes, still warm, are this comparison's other side: only the
      // row's own start (half the starts, so twice the windows in the row's budget). Fresh ones
      // of its settings where they are not as many as the row's, or one never timed a window.
      measure::RowSide* kept = prev;
      if (kept && !kept->reusable(static_cast<size_t>(cfg.measure.processes))) kept = nullptr;
      if (kept) kept->restart(false);
      tune::RowProcesses p = tune::start_row_processes(kept ? nullptr : prev_cfg, cfg, cfg.measure.processes,
                                                       prev_progress, progress, plan.deadline);
      prev_processes = std::move(p.prev);
      t.bench = std::move(p.row);
      if (!kept) prev = prev_processes.get();
      // A program's start-up (an interpreter, its imports, a compilation) is not a pipeline's
      // build: an automatic budget counts from the instances' first windows.
      if (cfg.program.enabled() && cfg.measure.max_s <= 0) plan.deadline = measure::Deadline(0);
    } else {
      t.bench = tune::make_side(cfg, progress, plan.deadline);
    }
    t.bench->set_progress(progress, plan.min_pairs);
    if (prev) {
      prev->set_progress(prev_progress, 0);
      const measure::Comparison c = measure::compare(*prev, *t.bench, plan);
      t.prev_ms = c.a_ms;
      t.prev_process = c.a_process;
      t.m = t.bench->result(static_cast<size_t>(c.transient), c.b_ms.size());
      add_run_notes(*t.m, c, plan);
      finish_load(*t.m, c.under_load);
      if (in_child) add_process_notes(*t.m, *t.bench, cfg, &c, prev, !prev_processes);
    } else {
      const measure::AloneRun r = measure::measure_alone(*t.bench, plan);
      t.m = t.bench->result(static_cast<size_t>(r.transient), r.ms.size());
      t.m->transient_windows = r.transient;
      for (auto& n : measure::run_notes(r.transient, r.ms.size(), r.stop, plan, false))
        t.m->notes.push_back(std::move(n));
      finish_load(*t.m, false);
      if (in_child) add_process_notes(*t.m, *t.bench, cfg, nullptr);
    }
    return t;
  } catch (const std::exception& e) {
    // A program's instances hold their memory on the device until they end: one that ran out of
    // it beside the previous row's is started afresh for every window, as a pipeline is rebuilt.
    if (!prev || (in_child && !cfg.program.enabled()) || !is_out_of_memory(e)) throw;
  }
  // Out of memory with the previous row's pipeline (or program instances) alive: rebuild both
  // for every window, within what is left of the row's deadline.
  t = Timed{};
  release();
  runtime::cuda::empty_cache();
  RebuildSide a(*prev_cfg, prev_progress), b(cfg, progress);
  start_load();
  const measure::Comparison c = measure::compare(a, b, plan);
  t.m = b.result(static_cast<size_t>(c.transient), c.b_ms.size());
  add_run_notes(*t.m, c, plan);
  finish_load(*t.m, c.under_load);
  t.prev_ms = c.a_ms;
  t.rebuilt = true;
  return t;
}

/// The optimizations the rows before `k` (with `later`, every other row) of the same model.arch
/// measured, with their verdicts, for the diagnosis (what one architecture measured says nothing
/// about another).
std::vector<measure::Tried> tried_before(const std::vector<report::Row>& rows, size_t k, bool later = false) {
  std::vector<measure::Tried> tried;
  for (size_t j = 0; j < (later ? rows.size() : k) && j < rows.size(); ++j) {
    if (j == k) continue;
    const report::Row& r = rows[j];
    if (!r.m || r.verdict_prev.empty() || !r.changes.is_object()) continue;
    if (k < rows.size() && r.arch != rows[k].arch) continue;
    for (auto it = r.changes.begin(); it != r.changes.end(); ++it)
      tried.push_back({it.key(), it.value(), j, r.name, r.verdict_prev, r.speedup_vs_prev});
  }
  return tried;
}

/// One sweep, stage by stage: the primer, pass 1 (every row timed, each against the previous
/// ok row of its mode and model.arch, whose pipeline stays built and warm until then) and pass 2
/// (GPU busy and traces, after the last timed step).
class SweepRun {
 public:
  SweepRun(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out)
      : cfg_(cfg), options_(options), out_(out), rows_(config::expand_sweep(cfg)) {
    leave_out_what_cannot_help();
    for (size_t i = 0; i < rows_.size(); ++i)
      process_rows_ = process_rows_ || (runs(i) && (!system::default_process(rows_[i].second.process) ||
                                                    rows_[i].second.program.enabled()));
  }

  void run() {
    try {
      prime();
      for (size_t i = 0; i < rows_.size(); ++i) {
        if (!selected(i)) continue;
        Measured m = time_one(i);
        if (companion_ && m.row.m) {  // the first measured row's companion: the next row goes there
          companion_.reset();
          system::return_free_memory();
        }
        add_row(i, std::move(m));
      }
      keep_one_for_profiling();  // profiling builds its own pipelines
      for (size_t k = 0; k < out_.rows.size(); ++k) profile_row(k);
      live_.clear();
      diagnose_with_every_row();
    } catch (const Interrupted&) {
      out_.status = report::RunStatus::kInterrupted;
      if (options_.on_row) options_.on_row(out_);
      throw;
    }
    out_.status = report::RunStatus::kComplete;
    if (options_.on_row) options_.on_row(out_);
  }

 private:
  /// A row's bench kept built and warm for the next row of its mode and model.arch.
  struct Live {
    size_t k;                                 // its index in out.rows
    std::unique_ptr<measure::RowSide> bench;  // in-process, or its child processes (process_rows_)
  };
  /// A row measured (or failed), before it joins the results.
  struct Measured {
    report::Row row;
    std::unique_ptr<measure::RowSide> kept;
  };
  /// A row in the results: its place in the sweep, its config, where its traces go.
  struct Done {
    size_t index;                  // in the sweep
    config::ExperimentConfig cfg;  // the row's config
    bench::TraceTarget trace;      // where its traces go (measure.profile), one per rank
  };

  bool selected(size_t i) const {
    return options_.rows.empty() || std::binary_search(options_.rows.begin(), options_.rows.end(), i);
  }
  /// Whether row `i` is selected and will be timed (not left out as unable to help here).
  bool runs(size_t i) const { return selected(i) && !left_out_.count(i); }

  /// The rows that cannot help on this machine (engine::cannot_help_here), selected or not, left out:
  /// each row after one is expanded again without its changes, as if the sweep had not had it.
  void leave_out_what_cannot_help() {
    config::ExperimentConfig without = cfg_;
    for (size_t i = 0; i < rows_.size() && i < without.sweep.size(); ++i) {
      std::string why;
      try {
        why = engine::cannot_help_here(i > 0 ? rows_[i - 1].second : cfg_, rows_[i].second);
      } catch (const ConfigError&) {
        continue;  // the row's own error, reported when it is built
      }
      if (why.empty()) continue;
      left_out_[i] = why + "; left out, and the rows after it run without its changes";
      without.sweep[i].set = nlohmann::ordered_json::object();
      auto again = config::expand_sweep(without);
      for (size_t j = i + 1; j < rows_.size(); ++j) rows_[j].second = std::move(again[j].second);
    }
  }

  measure::Progress progress_of(size_t i, const config::ExperimentConfig& row_cfg) const {
    return [this, i, &row_cfg](const std::string& phase, int64_t step, int64_t total) {
      if (options_.interrupted && options_.interrupted->load()) throw Interrupted();
      if (options_.on_progress)
        options_.on_progress(i, rows_[i].first.name, phase, step, total,
                             row_cfg.loader.batch_size * out_.environment.world_size);
    };
  }

  static report::RowStatus failure(const std::exception& e) {
    if (dynamic_cast<const ConfigError*>(&e)) return report::RowStatus::skipped(e.what());
    if (!is_out_of_memory(e)) return report::RowStatus::failed(message_of(e));
    runtime::cuda::empty_cache();  // the next row starts without this one's cached blocks
    return report::RowStatus::failed("out of memory");
  }

  /// The primer (bench::prime), in ptune's own process before any row is timed: one-time
  /// initializations (LibTorch's and oneDNN's, on first use) happen before any timed pipeline
  /// exists (a fresh process's first pipeline ran 2-3% slower than an identical one built after
  /// it: an A/A pair of ResNet-18 rows, 6 quiet runs, +2.4% for the second; with a primer -1.0%).
  /// On a CPU (bench::times_beside_companion) its second pipeline is kept as the first row's
  /// companion until a row has been timed, so that every row is timed beside one other live
  /// pipeline, as each later row is beside the row before it: a first row timed alone ran 1.5x
  /// faster than the same configuration beside another pipeline or in a fresh process
  /// (docs/statistics.md, "The first row beside a companion"). Rows timed apart
  /// (measure.interleave false) are each alone, the first too. Its errors are the row's own,
  /// reported when the row itself is built. A sweep with process-level rows (process.* keys) has
  /// no primer: every row runs in child processes, the first too, so that the baseline is a
  /// default process as a user's `python train.py` is.
  void prime() {
    if (process_rows_) return;
    for (size_t i = 0; i < rows_.size(); ++i)
      if (runs(i)) {
        const auto& first = rows_[i].second;
        companion_ = bench::prime(first, progress_of(i, first));
        if (!first.measure.interleave) companion_.reset();
        return;
      }
  }

  /// Before pass 2, which builds a pipeline of its own for each profiled row: on a CPU the last
  /// timed row's pipeline stays alive and idle beside them, so that each row's trace is recorded
  /// as its windows were timed, beside one other live pipeline, and every other one is freed; on
  /// a GPU all are, as its memory is what limits a trace's pipeline. Under glibc's default malloc
  /// a trace's steps then ran at its row's speed in 10 of 14 runs of a small config, against 3 of
  /// 7 with no other pipeline alive (then 45-50 ms a step where the row's windows ran at 67-73:
  /// docs/statistics.md, "The first row beside a companion").
  void keep_one_for_profiling() {
    bool any = false;
    for (const Done& d : done_) any = any || bench::wants_profile(d.cfg);
    auto last = live_.end();
    for (auto it = live_.begin(); it != live_.end(); ++it)
      if (it->second.bench && (last == live_.end() || it->second.k > last->second.k)) last = it;
    if (!any || process_rows_ || last == live_.end() ||
        !bench::times_beside_companion(done_[last->second.k].cfg)) {
      live_.clear();
      return;
    }
    Live keep = std::move(last->second);
    const std::string key = last->first;
    live_.clear();
    live_[key] = std::move(keep);
    system::return_free_memory();  // the freed pipelines' pages back before the traces' are built
  }

  /// Row `i` timed (pass 1), with the notes its measurement gives it; failed or skipped with
  /// its reason when it could not be.
  Measured time_one(size_t i) {
    const auto& [spec, row_cfg] = rows_[i];
    Measured out;
    report::Row& row = out.row;
    row.index = i;
    row.name = spec.name;
    row.changes = spec.set;
    row.num_workers = row_cfg.loader.num_workers;
    row.mode = row_cfg.measure.mode;
    row.arch =
        row_cfg.program.enabled() ? "program" : row_cfg.model.arch;  // results' "arch" of a program row
    row.rule = measure::noise_rule(row_cfg);
    const measure::Progress progress = progress_of(i, row_cfg);
    try {
      if (!row_cfg.measure.interleave) live_.clear();
      const std::string key = std::string(config::name(row.mode)) + "/" + row.arch;
      Live* prev = live_.count(key) ? &live_[key] : nullptr;
      if (left_out_.count(i)) throw ConfigError(left_out_.at(i));
      auto time_it = [&] {
        return time_row(
            row_cfg, prev ? prev->bench.get() : nullptr, prev ? &done_[prev->k].cfg : nullptr, process_rows_,
            progress, [&] { live_.clear(); }, options_.interrupted);
      };
      Timed t;
      try {
        t = time_it();
      } catch (const std::exception& e) {
        if (!companion_ || !is_out_of_memory(e)) throw;
        // The first row and its companion did not fit in memory together: the row alone.
        companion_.reset();
        runtime::cuda::empty_cache();
        t = time_it();
        t.m->notes.push_back(
            "timed alone: it and the primer's companion pipeline did not fit in memory at once");
      }
      row.m = std::move(t.m);
      row.prev_ms = std::move(t.prev_ms);
      row.prev_process = std::move(t.prev_process);
      row.rebuilt = t.rebuilt;
      out.kept = std::move(t.bench);
      add_measurement_notes(row);
      if (row_cfg.measure.convergence_steps > 0 && row_cfg.measure.mode == config::Mode::kTrain) {
        if (progress) progress("convergence", 0, row_cfg.measure.convergence_steps);
        row.loss_curve = bench::loss_curve(row_cfg, row_cfg.measure.convergence_steps);
      }
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      row.status = failure(e);
      // The previous row's processes may be what failed (a child that died): the next row starts
      // fresh ones of its settings instead.
      const auto kept = live_.find(std::string(config::name(row.mode)) + "/" + row.arch);
      if (process_rows_ && kept != live_.end()) kept->second.bench.reset();
    }
    return out;
  }

  /// The notes and status a measured row gets from how it was measured: rebuilt pipelines,
  /// competing load or a slowed GPU, a CUDA graph that fell back to eager batches.
  static void add_measurement_notes(report::Row& row) {
    row.notes = row.m->notes;
    if (row.rebuilt && row.arch == "program")
      row.notes.push_back(
          "interleaved by starting each side's program afresh for every window, one instance at a time: "
          "instances of the two did not fit in memory at once (an instance's start-up and warm-up are "
          "in the row's budget, measure.max_s)");
    else if (row.rebuilt)
      row.notes.push_back(
          "interleaved by rebuilding both pipelines for every window: the two did not fit in memory at once");
    if (row.m->load.under_load)
      row.notes.push_back("measured under competing load (" + row.m->load.summary() +
                          "): its figures are less certain than on a quiet machine");
    else if (!row.m->load.sampled && row.m->load.min_seconds > 0)  // "?" in the load cell: why
      row.notes.push_back(row.m->load.summary());
    if (!row.m->load.under_load)
      for (const auto& n : row.m->load.gpu_notes)  // the GPU's own state: not load, but it slows the row
        row.notes.push_back("the GPU was slowed down at the row's end (" + n + ")");
    if (!row.m->eager_fallback.empty()) row.status = report::RowStatus::eager_fallback(row.m->eager_fallback);
  }

  /// Row `i` joins the results: its speedups, its bench kept for the next row, its diagnosis,
  /// warnings and semantic notes; then the results are written (options.on_row).
  void add_row(size_t i, Measured measured) {
    const auto& [spec, row_cfg] = rows_[i];
    char index[24];
    std::snprintf(index, sizeof index, "%02zu-", i);
    done_.push_back(
        {i,
         row_cfg,
         {row_cfg.measure.out_dir + "/" + bench::slug(cfg_.name) + "/" + index + bench::slug(spec.name),
          spec.name, spec.set}});
    out_.rows.push_back(std::move(measured.row));
    report::Row& r = out_.rows.back();
    report::compute_speedups(out_.rows);
    // The next row of the mode is compared with this one (kept built, or its processes kept
    // warm); the one it replaces is freed.
    if (measured.kept) {
      live_[std::string(config::name(r.mode)) + "/" + r.arch] =
          Live{out_.rows.size() - 1, std::move(measured.kept)};
      if (!process_rows_) system::return_free_memory();  // the next pipeline on unused pages
    }
    if (process_rows_) end_unneeded_processes(i);
    if (r.m) {
      r.diagnosis =
          measure::with_peak(measure::diagnose(*r.m, row_cfg, tried_before(out_.rows, out_.rows.size() - 1),
                                               {}, runtime::cpu_info()),
                             report::pct_of_peak(r), r.m->peak_precision);
      warn_about_load(i, r);
    }
    note_training_changes(r);
    if (options_.on_row) options_.on_row(out_);
  }

  /// Once every row is measured, each row's diagnosis again with what the whole sweep measured:
  /// a move that a later row measured as within noise or slower is not advised either (an fp32
  /// row is not told to try the bf16 that the sweep's bf16 row found slower).
  void diagnose_with_every_row() {
    bool changed = false;
    for (size_t k = 0; k < out_.rows.size(); ++k) {
      report::Row& r = out_.rows[k];
      if (!r.m) continue;
      const std::string d = measure::with_peak(
          measure::diagnose(*r.m, done_[k].cfg, tried_before(out_.rows, k, true), {}, runtime::cpu_info()),
          report::pct_of_peak(r), r.m->peak_precision);
      changed = changed || d != r.diagnosis;
      r.diagnosis = d;
    }
    if (changed && options_.on_row) options_.on_row(out_);
  }

  /// Ends the kept processes of each mode and model.arch that no row after `i` times, so that
  /// idle children do not hold their pipelines' memory through the rest of the sweep.
  void end_unneeded_processes(size_t i) {
    for (auto it = live_.begin(); it != live_.end();) {
      bool needed = false;
      for (size_t j = i + 1; j < rows_.size() && !needed; ++j)
        needed =
            runs(j) && std::string(config::name(rows_[j].second.measure.mode)) + "/" +
                               (rows_[j].second.program.enabled() ? "program" : rows_[j].second.model.arch) ==
                           it->first;
      it = needed ? std::next(it) : live_.erase(it);
    }
  }

  /// A warning on stderr for a row measured under competing load or on a slowed GPU.
  static void warn_about_load(size_t i, const report::Row& r) {
    if (system::world_rank() != 0) return;
    if (r.m->load.under_load) {
      log::warn("row " + std::to_string(i) + " '" + r.name +
                "' measured under competing load: " + r.m->load.summary());
    } else if (!r.m->load.gpu_notes.empty()) {
      std::string notes;
      for (const auto& n : r.m->load.gpu_notes) notes += (notes.empty() ? "" : ", ") + n;
      log::warn("row " + std::to_string(i) + " '" + r.name +
                "': the GPU was slowed down at the row's end: " + notes);
    }
  }

  /// The notes of a row that changes what is trained: its loss against the first row of its
  /// model.arch, and its loss curve against the first row's (measure.convergence_steps).
  void note_training_changes(report::Row& r) {
    if (r.m && r.m->loss && r.mode == config::Mode::kTrain) {
      // The first row of each model.arch is the reference, not noted.
      if (!base_loss_.count(r.arch))
        base_loss_[r.arch] = *r.m->loss;
      else
        report::note_semantics(r, base_loss_[r.arch]);
    }
    if (r.loss_curve.empty()) return;
    const report::Row* first = nullptr;
    for (const auto& other : out_.rows)
      if (!other.loss_curve.empty()) {
        first = &other;
        break;
      }
    if (first != &r) r.notes.push_back(bench::compare_convergence(r.loss_curve, first->loss_curve).text);
  }

  /// Pass 2 for row `k`: its GPU busy and trace (measure.profile), in a child process started
  /// with its process settings where it has any.
  void profile_row(size_t k) {
    report::Row& r = out_.rows[k];
    const Done& d = done_[k];
    if (!r.m || !bench::wants_profile(d.cfg)) return;
    // A program row is profiled only when asked (measure.profile): its GPU busy came from NVML
    // while it was timed, and a profile runs the program once more.
    if (d.cfg.program.enabled() && !d.cfg.measure.profile) return;
    try {
      if (d.cfg.program.enabled()) {
        const proc::ProgramProfile p = proc::profile_program(
            d.cfg, d.trace.folder, progress_of(d.index, d.cfg), analyze::is_trace_file_name);
        r.m->trace_path = p.files.front();
        // Read as `ptune analyze FOLDER` reads it (DataError: a trace it cannot read, a note).
        const analyze::Analysis a = analyze::analyze(p.folder);
        r.m->trace_verdict = a.verdict.text();
        if (const analyze::Breakdown& b = a.ranks[a.primary]; b.has_gpu && b.gpu_span_us > 0)
          r.m->gpu_busy_pct = 100.0 * b.gpu_busy_total_us / b.gpu_span_us;  // device work over its span
        r.diagnosis = measure::diagnose(*r.m, d.cfg, tried_before(out_.rows, k), {}, runtime::cpu_info());
        if (options_.on_row) options_.on_row(out_);
        return;
      }
      const bench::ProfileResult p =
          system::default_process(d.cfg.process)
              ? bench::profile(d.cfg, r.m->ms_per_step, d.trace, progress_of(d.index, d.cfg))
              : bench::ChildSide(d.cfg, progress_of(d.index, d.cfg), measure::Deadline(), false)
                    .profile(r.m->ms_per_step, d.trace);
      r.m->gpu_busy_pct = p.gpu_busy_pct;
      r.m->trace_path = p.trace_path;
      r.diagnosis = measure::with_peak(
          measure::diagnose(*r.m, d.cfg, tried_before(out_.rows, k), {}, runtime::cpu_info()),
          report::pct_of_peak(r), r.m->peak_precision);
    } catch (const Interrupted&) {
      throw;
    } catch (const WriteError& e) {
      // The trace the row promised is missing: a failed row (the sweep goes on, exits 1).
      r.status = report::RowStatus::failed(e.what());
    } catch (const std::exception& e) {
      r.notes.push_back("profiling failed: " + failure(e).why);
    }
    if (options_.on_row) options_.on_row(out_);
  }

  const config::ExperimentConfig& cfg_;
  const SweepOptions& options_;
  report::Results& out_;
  std::vector<std::pair<config::SweepRow, config::ExperimentConfig>> rows_;
  std::map<size_t, std::string> left_out_;   // rows that cannot help here -> why
  bool process_rows_ = false;                // any row to time with process settings
  std::map<std::string, double> base_loss_;  // model.arch -> its first row's loss
  std::vector<Done> done_;                   // out.rows[k] is rows[done[k].index]
  std::map<std::string, Live> live_;         // mode/model.arch -> the last ok row's bench
  std::unique_ptr<bench::Bench> companion_;  // the primer's second pipeline, until the first row is timed
};

}  // namespace

void run_sweep(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out) {
  out.config = config::to_json(cfg);
  out.environment = environment(cfg);
  out.status = report::RunStatus::kRunning;
  runtime::resolve_device(cfg.device);  // a bad device fails the whole sweep, not each row
  SweepRun(cfg, options, out).run();
}

PairedTiming time_in_processes(const config::ExperimentConfig& prev, const config::ExperimentConfig& cfg,
                               const std::atomic<bool>* interrupted) {
  const measure::Progress progress = [interrupted](const std::string&, int64_t, int64_t) {
    if (interrupted && interrupted->load()) throw Interrupted();
  };
  Timed t = time_row(
      cfg, nullptr, &prev, true, progress, [] {}, interrupted);
  return {std::move(*t.m), std::move(t.prev_ms), std::move(t.prev_process)};
}

}  // namespace ptune::tune
