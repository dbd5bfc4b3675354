#include "tune/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>

#include <torch/version.h>

#include "bench/convergence.hpp"
#include "bench/profile.hpp"
#include "bench/trace.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"
#include "dist/group.hpp"
#include "engine/cannot_help.hpp"
#include "measure/diagnosis.hpp"
#include "measure/measurement.hpp"
#include "measure/schedule.hpp"
#include "measure/side_kind.hpp"
#include "measure/timing.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "system/process.hpp"
#include "system/rendezvous.hpp"
#include "tune/sides.hpp"
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

/// A row of the sweep: its entry, its configuration (the sweep's cumulative patches applied) and
/// its kind of side, chosen once here.
struct PlannedRow {
  config::SweepRow spec;
  config::ExperimentConfig cfg;
  const measure::SideKind* kind = nullptr;
};

/// Which rows a sweep runs, with what configuration and kind: the rows selected (--rows), those
/// left out because they cannot help here, and whether the sweep runs in processes.
class SweepPlan {
 public:
  SweepPlan(const config::ExperimentConfig& cfg, const std::vector<size_t>& selection)
      : selection_(selection) {
    for (auto& [spec, row_cfg] : config::expand_sweep(cfg)) rows_.push_back({spec, row_cfg, nullptr});
    leave_out_what_cannot_help(cfg);
    for (size_t i = 0; i < rows_.size(); ++i) {
      rows_[i].kind = &side_kind(rows_[i].cfg);
      in_processes_ = in_processes_ || (runs(i) && rows_[i].kind->needs_processes(rows_[i].cfg));
    }
  }

  size_t size() const { return rows_.size(); }
  const PlannedRow& operator[](size_t i) const { return rows_[i]; }
  bool selected(size_t i) const {
    return selection_.empty() || std::binary_search(selection_.begin(), selection_.end(), i);
  }
  /// Whether row `i` is selected and will be timed (not left out as unable to help here).
  bool runs(size_t i) const { return selected(i) && !left_out_.count(i); }
  /// Why row `i` is left out, or null.
  const std::string* left_out(size_t i) const {
    const auto it = left_out_.find(i);
    return it == left_out_.end() ? nullptr : &it->second;
  }
  /// Whether every row runs in processes of its own: a row of the sweep needs them (process
  /// settings, a program), so that each row is compared with one measured alike.
  bool in_processes() const { return in_processes_; }
  /// The key that pairs row `i` with the previous row it is compared with: its mode and arch.
  std::string key(size_t i) const {
    return std::string(config::name(rows_[i].cfg.measure.mode)) + "/" + rows_[i].kind->arch(rows_[i].cfg);
  }

 private:
  /// The rows that cannot help on this machine (engine::cannot_help_here), selected or not, left out:
  /// each row after one is expanded again without its changes, as if the sweep had not had it.
  void leave_out_what_cannot_help(const config::ExperimentConfig& cfg) {
    config::ExperimentConfig without = cfg;
    for (size_t i = 0; i < rows_.size() && i < without.sweep.size(); ++i) {
      std::string why;
      try {
        why = engine::cannot_help_here(i > 0 ? rows_[i - 1].cfg : cfg, rows_[i].cfg);
      } catch (const ConfigError&) {
        continue;  // the row's own error, reported when it is built
      }
      if (why.empty()) continue;
      left_out_[i] = why + "; left out, and the rows after it run without its changes";
      without.sweep[i].set = nlohmann::ordered_json::object();
      auto again = config::expand_sweep(without);
      for (size_t j = i + 1; j < rows_.size(); ++j) rows_[j].cfg = std::move(again[j].second);
    }
  }

  std::vector<size_t> selection_;
  std::vector<PlannedRow> rows_;
  std::map<size_t, std::string> left_out_;  // rows that cannot help here -> why
  bool in_processes_ = false;
};

/// The sides a sweep keeps alive between rows: for each key (mode and arch) the last ok row's side,
/// built and warm (or its processes warm), the other side of the next row of the key; and the
/// primer's companion until the first row is timed.
class KeptSides {
 public:
  struct Kept {
    size_t k;                                // the row's index in the results
    std::unique_ptr<measure::RowSide> side;  // null once its processes failed
  };

