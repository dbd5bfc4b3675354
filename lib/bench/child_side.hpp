#pragma once
/// A row's side in a child process of its own, for the settings that take effect only when a
/// process starts (config's `process` section, system/process.hpp): a preloaded allocator or
/// OpenMP runtime, glibc's tunables, thread binding, the CPUs and the NUMA node. The child is
/// this same executable (`ptune row-side CONFIG`), started with the settings the way a user's
/// process gets them (environment, affinity and memory policy set before it executes), and keeps
/// its pipeline built and warm between windows. The parent asks it for one window at a time over
/// a pipe; while one child times a window the other waits (its loader paused, and its threads
/// idle: see ChildSide::pause), so compare() pairs, orders and judges the windows of two children
/// exactly as those of two in-process benches.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.hpp"
#include "bench/profile.hpp"
#include "measure/side.hpp"

namespace ptune::bench {

/// A RowSide whose pipeline lives in a child process.
class ChildSide : public measure::RowSide {
 public:
  /// Starts the child with `cfg`'s process settings and has it build and warm up its pipeline
  /// within `deadline`. Progress (warm-up steps) comes back through `progress`, which may throw
  /// to stop (Interrupted): the child is then stopped and reaped. Throws ConfigError, DataError
  /// or std::runtime_error as the child's Bench did (its message), std::runtime_error when the
  /// child cannot be started or dies (with the last line it wrote to stderr).
  /// With `build` false the child only starts (for profile()).
  ChildSide(const config::ExperimentConfig& cfg, const measure::Progress& progress,
            const measure::Deadline& deadline, bool build = true);
  /// Ends the child: closes its command pipe and waits for it to exit (interrupting it first when
  /// it is busy), killing it only if it has not exited after a few seconds. Throws nothing.
  ~ChildSide() override;
  ChildSide(const ChildSide&) = delete;
  ChildSide& operator=(const ChildSide&) = delete;

  double window(const measure::Deadline& deadline) override;
  int64_t steps_per_window() const override { return steps_per_window_; }
  double samples_per_step() const override { return samples_per_step_; }
  /// Pauses the child's loader, then waits until the child uses no CPU (an OpenMP runtime's
  /// threads spin a while after their last parallel region: Intel's for 200 ms by default), at
  /// most a second, so that the other side's window runs on idle cores.
  void pause() override;
  void resume() override;
  measure::Measurement result(size_t first = 0, size_t count = SIZE_MAX) override;
  void set_progress(const measure::Progress& progress, int64_t planned) override;
  /// bench::profile() of the row in the child (a child started with `build` false): the trace
  /// is written with the row's process settings in effect.
  ProfileResult profile(double timed_ms_per_step, const TraceTarget& target);
  /// What the child reported of its own process when it was ready (system::describe_this_process
  /// and its OpenMP threads' CPUs), one line.
  std::string process_description() const override { return description_; }
  size_t processes() const override { return 1; }
  /// From now on the child is the previous row's (kept as a later row's other side): its errors
  /// say "the previous row's child process" instead of "the row's".
  void mark_previous() override { previous_ = true; }

 private:
  nlohmann::json ask(const std::string& command);
  std::string who() const {
    return previous_ ? "the previous row's child process" : "the row's child process";
  }
  void stop() noexcept;
  void forget_config() noexcept;
  std::string cfg_file_;  // the row's config for the child, until it has answered
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1, err_fd_ = -1;
  std::string pending_;  // bytes read past the last reply line
  measure::Progress progress_;
  int64_t steps_per_window_ = 1;
  double samples_per_step_ = 1;
  std::string description_;
  bool busy_ = false;
  bool previous_ = false;
};

/// The child's half (`ptune row-side CONFIG`): builds `cfg`'s Bench on request and serves
/// windows, pauses and results over file descriptors `in_fd` (commands, one a line) and `out_fd`
/// (one JSON object a line) until the parent closes `in_fd` or says "quit". Returns the exit code:
/// 0, 130 when `interrupted` was set. Errors go back to the parent as {"error", "kind"}.
int serve_side(const config::ExperimentConfig& cfg, int in_fd, int out_fd,
               const std::atomic<bool>* interrupted);

/// Whether a pipeline of `cfg` is timed beside a companion, one other live pipeline: in a default
/// process (else its rows run in child processes, each its process's only pipeline) on a CPU, where
/// under glibc's default malloc what else lives in the heap sets how often a step faults pages in
/// (docs/statistics.md, "The first row beside a companion"); not on a GPU, where the device's
/// memory counts and a companion would count in a row's peak. Throws nothing.
bool times_beside_companion(const config::ExperimentConfig& cfg);

/// Builds `cfg`'s pipeline twice, both alive at once, and warms them up, in this process, when
/// `cfg` runs in a default process (else it does nothing): a fresh process's first pipeline runs a
/// little slower than later ones (docs/statistics.md, "The first pipeline of a process"). The first
/// is freed and its memory handed back (system::return_free_memory). The second is returned, warm
/// and paused, as the companion of the first row or trial where times_beside_companion(cfg), else
/// freed too (null). Null as well when it could not be built (an error is left to the row's own
/// build, which reports it); an interruption (from `progress`) is thrown.
std::unique_ptr<Bench> prime(const config::ExperimentConfig& cfg, const measure::Progress& progress = {});

}  // namespace ptune::bench
