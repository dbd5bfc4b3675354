#pragma once
/// One instance of the user's own training program (config's `program`) as a side of a sweep row:
/// started in a process group of its own with the row's process settings (system/process.hpp)
/// and environment, its stdout and stderr read line by line as it writes them, its step rate read
/// from the lines that match program.step_pattern. The instance is its whole process tree: the
/// process ptune started and every process descended from it, whatever session or group each
/// entered (a launcher's ranks started with setsid, as torchrun's are, its DataLoader workers),
/// found by walking /proc. Paused with SIGSTOP to every member and resumed with SIGCONT, so that
/// the instances of a row's two sides take turns as ptune's own row processes do
/// (bench/child_side.hpp, measure/process_group.hpp). docs/programs.md says what a user sees.

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "measure/side.hpp"
#include "system/proc_stat.hpp"
#include "proc/step_lines.hpp"

namespace ptune::proc {

/// CPU time, page faults and resident memory of a process tree, summed over its members (/proc),
/// with each process's own counts kept so that one that exits between two looks does not make
/// the sums go back.
struct TreeUsage {
  std::map<pid_t, system::ProcStat> procs;
  int64_t peak_rss_bytes = 0;  // the sum of the processes' own peaks (VmHWM)
  /// Every member of `tree` (as its last walk found them). Throws nothing.
  static TreeUsage of(const system::ProcessTree& tree);
  long ticks() const;
};

/// What one window of a program instance saw.
struct ProgramWindow {
  double ms_per_step = 0;
  int64_t steps = 0;
  double wall_ms = 0;             // from its first step line to its last
  double cpu_ms = 0, sys_ms = 0;  // the tree's CPU time in that span (all processes, all threads)
  double faults = 0;              // minor page faults in that span
  int64_t peak_rss_bytes = 0;
  std::optional<double> gpu_busy_pct;  // its processes' SM use on their GPU (NVML), where known
};

/// The samples one step of `program` processes: program.samples_per_step, or 1 without it (the
/// rates are then steps/s).
inline double samples_per_step(const config::ProgramConfig& program) {
  return program.samples_per_step > 0 ? static_cast<double>(program.samples_per_step) : 1.0;
}

/// Whether a file name is a trace's (the caller's rule: `ptune analyze`'s).
using TraceName = std::function<bool(const std::string& name)>;

/// The traces of a program row's profile (profile_program).
struct ProgramProfile {
  std::string folder;              // where the program wrote its trace(s), absolute
  std::vector<std::string> files;  // the trace files it wrote there, by name
};

class ProgramInstance : public measure::RowSide {
 public:
  /// Starts the program with `cfg`'s process settings and program.env, and waits for its first
  /// step line (within program.startup_timeout_s, and before `deadline` passes where it is a set
  /// budget, not an automatic one) and then measure.warmup_steps more (fewer where `deadline`
  /// passes first). `progress` reports them (phase "warmup"; it may throw to
  /// stop). Throws std::runtime_error, one line, when the program cannot be started, exits, or
  /// prints no step line in time (the pattern and its last lines named).
  ProgramInstance(const config::ExperimentConfig& cfg, const measure::Progress& progress,
                  const measure::Deadline& deadline);
  /// Ends the instance's whole process tree and its process group: SIGTERM (and SIGCONT, for a
  /// paused one), SIGKILL after kGraceS to what is left. Throws nothing.
  ~ProgramInstance() override;
  ProgramInstance(const ProgramInstance&) = delete;
  ProgramInstance& operator=(const ProgramInstance&) = delete;

  /// Times measure.steps steps (fewer where `deadline` would pass first, at least one) from the
  /// first step line after it starts to a later one: the step a pause cut is not counted.
  double window(const measure::Deadline& deadline) override;
  int64_t steps_per_window() const override { return steps_per_window_; }
  double samples_per_step() const override;
  /// SIGSTOP to the group and to every member of the tree, again to each member that appears,
  /// until the walk finds no new one, every member has stopped and their CPU time holds (at most
  /// a second), and on a machine with an NVIDIA GPU a settle of kGpuSettleMs for the kernels
  /// it queued; what it printed until then is read and left out of the next window.
  void pause() override;
  void resume() override;
  measure::Measurement result(size_t first = 0, size_t count = SIZE_MAX) override;
  void set_progress(const measure::Progress& progress, int64_t planned) override;
  size_t processes() const override { return 1; }
  std::string process_description() const override;
  void mark_previous() override { previous_ = true; }
  /// Runs the program on (resumed) until it has written a trace into `folder` (a file whose name
  /// `is_trace` accepts) and then printed one more step line, or ended with status 0, and none of
  /// those files has grown for kTraceSettleMs. Returns the files' paths, sorted. Throws
  /// std::runtime_error, one line, when the program fails as window() does or runs `max_steps`
  /// steps without writing one.
  std::vector<std::string> run_until_trace(const std::string& folder, int64_t max_steps,
                                           const TraceName& is_trace);
  /// The instance's process group (its leader's pid); -1 once ended.
  pid_t group() const { return pid_; }
  /// The members of its process tree at the last walk.
  const system::ProcessTree& tree() const { return *tree_; }