  Kept* find(const std::string& key) {
    const auto it = live_.find(key);
    return it == live_.end() ? nullptr : &it->second;
  }
  /// Keeps `side` of result row `k` for the next row of `key`; the one it replaces is freed.
  void keep(const std::string& key, size_t k, std::unique_ptr<measure::RowSide> side) {
    live_[key] = Kept{k, std::move(side)};
  }
  void clear() { live_.clear(); }
  /// Forgets the side of `key` (its processes may be what failed): the next row starts fresh ones.
  void forget(const std::string& key) {
    if (Kept* kept = find(key)) kept->side.reset();
  }
  /// Ends the sides of each key that no row after `i` of `plan` times, so that idle processes do
  /// not hold their pipelines' memory through the rest of the sweep.
  void end_unneeded(const SweepPlan& plan, size_t i) {
    for (auto it = live_.begin(); it != live_.end();) {
      bool needed = false;
      for (size_t j = i + 1; j < plan.size() && !needed; ++j)
        needed = plan.runs(j) && plan.key(j) == it->first;
      it = needed ? std::next(it) : live_.erase(it);
    }
  }
  /// Frees every side but the last timed row's, which `keep_last(cfg of its row)` may ask to keep;
  /// returns whether one was kept.
  bool keep_only_last(const std::function<bool(size_t k)>& keep_last) {
    auto last = live_.end();
    for (auto it = live_.begin(); it != live_.end(); ++it)
      if (it->second.side && (last == live_.end() || it->second.k > last->second.k)) last = it;
    if (last == live_.end() || !keep_last(last->second.k)) {
      live_.clear();
      return false;
    }
    Kept keep = std::move(last->second);
    const std::string key = last->first;
    live_.clear();
    live_[key] = std::move(keep);
    return true;
  }

  std::unique_ptr<measure::RowSide> companion;  // the primer's second pipeline, until the first row is timed

 private:
  std::map<std::string, Kept> live_;
};

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

/// One sweep, stage by stage: the primer, pass 1 (every row timed, each against the previous ok
/// row of its mode and arch, whose side stays alive until then: KeptSides) and pass 2 (GPU busy
/// and traces, after the last timed step); which rows, and as what, is the SweepPlan's.
class SweepRun {
 public:
  SweepRun(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out)
      : cfg_(cfg), options_(options), out_(out), plan_(cfg, options.rows) {}

