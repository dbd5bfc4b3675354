#include "measure/timing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/numbers.hpp"
#include "core/stats.hpp"
#include "measure/schedule.hpp"
#include "system/process.hpp"

namespace ptune::measure {
namespace {

/// A configuration started afresh for every window (two pipelines, or two programs' instances,
/// that do not fit in memory at once): each window starts its side (builds the pipeline, or starts
/// one instance of the program), runs its warm-up, times the window and ends it all; the row's
/// deadline counts every start and warm-up.
class RestartedSide : public Side {
 public:
  RestartedSide(const Config& c, Progress progress)
      : cfg_(*c.cfg), kind_(*c.kind), progress_(std::move(progress)) {}
  double window(const Deadline& deadline) override {
    const std::unique_ptr<RowSide> side = kind_.start_here(cfg_, progress_, deadline);
    side->resume();
    const double ms = side->window(deadline);
    windows_.push_back(ms);
    last_ = side->result();
    side->pause();
    return ms;
  }
  int64_t steps_per_window() const override { return cfg_.measure.steps; }
  double samples_per_step() const override { return kind_.samples_per_step(cfg_); }
  /// The last side's figures with `count` windows' times from the `first` one. Throws when that
  /// leaves no window.
  Measurement result(size_t first, size_t count) const {
    if (!last_ || first >= windows_.size()) throw std::runtime_error("no window was timed");
    Measurement m = *last_;
    const auto begin = windows_.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = begin + static_cast<std::ptrdiff_t>(std::min(count, windows_.size() - first));
    set_windows(m, std::vector<double>(begin, end), kind_.ranks(cfg_));
    return m;
  }

 private:
  config::ExperimentConfig cfg_;
  const SideKind& kind_;
  Progress progress_;
  std::vector<double> windows_;
  std::optional<Measurement> last_;
};

/// The comparison's own notes on the row (the transient left out, a row that ran out of time) and
/// its count of transient pairs.
void add_run_notes(Measurement& m, const Comparison& c, const WindowPlan& plan) {
  m.transient_windows = c.transient;
  if (c.budget_grown)
    m.notes.push_back(
        "budget grown: the automatic budget (measure.max_s 0) grew to " +
        numbers::fixed(std::ceil(c.limit_ms / 1000.0), 0) + " s, " +
        (c.budget_hope
             ? "its most (measure.auto_max_s): a verdict needed more at the spread measured, but not at "
               "that spread's optimistic end (its lower 90% bound), which few processes or windows "
               "leave far below it"
             : "what a verdict needed at the spread measured (at most measure.auto_max_s, " +
                   numbers::shortest(plan.deadline.auto_most_ms() / 1000.0) + " s)"));
  for (auto& n : run_notes(c.transient, c.b_ms.size(), c.stop, plan, true)) m.notes.push_back(std::move(n));
  if (std::string n = undecided_note(c, plan); !n.empty()) m.notes.push_back(std::move(n));
}

/// ": one process's own speed varied by X% and one pair's by Y% (...)" where the comparison's
/// spread gives it (Spread::text), else "".
std::string process_spread(const Comparison& c) {
  const std::optional<Spread> s = spread_of(c.a_ms, c.a_process, c.b_ms, c.b_process);
  return s ? ": " + s->text() : "";
}

/// The notes of a row that ran in processes `b`: what they reported of their process, and for a
/// row compared with processes `a` how the comparison counted their spread (`kept`: the previous
/// row's own processes, else fresh ones started in turn with the row's).
void add_process_notes(Measurement& m, const RowSide& b, const Config& row, const Comparison* compared,
                       const RowSide* a = nullptr, bool kept = false) {
  for (const auto& n : system::plan_process(row.cfg->process).notes) m.notes.push_back(n);
  m.notes.push_back(row.kind->processes_name() + ": " + b.process_description());
  if (!compared || !a) return;
  const auto* group = dynamic_cast<const ProcessGroup*>(a);
  const std::string n = std::to_string(group ? group->started() : a->processes());
  m.notes.push_back((kept ? "timed against the " + n +
                                " processes of the row it is compared with, kept warm "
                                "since that row"
                          : "timed against " + n +
                                " fresh processes of the settings of the row it is compared with, started in "
                                "turn with its own") +
                    "; the interval counts the spread between processes" + process_spread(*compared));
}

/// One row's timing, stage by stage: its plan and load from the row's start, its sides, the
/// comparison (or the row alone), and the restart of both sides for every window where they did
/// not fit in memory together.
class RowTimer {
 public:
  RowTimer(const RowTiming& t, const RowContext& ctx)
      : t_(t),
        ctx_(ctx),
        cfg_(*t.row.cfg),
        gpu_(ctx.gpu(cfg_)),
        plan_(window_plan(cfg_, ctx.rank_max(cfg_))) {}  // the row's deadline starts here

