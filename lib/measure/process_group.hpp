#pragma once
/// A row's side timed in several processes in turn (measure.processes). No LibTorch: the
/// processes are RowSides of any kind.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "measure/side.hpp"

namespace ptune::measure {

/// A row's side in several processes started alike (measure.processes), timed in turn: child
/// processes of ptune (bench::ChildSide) or instances of the user's program (proc::ProgramInstance), each
/// a RowSide of one process, built and paused;
/// its n-th window runs in process n mod k, the others paused; with shifted turns in process
/// (n + n / k) mod k, so that beside a group in plain turns each of its processes meets every
/// one of the other's (core/stats.hpp, speedup_terms). A process's speed is partly its
/// own: two processes started alike ran up to 8% apart, each the same all along (where its
/// memory landed), so a setting's effect shows only beside the spread between several processes
/// of each side (core/stats.hpp, process_term; docs/statistics.md, "Rows in processes of their own").
class ProcessGroup : public RowSide {
 public:
  /// The group of `children` (at least one), each built and paused; `shifted`: shifted turns.
  ProcessGroup(std::vector<std::unique_ptr<RowSide>> children, bool shifted);

  /// The next process's window (it is resumed first, the one before it paused).
  double window(const Deadline& deadline) override;
  int64_t steps_per_window() const override { return first_alive().steps_per_window(); }
  double samples_per_step() const override { return first_alive().samples_per_step(); }
  /// Pauses the process that ran last.
  void pause() override;
  /// Starts a new comparison with the same processes (a sweep's row, kept warm as the next row's
  /// previous side): windows are counted afresh from here, in plain or `shifted` turns, and
  /// result() indexes only those. Each process's own windows go on being numbered as before.
  void restart(bool shifted) override;
  /// Whether the group can be the other side of a comparison of `count` processes a side: it has
  /// at least as many, and each has timed a window (one whose warm-up the deadline cut holds that
  /// step as its next window, not warm). Throws nothing.
  bool reusable(size_t count) const override;
  /// Adds `child` (built and paused) as the group's next process: from the next window on the turns
  /// go round one more process (a row whose interval needs more processes than it started with).
  void add(std::unique_ptr<RowSide> child);
  /// Ends the oldest process still alive (its memory freed for a fresh one, where no more fit at
  /// once), keeping what it measured: its turns go to the others, and result() still counts its
  /// windows (their times exact; its other figures over all its windows). Throws std::logic_error
  /// where it is the last one alive.
  void retire_oldest();
  /// The processes started, alive or retired: each window's process is one of them.
  size_t started() const { return children_.size(); }
  /// Resumes the process whose turn is next.
  void resume() override;
  int last_process() const override { return last_; }
  /// The Measurement of windows [first, first + count) of the group, in order: each process's
  /// result over its own windows among them, merged (the step split, page faults and system time
  /// averaged by windows), with repeat_process and the interval over the processes (set_windows).
  Measurement result(size_t first = 0, size_t count = SIZE_MAX) override;
  void set_progress(const Progress& progress, int64_t planned) override;
  /// The processes alive.
  size_t processes() const override { return live_.size(); }
  /// What the first process reported of itself, and how many ran alike: one line.
  std::string process_description() const override;

 private:
  const RowSide& first_alive() const { return *children_[static_cast<size_t>(live_.front())]; }
  /// The process whose turn the n-th window is: the processes alive in turn.
  int turn(size_t n) const;
  /// Retired process `p`'s windows [from, from + n) of its own: their times, its other figures.
  Measurement retired_part(size_t p, size_t from, size_t n) const;
  /// Gives process `p` its share of the progress set by set_progress.
  void wire_progress(size_t p);
  std::vector<std::unique_ptr<RowSide>> children_;   // null once retired
  std::vector<std::optional<Measurement>> retired_;  // a retired process's result over all its windows
  std::vector<int> live_;                            // the processes alive, in order of their start
  std::string description_;                          // the first process's, kept past its retirement
  bool shifted_ = false;
  std::vector<int> process_;                         // of each window timed, in order
  std::vector<size_t> local_;                        // each window's index among its process's own windows
  std::vector<size_t> counts_;                       // windows timed by each process
  std::vector<int64_t> steps_done_, steps_planned_;  // each process's progress (measure phase)
  Progress progress_;                                // set_progress's
  int64_t share_ = 0;                                // windows planned for each process
  int last_ = -1;                                    // the process of the last window; -1 before the first
  int resumed_ = -1;                                 // the process resumed, if any
};

}  // namespace ptune::measure