  static constexpr double kGraceS = 3;           // SIGTERM to SIGKILL, when ending it
  static constexpr double kGpuSettleMs = 500;    // after a pause, on a machine with an NVIDIA GPU
  static constexpr double kBurstMs = 1;          // step lines closer than this arrived together
  static constexpr double kTraceSettleMs = 300;  // a trace file that has not grown this long is written
  static constexpr int kKeeperPollMs = 20;       // how often the keeper reaps, without a signalfd
  static constexpr size_t kProcesses = 65536;    // the most processes a walk of /proc reads

 private:
  struct StepEvent {
    double t_ms;
    std::optional<int64_t> step;
  };
  void start(const config::ExperimentConfig& cfg);
  void warm_up(int64_t warmup_steps, const measure::Deadline& deadline);
  /// Reads what the program wrote within `timeout_ms`; false once both streams have ended.
  bool pump(double timeout_ms);
  void take(const std::vector<Line>& lines);
  /// The next step line; throws when the program ends or prints none within
  /// program.startup_timeout_s, or (where given) before `deadline` passes.
  StepEvent next_step(const measure::Deadline* deadline = nullptr);
  /// Ends the program and throws std::runtime_error: who, `what`, and its last lines.
  [[noreturn]] void fail(const std::string& what);
  /// fail(): step lines for `ms` without a step counted (a number that never grows).
  [[noreturn]] void stalled(double ms);
  /// The root's wait status, as its keeper reaped it, waiting `wait_ms` at most; none while it
  /// runs.
  std::optional<int> root_status(double wait_ms);
  /// Once both streams have closed: waits (a few seconds at most) for the program to exit and
  /// returns its wait status; none when it has not exited.
  std::optional<int> reap();
  /// The root's wait status where it has exited with a failure (a status other than 0, or a
  /// signal); none while it runs or where it exited with 0 (a launcher that started its workers
  /// and left: the tree goes on). Another member of the tree may still hold its stdout and stderr
  /// open (a worker in a session of its own), so the streams' end cannot tell. Throws nothing.
  std::optional<int> failed_root();
  /// The program ended (`status`, from reap()) before the row had what it needed: ends what is
  /// left of its group and throws the one line that says how.
  [[noreturn]] void ended(std::optional<int> status);
  [[noreturn]] void ended() { ended(reap()); }
  /// Progress (it may throw to stop); kept, and told again while waiting for a line.
  void report(const std::string& phase, int64_t done, int64_t total);
  std::string who() const;
  /// Walks /proc and brings the tree's members up to date; returns how many it added.
  int walk();
  /// SIGSTOP (again) to every member not stopped, until none appears and all have stopped and
  /// their CPU time holds, at most a second.
  void stop_tree();
  /// After SIGTERM to the tree: waits until its root has exited (and reaps it: pid_ -1) and no
  /// member runs, at most kGraceS.
  void wait_for_tree();
  void end() noexcept;

  config::ProgramConfig program_;
  StepReader pattern_;
  StepCounter counter_;
  Tail tail_{5}, err_tail_{5};
  LineSplitter out_split_{false}, err_split_{true};
  std::deque<StepEvent> events_;
  measure::Progress progress_;
  int64_t steps_per_window_ = 1, warmup_steps_ = 0, min_steps_ = 0, planned_ = 0, windows_done_ = 0;
  pid_t pid_ = -1, pgid_ = -1;  // the root (-1 once ended) and its group (until ended)
  pid_t keeper_pid_ = -1;       // the program's parent: a child subreaper, and the guard
  int out_fd_ = -1, err_fd_ = -1;
  int guard_fd_ = -1;               // closes when ptune ends the program or dies: the keeper ends the tree
  int keeper_fd_ = -1;              // the root's pid, then its wait status, from the keeper
  std::optional<int> root_status_;  // once the keeper has told it
  bool out_open_ = false, err_open_ = false, running_ = false, previous_ = false;
  double started_ms_ = 0, first_line_ms_ = -1;
  std::string phase_ = "warmup";
  int64_t done_ = 0, total_ = 0;
  int64_t burst_ = 0, intervals_ = 0;
  std::vector<ProgramWindow> windows_;
  std::string command_text_;
  std::unique_ptr<system::ProcessTree> tree_;
  std::vector<system::ProcEntry> table_;  // walk()'s, read again at every walk
};

/// measure.profile on a program row: a fresh instance with PTUNE_PROFILE_DIR=`folder` (the files
/// there that `is_trace` names removed first) and PTUNE_PROFILE_STEPS=measure.profile_steps in its
/// environment, warmed up, then run until it has written a trace there (ProgramInstance::run_until_trace,
/// within kProfileStepLimit steps or 10 x measure.profile_steps, whichever is more) and ended.
/// Throws std::runtime_error (one line) as ProgramInstance does, when no trace comes, or when
/// `folder` cannot be written.
ProgramProfile profile_program(const config::ExperimentConfig& cfg, const std::string& folder,
                               const measure::Progress& progress, const TraceName& is_trace);

/// The fewest steps profile_program() lets a program run for its trace to come.
constexpr int64_t kProfileStepLimit = 100;

}  // namespace ptune::proc