  TimedRow run() {
    start_load();
    try {
      return timed();
    } catch (const std::exception& e) {
      if (!can_restart(e)) throw;
    }
    return restarted();
  }

 private:
  /// The load, sampled from the row's start (its build and warm-up are this job's time too, and a
  /// longer span is one /proc's tick counters resolve); whether it competed is agreed across the
  /// ranks (any rank's), at every look and at the end, so that every rank decides alike.
  void start_load() {
    load_.start(gpu_, gpu_ >= 0 ? ctx_.gpu_uuid(gpu_) : "");
    plan_.under_load = [this] { return ctx_.agreed_load(load_, gpu_, cfg_).under_load; };
  }
  /// The row's load: at its end, or at any look of the comparison (which judged by it).
  void finish_load(Measurement& m, bool compared_under_load) {
    m.load = ctx_.agreed_load(load_, gpu_, cfg_);
    m.load.under_load = m.load.under_load || compared_under_load;
  }

  /// The row's side and, for a comparison, prev's: kept, or started here.
  void start_sides(TimedRow& out) {
    prev_ = t_.kept;
    if (!t_.in_processes) {
      out.side = t_.row.kind->start_here(cfg_, t_.progress, plan_.deadline);
      return;
    }
    // The previous row's processes, still warm, are this comparison's other side: only the row's
    // own start (half the starts, so twice the windows in the row's budget). Fresh ones of its
    // settings where they are fewer than the row's, or one never timed a window. Where the
    // previous row grew its processes, this one starts with as many: the spread that asked for
    // them is the machine's and the program's, not the row's.
    int64_t count = cfg_.measure.processes;
    if (prev_ && prev_->reusable(static_cast<size_t>(count)))
      count = std::clamp(static_cast<int64_t>(prev_->processes()), count, cfg_.measure.max_processes);
    if (prev_ && !prev_->reusable(static_cast<size_t>(count))) prev_ = nullptr;
    plan_ = in_processes(plan_, count);
    plan_.max_processes = cfg_.measure.max_processes;
    if (prev_) prev_->restart(false);
    stats::Stopwatch wall;
    RowProcesses p = start_row_processes(prev_ ? Config{} : t_.prev, t_.row, count, t_.prev_progress,
                                         t_.progress, plan_.deadline);
    // What a process of each side costs to start, from these starts (only the row's, where prev's
    // were kept: alike, they count twice).
    plan_.process_start_ms = wall.ms() / static_cast<double>(count) * (p.prev ? 1.0 : 2.0);
    fresh_prev_ = std::move(p.prev);
    out.side = std::move(p.row);
    if (!prev_) prev_ = fresh_prev_.get();
    row_group_ = dynamic_cast<ProcessGroup*>(out.side.get());
    if (t_.prev.cfg && cfg_.measure.max_processes > count)
      plan_.add_processes = [this] { return add_processes(); };
    // A program's start-up (an interpreter, its imports, a compilation) is not a pipeline's build:
    // an automatic budget counts from the instances' first windows.
    if (!t_.row.kind->startup_in_auto_budget() && cfg_.measure.max_s <= 0) {
      plan_.deadline = Deadline(0);
      plan_.deadline.set_auto_most(1000.0 * cfg_.measure.auto_max_s);
    }
  }