  void run() {
    try {
      prime();
      for (size_t i = 0; i < plan_.size(); ++i) {
        if (!plan_.selected(i)) continue;
        Measured m = time_one(i);
        if (kept_.companion && m.row.m) {  // the first measured row's companion: the next row goes there
          kept_.companion.reset();
          system::return_free_memory();
        }
        add_row(i, std::move(m));
      }
      keep_one_for_profiling();  // profiling builds its own pipelines
      for (size_t k = 0; k < out_.rows.size(); ++k) profile_row(k);
      kept_.clear();
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
  /// A row measured (or failed), before it joins the results.
  struct Measured {
    report::Row row;
    std::unique_ptr<measure::RowSide> kept;
  };
  /// A row in the results: its place in the sweep, its config and kind, where its traces go.
  struct Done {
    size_t index;                   // in the sweep
    config::ExperimentConfig cfg;   // the row's config
    const measure::SideKind* kind;  // the row's kind of side
    measure::TraceTarget trace;     // where its traces go (measure.profile), one per rank
  };

  measure::Progress progress_of(size_t i) const {
    return [this, i](const std::string& phase, int64_t step, int64_t total) {
      if (options_.interrupted && options_.interrupted->load()) throw Interrupted();
      if (options_.on_progress)
        options_.on_progress(i, plan_[i].spec.name, phase, step, total,
                             plan_[i].cfg.loader.batch_size * out_.environment.world_size);
    };
  }

  static report::RowStatus failure(const std::exception& e) {
    if (dynamic_cast<const ConfigError*>(&e)) return report::RowStatus::skipped(e.what());
    if (!is_out_of_memory(e)) return report::RowStatus::failed(message_of(e));
    runtime::cuda::empty_cache();  // the next row starts without this one's cached blocks
    return report::RowStatus::failed("out of memory");
  }

  /// The primer (the first row's kind's prime(), bench::prime for a pipeline), in ptune's own
  /// process before any row is timed: one-time initializations (LibTorch's and oneDNN's, on first
  /// use) happen before any timed pipeline exists (a fresh process's first pipeline ran 2-3% slower
  /// than an identical one built after it: an A/A pair of ResNet-18 rows, 6 quiet runs, +2.4% for
  /// the second; with a primer -1.0%). On a CPU (bench::times_beside_companion) its second pipeline
  /// is kept as the first row's companion until a row has been timed, so that every row is timed
  /// beside one other live pipeline, as each later row is beside the row before it: a first row
  /// timed alone ran 1.5x faster than the same configuration beside another pipeline or in a fresh
  /// process (docs/statistics.md, "The first row beside a companion"). Rows timed apart
  /// (measure.interleave false) are each alone, the first too. Its errors are the row's own,
  /// reported when the row itself is built. A sweep in processes has no primer: every row runs in
  /// processes of its own, the first too, so that the baseline is a default process as a user's
  /// `python train.py` is.
  void prime() {
    if (plan_.in_processes()) return;
    for (size_t i = 0; i < plan_.size(); ++i)
      if (plan_.runs(i)) {
        const PlannedRow& first = plan_[i];
        kept_.companion = first.kind->prime(first.cfg, progress_of(i));
        if (!first.cfg.measure.interleave) kept_.companion.reset();
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
    for (const Done& d : done_) any = any || d.kind->wants_profile(d.cfg);
    const bool kept = kept_.keep_only_last([&](size_t k) {
      return any && !plan_.in_processes() && done_[k].kind->profiles_beside_companion(done_[k].cfg);
    });
    if (kept) system::return_free_memory();  // the freed pipelines' pages back before the traces' are built
  }

  /// The row's timing: against the previous ok row of its key where there is one, else alone.
  measure::TimedRow time_against_prev(size_t i, KeptSides::Kept* prev) {
    const PlannedRow& p = plan_[i];
    measure::RowTiming t;
    t.row = {&p.cfg, p.kind};
    if (prev) {
      t.prev = {&done_[prev->k].cfg, done_[prev->k].kind};
      t.kept = prev->side.get();
    }
    t.in_processes = plan_.in_processes();
    t.progress = progress_of(i);
    // The previous row's windows count as this row's pairs: progress speaks of this row, but an
    // interruption stops them too.
    t.prev_progress = [interrupted = options_.interrupted](const std::string&, int64_t, int64_t) {
      if (interrupted && interrupted->load()) throw Interrupted();
    };
    t.release = [this] { kept_.clear(); };
    return measure::time_row(t, row_context());
  }

  /// The row's timing, and where it and the primer's companion did not fit in memory together,
  /// the row again alone.
  measure::TimedRow time_beside_companion(size_t i) {
    const std::string key = plan_.key(i);
    try {
      return time_against_prev(i, kept_.find(key));
    } catch (const std::exception& e) {
      if (!kept_.companion || !is_out_of_memory(e)) throw;
    }
    kept_.companion.reset();
    runtime::cuda::empty_cache();
    measure::TimedRow t = time_against_prev(i, kept_.find(key));
    t.m->notes.push_back("timed alone: it and the primer's companion pipeline did not fit in memory at once");
    return t;
  }

  /// Row `i` as the results first hold it, before it is timed.
  report::Row row_entry(size_t i) const {
    const PlannedRow& p = plan_[i];
    report::Row row;
    row.index = i;
    row.name = p.spec.name;
    row.changes = p.spec.set;
    row.num_workers = p.cfg.loader.num_workers;
    row.mode = p.cfg.measure.mode;
    row.arch = p.kind->arch(p.cfg);  // results' "arch": "program" for a program's row
    row.rule = measure::noise_rule(p.cfg);
    return row;
  }

  /// Row `i` timed (pass 1), with the notes its measurement gives it; failed or skipped with
  /// its reason when it could not be.
  Measured time_one(size_t i) {
    const PlannedRow& p = plan_[i];
    Measured out;
    out.row = row_entry(i);
    report::Row& row = out.row;
    try {
      if (!p.cfg.measure.interleave) kept_.clear();
      if (const std::string* why = plan_.left_out(i)) throw ConfigError(*why);
      measure::TimedRow t = time_beside_companion(i);
      row.m = std::move(t.m);
      row.prev_ms = std::move(t.prev_ms);
      row.prev_process = std::move(t.prev_process);
      row.rebuilt = t.restarted;
      out.kept = std::move(t.side);
      say_what_rows_decide(i, t.decidable, row);
      add_measurement_notes(row, *p.kind);
      if (p.cfg.measure.convergence_steps > 0 && p.cfg.measure.mode == config::Mode::kTrain) {
        progress_of(i)("convergence", 0, p.cfg.measure.convergence_steps);
        row.loss_curve = bench::loss_curve(p.cfg, p.cfg.measure.convergence_steps);
      }
    } catch (const Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      row.status = failure(e);
      // The previous row's processes may be what failed (a process that died): the next row starts
      // fresh ones of its settings instead.
      if (plan_.in_processes()) kept_.forget(plan_.key(i));
    }
    return out;
  }

  /// Once a sweep, from its first compared row's spread: the size of change its rows can decide
  /// in their budget (measure::decidable), as a note of that row and, on a terminal, on stderr.
  void say_what_rows_decide(size_t i, const std::string& decidable, report::Row& row) {
    if (said_decidable_ || decidable.empty()) return;
    said_decidable_ = true;
    row.m->notes.push_back("what this sweep's rows can decide, from this row's spread: " + decidable);
    if (options_.live && system::world_rank() == 0)
      log::info("from row " + std::to_string(i) + "'s spread: " + decidable);
  }

  /// The notes and status a measured row gets from how it was measured: both sides started afresh
  /// for every window, competing load or a slowed GPU, a CUDA graph that fell back to eager batches.
  static void add_measurement_notes(report::Row& row, const measure::SideKind& kind) {
    row.notes = row.m->notes;
    if (row.rebuilt) row.notes.push_back(kind.restarted_note());
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

  /// Row `k`'s diagnosis by its kind, with the peak rule, from the rows `tried` before (or around) it.
  std::string diagnosis_of(size_t k, const std::vector<measure::Tried>& tried) const {
    const report::Row& r = out_.rows[k];
    return measure::with_peak(done_[k].kind->diagnose(*r.m, done_[k].cfg, tried, runtime::cpu_info()),
                              report::pct_of_peak(r), r.m->peak_precision);
  }

  /// Row `i` joins the results: its speedups, its side kept for the next row, its diagnosis,
  /// warnings and semantic notes; then the results are written (options.on_row).
  void add_row(size_t i, Measured measured) {
    const PlannedRow& p = plan_[i];
    char index[24];
    std::snprintf(index, sizeof index, "%02zu-", i);
    done_.push_back(
        {i,
         p.cfg,
         p.kind,
         {p.cfg.measure.out_dir + "/" + bench::slug(cfg_.name) + "/" + index + bench::slug(p.spec.name),
          p.spec.name, p.spec.set}});
    out_.rows.push_back(std::move(measured.row));
    report::Row& r = out_.rows.back();
    report::compute_speedups(out_.rows);
    // The next row of the key is compared with this one (kept built, or its processes kept warm);
    // the one it replaces is freed.
    if (measured.kept) {
      kept_.keep(plan_.key(i), out_.rows.size() - 1, std::move(measured.kept));
      if (!plan_.in_processes()) system::return_free_memory();  // the next pipeline on unused pages
    }
    if (plan_.in_processes()) kept_.end_unneeded(plan_, i);
    if (r.m) {
      r.diagnosis = diagnosis_of(out_.rows.size() - 1, tried_before(out_.rows, out_.rows.size() - 1));
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
      const std::string d = diagnosis_of(k, tried_before(out_.rows, k, true));
      changed = changed || d != r.diagnosis;
      r.diagnosis = d;
    }
    if (changed && options_.on_row) options_.on_row(out_);
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
  /// arch, and its loss curve against the first row's (measure.convergence_steps).
  void note_training_changes(report::Row& r) {
    if (r.m && r.m->loss && r.mode == config::Mode::kTrain) {
      // The first row of each arch is the reference, not noted.
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

  /// Pass 2 for row `k`: its GPU busy and trace (measure.profile) by its kind, and its diagnosis
  /// again with them.
  void profile_row(size_t k) {
    report::Row& r = out_.rows[k];
    const Done& d = done_[k];
    if (!r.m || !d.kind->wants_profile(d.cfg)) return;
    try {
      const size_t said = r.m->notes.size();
      d.kind->profile(*r.m, d.cfg, d.trace, progress_of(d.index));
      r.notes.insert(r.notes.end(), r.m->notes.begin() + static_cast<std::ptrdiff_t>(said), r.m->notes.end());
      r.diagnosis = diagnosis_of(k, tried_before(out_.rows, k));
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
  SweepPlan plan_;
  KeptSides kept_;
  std::map<std::string, double> base_loss_;  // arch -> its first row's loss
  std::vector<Done> done_;                   // out.rows[k] is plan[done[k].index]
  bool said_decidable_ = false;              // say_what_rows_decide said it
};

}  // namespace

void run_sweep(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out) {
  out.config = config::to_json(cfg);
  out.environment = environment(cfg);
  out.status = report::RunStatus::kRunning;
  runtime::resolve_device(cfg.device);  // a bad device fails the whole sweep, not each row
  SweepRun(cfg, options, out).run();
}

}  // namespace ptune::tune