  /// One more process of each side (WindowPlan::add_processes), started in turn (who starts first
  /// alternates), paused and added to its side's turns; the wall time that took. Where one does
  /// not fit in memory beside those alive, from then on the oldest process of each side ends as
  /// a fresh one starts in its place (what it measured is kept): the processes a side still
  /// grow, those alive at once do not. None at measure.max_processes, or where a process ran out
  /// of memory even in place of an ended one (the others keep going; noted).
  std::optional<double> add_processes() {
    auto* prev = dynamic_cast<ProcessGroup*>(prev_);
    if (!prev || !row_group_ || static_cast<int64_t>(row_group_->started()) >= cfg_.measure.max_processes)
      return std::nullopt;
    stats::Stopwatch wall;
    if (no_room_.empty() && start_pair(*prev)) return wall.ms();
    if (no_fit_ || prev->processes() < 2 || row_group_->processes() < 2) {  // none to end in its place
      no_fit_ = true;
      return std::nullopt;
    }
    if (!replacing_) replacing_ = true, most_alive_ = static_cast<int64_t>(row_group_->processes());
    prev->retire_oldest();
    row_group_->retire_oldest();
    ctx_.free_device_memory();
    if (!start_pair(*prev)) {
      no_fit_ = true;
      return std::nullopt;
    }
    ++replaced_;
    return wall.ms();
  }

  /// Starts one process of each side, in turn, and adds them; false (no_room_ says why) where one
  /// ran out of memory starting (the other, if started, ended). Throws what starting throws else.
  bool start_pair(ProcessGroup& prev) {
    std::unique_ptr<RowSide> a, b;
    try {
      const bool prev_first = row_group_->started() % 2 == 0;
      if (prev_first) a = t_.prev.kind->start_process(*t_.prev.cfg, t_.prev_progress, plan_.deadline);
      b = t_.row.kind->start_process(cfg_, t_.progress, plan_.deadline);
      b->pause();
      if (!prev_first) a = t_.prev.kind->start_process(*t_.prev.cfg, t_.prev_progress, plan_.deadline);
      a->pause();
    } catch (const std::exception& e) {
      if (!ctx_.is_out_of_memory(e)) throw;
      no_room_ = e.what();
      return false;
    }
    prev.add(std::move(a));
    row_group_->add(std::move(b));
    return true;
  }

  /// The note of a row whose processes grew while it was timed (Comparison::processes_added), or
  /// where no more could start for memory.
  void add_growth_note(Measurement& m, const Comparison& c) const {
    if (c.processes_added == 0 && no_room_.empty()) return;
    const int64_t end = row_group_ ? static_cast<int64_t>(row_group_->started()) : 0;
    std::string n = "processes added while timing: " + std::to_string(end - c.processes_added) +
                    " a side at the start, " + std::to_string(end) + " at the end (measure.max_processes " +
                    std::to_string(cfg_.measure.max_processes) + ")";
    if (const auto s = spread_of(c.a_ms, c.a_process, c.b_ms, c.b_process))
      n += "; " + s->text() +
           ", so another process narrowed the interval more than the windows its start "
           "would have timed";
    if (replaced_ > 0)
      n += "; at most " + std::to_string(most_alive_) + " a side fit in memory at once (" + no_room_ +
           "), so the oldest process of each side ended as each of the last " + std::to_string(replaced_) +
           " started, what it measured kept";
    if (!no_room_.empty() && (no_fit_ || replaced_ == 0)) n += "; no more could start: " + no_room_;
    m.notes.push_back(std::move(n));
  }

  TimedRow timed() {
    TimedRow out;
    start_sides(out);
    out.side->set_progress(t_.progress, plan_.min_pairs);
    if (prev_) {
      prev_->set_progress(t_.prev_progress, 0);
      const Comparison c = compare(*prev_, *out.side, plan_);
      out.prev_ms = c.a_ms;
      out.prev_process = c.a_process;
      out.m = out.side->result(static_cast<size_t>(c.transient), c.b_ms.size());
      add_run_notes(*out.m, c, plan_);
      finish_load(*out.m, c.under_load);
      if (t_.in_processes) add_process_notes(*out.m, *out.side, t_.row, &c, prev_, !fresh_prev_);
      add_growth_note(*out.m, c);
      if (const std::optional<Decidable> d = decidable(c, cfg_)) out.decidable = d->text;
      return out;
    }
    const AloneRun r = measure_alone(*out.side, plan_);
    out.m = out.side->result(static_cast<size_t>(r.transient), r.ms.size());
    out.m->transient_windows = r.transient;
    for (auto& n : run_notes(r.transient, r.ms.size(), r.stop, plan_, false))
      out.m->notes.push_back(std::move(n));
    finish_load(*out.m, false);
    if (t_.in_processes) add_process_notes(*out.m, *out.side, t_.row, nullptr);
    return out;
  }

  /// Whether a failed comparison is timed again with both sides started afresh for every window:
  /// out of memory with the previous row's side alive. A program's instances hold their memory on
  /// the device until they end: one that ran out of it beside the previous row's is started
  /// afresh for every window, as a pipeline is rebuilt; ptune's own child processes are not.
  bool can_restart(const std::exception& e) const {
    const bool beside_prev = t_.kept || fresh_prev_;  // prev's side was alive when it failed
    if (!beside_prev || !t_.prev.cfg) return false;
    if (t_.in_processes && !t_.row.kind->restarts_processes_when_out_of_memory()) return false;
    return ctx_.is_out_of_memory(e);
  }

  /// Both sides started afresh for every window, within what is left of the row's deadline.
  TimedRow restarted() {
    fresh_prev_.reset();
    if (t_.release) t_.release();
    ctx_.free_device_memory();
    RestartedSide a(t_.prev, t_.prev_progress), b(t_.row, t_.progress);
    start_load();
    const Comparison c = compare(a, b, plan_);
    TimedRow out;
    out.m = b.result(static_cast<size_t>(c.transient), c.b_ms.size());
    add_run_notes(*out.m, c, plan_);
    finish_load(*out.m, c.under_load);
    out.prev_ms = c.a_ms;
    out.restarted = true;
    return out;
  }

  const RowTiming& t_;
  const RowContext& ctx_;
  const config::ExperimentConfig& cfg_;
  const int gpu_;
  WindowPlan plan_;
  system::LoadSampler load_;
  RowSide* prev_ = nullptr;                   // the other side of the comparison, if any
  std::unique_ptr<ProcessGroup> fresh_prev_;  // prev's processes started for this row alone
  ProcessGroup* row_group_ = nullptr;         // the row's processes, in processes
  std::string no_room_;                       // why a process could not start (out of memory)
  bool replacing_ = false;                    // since then, a fresh process ends the oldest of its side
  int64_t most_alive_ = 0;                    // the processes a side alive when one no longer fit
  bool no_fit_ = false;                       // not even in place of an ended one: growth over
  int64_t replaced_ = 0;                      // processes started in place of an ended one
};

}  // namespace

TimedRow time_row(const RowTiming& t, const RowContext& ctx) { return RowTimer(t, ctx).run(); }

RowProcesses start_row_processes(const Config& prev, const Config& row, int64_t count,
                                 const Progress& prev_progress, const Progress& progress,
                                 const Deadline& deadline) {
  std::vector<std::unique_ptr<RowSide>> a, b;
  auto start = [&](bool row_side) {
    auto child = row_side ? row.kind->start_process(*row.cfg, progress, deadline)
                          : prev.kind->start_process(*prev.cfg, prev_progress, deadline);
    child->pause();
    (row_side ? b : a).push_back(std::move(child));
  };
  for (int64_t i = 0; i < count; ++i) {
    // A B, then B A: neither side has the earlier starts.
    const bool prev_first = prev.cfg && i % 2 == 0;
    if (prev_first) start(false);
    start(true);
    if (prev.cfg && !prev_first) start(false);
  }
  RowProcesses r;
  if (prev.cfg) r.prev = std::make_unique<ProcessGroup>(std::move(a), false);
  r.row = std::make_unique<ProcessGroup>(std::move(b), true);
  return r;
}

}  // namespace ptune::measure
