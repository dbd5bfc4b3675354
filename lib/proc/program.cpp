#include "proc/program.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <thread>

#include "system/process.hpp"
#include "core/files.hpp"
#include "core/errors.hpp"
#include "system/job_groups.hpp"
#include "system/load.hpp"

namespace ptune::proc {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double tick_ms() {
  static const double ms = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return ms;
}

/// VmHWM of a process, bytes; 0 when gone.
int64_t peak_rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

// What the child failed at before the program ran (start()).
constexpr int kChdir = 1, kBind = 2, kExec = 3;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

/// Opens each pipe of `pipes` (close-on-exec) until one fails: false then, errno saying why.
bool open_pipes(std::initializer_list<int*> pipes) {
  for (int* p : pipes)
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
  return true;
}

/// What the program's child process needs once forked, all made before the fork.
struct ChildPlan {
  pid_t parent;                     // its keeper
  const system::ProcessPlan& plan;  // its CPUs and memory
  const std::string& file;          // the program's executable
  const std::string& cwd;           // program.cwd; empty: ptune's
  char* const* argv;
  char* const* envp;
  int out, err;  // the write ends of the pipes for its stdout and stderr
  int report;    // the write end of the pipe that tells ptune what failed before the program ran
};

/// The program's side of ProgramInstance::start, forked from its keeper: only system calls. It
/// enters a process group of its own, takes the pipes as
/// stdout and stderr, enters program.cwd, binds its CPUs and memory and runs the program; what failed before
/// it ran goes to `c.report` as {kChdir, kBind or kExec, errno}.
[[noreturn]] void exec_program(const ChildPlan& c) {
  if (system::enter_own_group(c.parent) != 0) ::_exit(127);
  // As a shell starts it: no signal ptune ignores (SIGPIPE) stays ignored in the program.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
  const int null = ::open("/dev/null", O_RDONLY);
  const int report = ::fcntl(c.report, F_DUPFD_CLOEXEC, 10);
  if (null < 0 || report < 0 || ::dup2(null, 0) < 0 || ::dup2(c.out, 1) < 0 || ::dup2(c.err, 2) < 0)
    ::_exit(127);
  for (int fd = 3; fd < 4096; ++fd)
    if (fd != report) ::close(fd);
  // What failed, and its errno, for the parent's message: {kChdir, kBind or kExec, errno}.
  int failed[2] = {kChdir, 0};
  if (c.cwd.empty() || ::chdir(c.cwd.c_str()) == 0) {
    failed[0] = kBind;
    if ((failed[1] = system::bind_process(c.plan)) == 0) {
      ::execve(c.file.c_str(), c.argv, c.envp);
      failed[0] = kExec;
    }
  }
  if (failed[1] == 0) failed[1] = errno;
  (void)!::write(report, failed, sizeof failed);
  ::_exit(127);
}

/// The error for what the child reported failed before the program ran (exec_program).
std::string exec_failure(const int failed[2], const std::string& cwd, const std::string& file) {
  const std::string why = std::strerror(failed[1]);
  if (failed[0] == kChdir) return "program.cwd: cannot enter '" + cwd + "': " + why;
  if (failed[0] == kBind)
    return "program.command: its CPUs or memory could not be bound (process.cpus, process.numa_node): " + why;
  return "program.command: cannot run '" + file + "': " + why;
}

/// Whether this machine has an NVIDIA GPU (its device files).
bool has_nvidia_gpu() {
  struct stat st;
  return ::stat("/dev/nvidia0", &st) == 0;
}

/// The environment the program gets: ptune's own with the process plan applied, program.env set
/// over it, and PYTHONUNBUFFERED=1 unless program.env sets it.
std::vector<std::string> program_environment(const config::ExperimentConfig& cfg,
                                             const system::ProcessPlan& plan) {
  std::vector<std::string> env = system::environment_with(plan);
  std::map<std::string, std::string> set = cfg.program.env;
  if (!set.count("PYTHONUNBUFFERED")) set["PYTHONUNBUFFERED"] = "1";
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& e) { return set.count(e.substr(0, e.find('='))) > 0; }),
            env.end());
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

TreeUsage TreeUsage::of(const system::ProcessTree& tree) {
  TreeUsage u;
  for (int m = 0; m < tree.count; ++m) {
    const pid_t pid = tree.members[m].pid;
    system::ProcStat st;
    if (!system::read_proc_stat(std::to_string(pid), &st)) continue;
    u.procs[pid] = st;
    u.peak_rss_bytes += peak_rss(pid);
  }
  return u;
}

long TreeUsage::ticks() const {
  long t = 0;
  for (const auto& [pid, p] : procs) t += p.ticks();
  return t;
}

namespace {

/// CPU time and faults from `a` to `b`: each process's own difference (one that started between
/// them counts from zero; one that exited is left out).
void usage_between(const TreeUsage& a, const TreeUsage& b, ProgramWindow& w) {
  long user = 0, sys = 0, faults = 0;
  for (const auto& [pid, p] : b.procs) {
    const auto before = a.procs.find(pid);
    const system::ProcStat zero;
    const system::ProcStat& q = before == a.procs.end() ? zero : before->second;
    user += std::max(0L, p.utime - q.utime);
    sys += std::max(0L, p.stime - q.stime);
    faults += std::max(0L, p.minflt - q.minflt);
  }
  w.cpu_ms = static_cast<double>(user + sys) * tick_ms();
  w.sys_ms = static_cast<double>(sys) * tick_ms();
  w.faults = static_cast<double>(faults);
  w.peak_rss_bytes = std::max(a.peak_rss_bytes, b.peak_rss_bytes);
}

}  // namespace

ProgramInstance::ProgramInstance(const config::ExperimentConfig& cfg, const measure::Progress& progress,
                                 const measure::Deadline& deadline)
    : program_(cfg.program),
      pattern_(cfg.program.step_pattern),
      counter_(cfg.program.steps_per_match),
      progress_(progress),
      steps_per_window_(cfg.measure.steps),
      warmup_steps_(cfg.measure.warmup_steps) {
  // What a row needs of a process at the least: its warm-up, and two windows of measure.steps
  // steps each (measure::in_processes), each opened by a step line of its own.
  min_steps_ = warmup_steps_ + 1 + 2 * (steps_per_window_ + 1) * program_.steps_per_match;
  try {  // the destructor does not run when the constructor throws: end what was started
    start(cfg);
    warm_up(warmup_steps_, deadline);
  } catch (...) {
    end();
    throw;
  }
}

ProgramInstance::~ProgramInstance() { end(); }

std::string ProgramInstance::who() const {
  return std::string(previous_ ? "the previous row's program" : "the program") + " (pid " +
         std::to_string(pgid_) + ")";
}

namespace {

/// Reads `n` bytes from `fd` (a pipe), waiting for them; false where it closed or failed first.
bool read_whole(int fd, void* to, size_t n) {
  auto* p = static_cast<char*>(to);
  for (size_t got = 0; got < n;) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

/// Reaps every child of the calling process that has ended, without waiting; the wait status of
/// `root`, where it was among them, goes to `report` (once; -1 then). Only system calls.
void reap_children(pid_t root, int& report) {
  int status = 0;
  for (pid_t done; (done = ::waitpid(-1, &status, WNOHANG)) > 0;)
    if (done == root && report >= 0) {
      (void)!::write(report, &status, sizeof status);
      ::close(report);
      report = -1;
    }
}

/// The keeper's first moves: ignores the signals that end a job (the program resets them), becomes
/// a child subreaper, blocks SIGCHLD into a signalfd (returned; -1 where none could be made: the
/// program unblocks it as it starts, in enter_own_group), forks the program and tells ptune its
/// pid through `report` (-errno where it could not, and exits). Returns the program's pid.
pid_t start_root(const ChildPlan& c, int report, int* woken) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  *woken = ::signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  const pid_t root = ::fork();
  if (root == 0) exec_program(c);
  const pid_t told = root > 0 ? root : -errno;
  (void)!::write(report, &told, sizeof told);
  if (root < 0) ::_exit(127);
  ::setpgid(root, root);  // also here: signals sent right after the fork must reach its group
  return root;
}

/// While ptune lives: reaps what ends (the root's status to ptune) as `woken` (a signalfd of
/// SIGCHLD) says, or every kKeeperPollMs without one, until ptune's end of `read_end` closes.
void serve_until_ptune_ends(pid_t root, int read_end, int woken, int& report) {
  for (;;) {
    reap_children(root, report);
    pollfd p[2] = {{read_end, POLLIN, 0}, {woken, POLLIN, 0}};
    const int r = ::poll(p, woken >= 0 ? 2 : 1, woken >= 0 ? -1 : ProgramInstance::kKeeperPollMs);
    if (r < 0 && errno != EINTR) return;
    if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) return;  // ptune never writes: closed
    signalfd_siginfo info;
    while (woken >= 0 && ::read(woken, &info, sizeof info) > 0) {
    }
  }
}

/// Ends every process below the keeper (the root and its descendants, and those re-parented to
/// it), found by walking /proc: SIGTERM (and the root's group, while the root is not reaped),
/// SIGKILL after the grace, and reaps them.
void end_all_below(pid_t root, int& report, system::ProcessTree& tree, system::ProcEntry* table, size_t cap) {
  tree = system::ProcessTree(0, ::getpid());  // no root of its own: everything below the keeper
  const auto walk = [&] { tree.grow(table, system::read_process_table(table, cap)); };
  const auto signal_tree = [&](int sig) {
    if (report >= 0) ::kill(-root, sig);  // the root not yet reaped: its group's id is still its own
    tree.signal(sig);
  };
  reap_children(root, report);
  walk();
  signal_tree(SIGTERM);
  signal_tree(SIGCONT);
  const struct timespec step = {0, 20 * 1000 * 1000};
  for (int i = 0; i < static_cast<int>(ProgramInstance::kGraceS * 50) && tree.live() > 0; ++i) {
    ::nanosleep(&step, nullptr);
    reap_children(root, report);
    walk();
  }
  signal_tree(SIGKILL);
  walk();
  tree.signal(SIGKILL);
  for (int i = 0; i < 50; ++i) {  // what was killed, reaped (a second at most)
    reap_children(root, report);
    if (::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) return;
    ::nanosleep(&step, nullptr);
  }
}

/// The keeper's life, in a child forked from ptune (only system calls: ptune has threads): starts
/// the program (start_root), serves while ptune lives, and once ptune has ended the program
/// (end()) or died, ends all below it. `tree` and `table` (of `cap` entries): its own copies,
/// made before the fork.
[[noreturn]] void keep(const ChildPlan& c, int read_end, int report, system::ProcessTree& tree,
                       system::ProcEntry* table, size_t cap) {
  int woken = -1;
  const pid_t root = start_root(c, report, &woken);
  for (int fd = 0; fd < 4096; ++fd)
    if (fd != read_end && fd != report && fd != woken) ::close(fd);
  serve_until_ptune_ends(root, read_end, woken, report);
  end_all_below(root, report, tree, table, cap);
  ::_exit(0);
}

}  // namespace

void ProgramInstance::start(const config::ExperimentConfig& cfg) {
  const system::ProcessPlan plan = system::plan_process(cfg.process);
  const std::vector<std::string> argv_text = program_.argv();
  command_text_ = system::shell_text(argv_text);
  const std::string file = config::resolve_program(program_);
  if (file.empty()) throw ConfigError("program.command: '" + argv_text.front() + "' is not found");
  // Everything the child needs, made before fork: after it, only system calls.
  std::vector<std::string> args = argv_text, env = program_environment(cfg, plan);
  const std::vector<char*> argv = system::c_strings(args), envp = system::c_strings(env);
  const std::string cwd = program_.cwd.value_or("");
  int out[2], err[2], exec_err[2], guard[2], keeper[2];
  if (!open_pipes({out, err, exec_err, guard, keeper}))
    throw std::runtime_error("cannot start the program: " + std::string(std::strerror(errno)));
  started_ms_ = now_ms();
  tree_ = std::make_unique<system::ProcessTree>();
  table_.resize(kProcesses);
  // The keeper, forked from ptune, forks the program: its parent, a child subreaper, so that a
  // member of the tree whose own parent ends (the root included) stays below it, re-parented to
  // the keeper; and the guard that ends the tree should ptune die (all below it: no walk of /proc
  // is needed before then).
  keeper_pid_ = ::fork();
  if (keeper_pid_ < 0) {
    const int e = errno;
    for (int fd :
         {out[0], out[1], err[0], err[1], exec_err[0], exec_err[1], guard[0], guard[1], keeper[0], keeper[1]})
      ::close(fd);
    throw std::runtime_error("cannot start the program: " + std::string(std::strerror(e)));
  }
  if (keeper_pid_ == 0) {
    const ChildPlan c{::getpid(), plan, file, cwd, argv.data(), envp.data(), out[1], err[1], exec_err[1]};
    keep(c, guard[0], keeper[1], *tree_, table_.data(), table_.size());
  }
  for (int fd : {out[1], err[1], exec_err[1], guard[0], keeper[1]}) ::close(fd);
  out_fd_ = out[0], err_fd_ = err[0], guard_fd_ = guard[1], keeper_fd_ = keeper[0];
  pid_t root = -1;
  if (!read_whole(keeper_fd_, &root, sizeof root) || root <= 0) {
    const int e = root < 0 ? -root : EPIPE;
    ::close(exec_err[0]);
    end();
    throw std::runtime_error("cannot start the program: " + std::string(std::strerror(e)));
  }
  pid_ = pgid_ = root;
  *tree_ = system::ProcessTree(pid_, keeper_pid_);
  walk();
  // Its tree's processes are this job's, not competing load: those of its group, and every
  // process descended from the keeper (a member whose parent ended is re-parented to it).
  system::own_process_group(pgid_, true);
  system::own_process_group(keeper_pid_, true);
  out_open_ = err_open_ = running_ = true;
  set_nonblocking(out_fd_);
  set_nonblocking(err_fd_);
  int failed[2] = {0, 0};
  const bool exec_failed = read_whole(exec_err[0], failed, sizeof failed);  // none: exec closed the pipe
  ::close(exec_err[0]);
  if (exec_failed) {
    end();
    throw std::runtime_error(exec_failure(failed, cwd, file));
  }
}

bool ProgramInstance::pump(double timeout_ms) {
  if (!out_open_ && !err_open_) return false;
  pollfd p[2] = {{out_open_ ? out_fd_ : -1, POLLIN, 0}, {err_open_ ? err_fd_ : -1, POLLIN, 0}};
  const int r = ::poll(p, 2, static_cast<int>(std::max(0.0, std::ceil(timeout_ms))));
  if (r <= 0) return true;
  char buf[65536];
  for (int k = 0; k < 2; ++k) {
    if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const int fd = k == 0 ? out_fd_ : err_fd_;
    LineSplitter& split = k == 0 ? out_split_ : err_split_;
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;  // EAGAIN: all read for now
      const double t = now_ms();
      if (n == 0) {
        if (auto last = split.finish(t)) take({*last});
        (k == 0 ? out_open_ : err_open_) = false;
        break;
      }
      take(split.feed(buf, static_cast<size_t>(n), t));
    }
  }
  return out_open_ || err_open_;
}

void ProgramInstance::take(const std::vector<Line>& lines) {
  for (const Line& l : lines) {
    tail_.add(l.text);
    if (l.err) err_tail_.add(l.text);
    std::optional<int64_t> step;
    if (pattern_.match(l.text, &step)) {
      if (first_line_ms_ < 0) first_line_ms_ = l.t_ms;
      events_.push_back({l.t_ms, step});
    }
  }
}

std::optional<int> ProgramInstance::root_status(double wait_ms) {
  if (root_status_ || keeper_fd_ < 0) return root_status_;
  pollfd p = {keeper_fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(std::ceil(std::max(0.0, wait_ms)))) <= 0) return std::nullopt;
  int status = 0;
  if (read_whole(keeper_fd_, &status, sizeof status)) root_status_ = status;
  ::close(keeper_fd_);  // told, or the keeper has ended
  keeper_fd_ = -1;
  return root_status_;
}

std::optional<int> ProgramInstance::reap() { return root_status(3000); }

std::optional<int> ProgramInstance::failed_root() {
  const std::optional<int> status = root_status(0);
  if (!status || (WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) return std::nullopt;
  return status;
}

void ProgramInstance::ended(std::optional<int> status) {
  const std::string name = who();
  const std::string ran = std::to_string(counter_.steps()) + " step" + (counter_.steps() == 1 ? "" : "s");
  end();
  const std::string errs = err_tail_.empty() ? tail_.text() : err_tail_.text();
  if (!status)
    throw std::runtime_error(name + " closed its stdout and stderr after " + ran +
                             "; ptune reads its steps from them: keep them open");
  if (WIFSIGNALED(*status))
    throw std::runtime_error(name + " was killed by signal " + std::to_string(WTERMSIG(*status)) + " (" +
                             strsignal(WTERMSIG(*status)) + ") after " + ran +
                             (errs.empty() ? "" : "; its last lines: " + errs));
  if (WEXITSTATUS(*status) != 0)
    throw std::runtime_error(name + " exited with status " + std::to_string(WEXITSTATUS(*status)) +
                             " after " + ran + (errs.empty() ? "" : "; its last lines: " + errs));
  throw std::runtime_error(name + " ended (exit status 0) after " + ran + " while the row needed at least " +
                           std::to_string(min_steps_) +
                           " from each process (its warm-up and two windows of measure.steps): make it run "
                           "longer (more steps or epochs)");
}

ProgramInstance::StepEvent ProgramInstance::next_step(const measure::Deadline* deadline) {
  const double limit_ms = program_.startup_timeout_s * 1000.0;
  const double since = now_ms();
  while (events_.empty()) {
    if (!pump(100)) ended();
    if (const std::optional<int> failed = failed_root()) {
      pump(0);  // its last lines, already in the pipes
      ended(failed);
    }
    report(phase_, done_, total_);  // an interruption stops the wait
    if (!events_.empty()) break;
    const bool late = now_ms() - since > limit_ms;
    if (!late && (!deadline || deadline->fits(0))) continue;
    const bool never = first_line_ms_ < 0;
    char secs[64];
    std::snprintf(secs, sizeof secs, "%g", program_.startup_timeout_s);
    fail(std::string(never ? "printed no line matching" : "printed no further line matching") + " " +
         pattern_.described() + " " +
         (late ? "within program.startup_timeout_s (" + std::string(secs) + " s)"
               : "before the row's time (measure.max_s, its start-up included) ran out"));
  }
  StepEvent e = events_.front();
  events_.pop_front();
  return e;
}

void ProgramInstance::fail(const std::string& what) {
  const std::string name = who();
  const std::string lines = tail_.text();
  end();
  throw std::runtime_error(name + " " + what +
                           (lines.empty() ? "; it printed nothing" : "; its last lines: " + lines));
}

void ProgramInstance::warm_up(int64_t warmup_steps, const measure::Deadline& deadline) {
  report("warmup", 0, warmup_steps);
  // A set budget (measure.max_s) bounds the start-up; an automatic one counts from the first
  // windows (a start-up can take longer than it allows), so only program.startup_timeout_s does.
  const measure::Deadline* bound = deadline.budget_s() > 0 ? &deadline : nullptr;
  const StepEvent first = next_step(bound);  // later lines: the warm-up ends short at the deadline
  counter_.add(first.t_ms, first.step);
  const int64_t start = counter_.steps();
  double counted_ms = first.t_ms;  // the last line that counted a step
  while (counter_.steps() - start < warmup_steps) {
    const StepEvent e = next_step();
    if (counter_.add(e.t_ms, e.step)) {
      counted_ms = e.t_ms;
    } else if (e.t_ms - counted_ms > program_.startup_timeout_s * 1000.0 ||
               (counter_.steps() == start && bound && !bound->fits(0))) {
      stalled(e.t_ms - counted_ms);
    }
    report("warmup", std::min(counter_.steps() - start, warmup_steps), warmup_steps);
    if (!deadline.fits(0)) break;
  }
}

double ProgramInstance::samples_per_step() const { return proc::samples_per_step(program_); }

void ProgramInstance::report(const std::string& phase, int64_t done, int64_t total) {
  phase_ = phase, done_ = done, total_ = total;
  if (progress_) progress_(phase, done, total);
}

void ProgramInstance::set_progress(const measure::Progress& progress, int64_t planned) {
  progress_ = progress;
  planned_ = planned * steps_per_window_;
}

double ProgramInstance::window(const measure::Deadline& deadline) {
  if (!running_) resume();
  counter_.forget();  // the step a pause cut is not counted
  const StepEvent anchor = next_step();
  counter_.add(anchor.t_ms, anchor.step);
  walk();
  const TreeUsage before = TreeUsage::of(*tree_);
  const auto since_us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                  std::chrono::system_clock::now().time_since_epoch())
                                                  .count());
  double ms = 0, last_t = anchor.t_ms;
  int64_t steps = 0;
  while (steps < steps_per_window_) {
    const StepEvent e = next_step();
    const auto closed = counter_.add(e.t_ms, e.step);
    if (!closed) {  // a number that did not grow (a new epoch): counted afresh
      // Only a long wait without a step counted is a stall (a window's share of the row's time
      // may end at any line; the window then ends at its next step, as ever).
      if (e.t_ms - last_t > program_.startup_timeout_s * 1000.0) stalled(e.t_ms - last_t);
      continue;
    }
    ms += closed->ms;
    steps += closed->steps;
    last_t = e.t_ms;
    ++intervals_;
    if (closed->ms < kBurstMs) ++burst_;
    report("measure", windows_done_ * steps_per_window_ + steps, planned_);
    if (steps < steps_per_window_ && !deadline.fits(ms / static_cast<double>(steps))) break;
  }
  ProgramWindow w;
  walk();
  const TreeUsage after = TreeUsage::of(*tree_);
  usage_between(before, after, w);
  std::vector<int64_t> pids;
  for (const auto& [pid, stat] : after.procs) pids.push_back(pid);
  w.gpu_busy_pct = system::gpu_busy_of(pids, since_us);
  w.ms_per_step = ms / static_cast<double>(steps);
  w.steps = steps;
  w.wall_ms = last_t - anchor.t_ms;
  windows_.push_back(w);
  ++windows_done_;
  return w.ms_per_step;
}

void ProgramInstance::stalled(double ms) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", ms / 1000.0);
  fail(
      std::string("printed lines matching program.step_pattern for ") + secs +
      " without its step number growing, so no step was counted; the `step` group must capture a number "
      "that grows with every step (program.startup_timeout_s and the row's time, measure.max_s, bound such a "
      "wait)");
}

void ProgramInstance::pause() {
  if (!running_ || pid_ <= 0) return;
  ::kill(-pid_, SIGSTOP);
  running_ = false;
  stop_tree();
  if (has_nvidia_gpu()) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kGpuSettleMs));
  pump(0);  // what it wrote before it stopped, all in the pipes now
  // Its lines so far count as steps run, but none opens the next window.
  for (const StepEvent& e : events_) counter_.add(e.t_ms, e.step);
  events_.clear();
}

int ProgramInstance::walk() {
  return tree_ ? tree_->grow(table_.data(), system::read_process_table(table_.data(), table_.size())) : 0;
}

void ProgramInstance::stop_tree() {
  // Until the walk finds no new member, every member has stopped and their CPU time holds (a
  // tick is 10 ms): a process started just before its parent stopped is stopped too.
  long last = -1;
  int quiet = 0;
  for (int i = 0; i < 100 && quiet < 2; ++i) {
    const bool grew = walk() > 0;
    tree_->signal(SIGSTOP, /*unstopped_only=*/true);
    const long ticks = TreeUsage::of(*tree_).ticks();
    quiet = !grew && tree_->all_stopped() && ticks == last ? quiet + 1 : 0;
    last = ticks;
    if (quiet < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ProgramInstance::resume() {
  if (running_ || pid_ <= 0) return;
  walk();
  ::kill(-pid_, SIGCONT);
  tree_->signal(SIGCONT);
  running_ = true;
}

namespace {

/// The files in `folder` whose names `is_trace` accepts, each with its size.
std::map<std::string, uintmax_t> trace_files(const std::string& folder, const TraceName& is_trace) {
  std::map<std::string, uintmax_t> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && is_trace(name)) files[entry.path().string()] = entry.file_size(ec);
  }
  return files;
}

/// Whether a program's wait status (reap()) is an exit with status 0; none: it has not exited.
bool exited_cleanly(const std::optional<int>& status) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

/// The trace files a program writes into a folder, looked at again and again: the trace is
/// written once a step line has come after the first file appeared (or the program has ended),
/// and none of the files has grown for ProgramInstance::kTraceSettleMs.
struct TraceWatch {
  std::map<std::string, uintmax_t> files;  // each with its size
  double changed_ms = now_ms();            // when they last changed
  int64_t steps_at_trace = -1;             // the step count when the first file appeared

  /// Reads the folder's files again, `steps` the steps counted so far.
  void look(const std::string& folder, const TraceName& is_trace, int64_t steps) {
    auto now_files = trace_files(folder, is_trace);
    if (now_files != files) files = std::move(now_files), changed_ms = now_ms();
    if (!files.empty() && steps_at_trace < 0) steps_at_trace = steps;
  }
  /// Whether the trace is written and has settled; `open`: the program's output has not ended.
  bool written(int64_t steps, bool open) const {
    const bool complete = !files.empty() && (steps > steps_at_trace || !open);
    return complete && now_ms() - changed_ms >= ProgramInstance::kTraceSettleMs;
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    for (const auto& [path, size] : files) out.push_back(path);
    return out;
  }
};

/// The error for a program that ran `ran` steps (or ended, where its output is not `open`) and
/// wrote no trace into `folder`.
std::string no_trace_error(const std::string& name, bool open, int64_t ran, const std::string& folder) {
  return name + (open ? " ran " : " ended (exit status 0) after ") + std::to_string(ran) +
         " steps with PTUNE_PROFILE_DIR=" + folder +
         " and wrote no trace there: record a torch.profiler trace into that folder "
         "(docs/programs.md shows how), or leave measure.profile off for this row";
}

/// The error for a program that printed no step line for program.startup_timeout_s while ptune
/// waited for its trace.
std::string no_further_line_error(const std::string& name, double startup_timeout_s) {
  char secs[64];
  std::snprintf(secs, sizeof secs, "%g", startup_timeout_s);
  return name +
         " printed no further line matching program.step_pattern within "
         "program.startup_timeout_s (" +
         secs + " s) while ptune waited for its trace";
}

}  // namespace

std::vector<std::string> ProgramInstance::run_until_trace(const std::string& folder, int64_t max_steps,
                                                          const TraceName& is_trace) {
  resume();
  for (const StepEvent& e : events_) counter_.add(e.t_ms, e.step);
  events_.clear();
  const int64_t start = counter_.steps();
  TraceWatch trace;
  double last_line_ms = now_ms();
  bool open = true;
  for (;;) {
    if (open)
      open = pump(50);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!events_.empty()) last_line_ms = now_ms();
    for (const StepEvent& e : events_) counter_.add(e.t_ms, e.step);
    events_.clear();
    const int64_t ran = counter_.steps() - start;
    report("profile", std::min(ran, max_steps), max_steps);  // an interruption stops the wait
    trace.look(folder, is_trace, counter_.steps());
    if (!open && !trace.files.empty() && pid_ > 0) {  // ended: with status 0 its trace is complete
      const std::optional<int> status = reap();
      if (!exited_cleanly(status)) ended(status);
    }
    if (trace.written(counter_.steps(), open)) break;
    if (trace.files.empty() && (!open || ran >= max_steps)) {
      const std::optional<int> status = open ? std::optional<int>() : reap();
      if (!open && !exited_cleanly(status)) ended(status);
      const std::string name = who();
      end();
      throw std::runtime_error(no_trace_error(name, open, ran, folder));
    }
    if (open && now_ms() - last_line_ms > program_.startup_timeout_s * 1000.0) {
      const std::string name = who();
      end();
      throw std::runtime_error(no_further_line_error(name, program_.startup_timeout_s));
    }
  }
  return trace.paths();
}

ProgramProfile profile_program(const config::ExperimentConfig& cfg, const std::string& out,
                               const measure::Progress& progress, const TraceName& is_trace) {
  // A folder the trace cannot go to fails the row, as a pipeline row's unwritable trace does (a
  // file in the way fails create_directories).
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || ::access(out.c_str(), W_OK) != 0)
    throw WriteError("cannot write measure.out_dir '" + out +
                     "': " + (ec ? ec.message() : std::string(std::strerror(errno))));
  // Absolute: the program may run in program.cwd.
  const std::string folder = std::filesystem::absolute(out, ec).lexically_normal().string();
  for (const auto& [path, size] : trace_files(folder, is_trace)) std::filesystem::remove(path, ec);
  config::ExperimentConfig run = cfg;
  run.program.env["PTUNE_PROFILE_DIR"] = folder;
  run.program.env["PTUNE_PROFILE_STEPS"] = std::to_string(cfg.measure.profile_steps);
  ProgramProfile p;
  p.folder = folder;
  {
    ProgramInstance instance(run, progress, measure::Deadline());
    p.files = instance.run_until_trace(folder, std::max(kProfileStepLimit, 10 * cfg.measure.profile_steps),
                                       is_trace);
  }  // ended before its trace is read
  return p;
}

measure::Measurement ProgramInstance::result(size_t first, size_t count) {
  const size_t end = count == SIZE_MAX ? windows_.size() : std::min(windows_.size(), first + count);
  if (first >= end) throw std::runtime_error("no timed window to report");
  measure::Measurement m;
  m.batch_size = static_cast<int64_t>(samples_per_step());
  m.steps = steps_per_window_;
  std::vector<double> ms;
  double wall = 0, cpu = 0, sys = 0, faults = 0, gpu = 0;
  int64_t steps = 0, peak = 0, gpu_windows = 0;
  for (size_t w = first; w < end; ++w) {
    const ProgramWindow& pw = windows_[w];
    ms.push_back(pw.ms_per_step);
    wall += pw.wall_ms, cpu += pw.cpu_ms, sys += pw.sys_ms, faults += pw.faults;
    steps += pw.steps;
    peak = std::max(peak, pw.peak_rss_bytes);
    if (pw.gpu_busy_pct) gpu += *pw.gpu_busy_pct, ++gpu_windows;
    if (pw.steps < steps_per_window_) ++m.short_windows;
  }
  measure::set_windows(m, ms, 1);
  m.split.reset();  // seen from outside, the step is not split: unknown (a trace may tell, with --profile)
  if (wall > 0) {
    m.cpu_cores_busy = cpu / wall;
    m.system_time_pct = 100.0 * sys / wall;
  }
  if (steps > 0) m.page_faults_per_step = faults / static_cast<double>(steps);
  if (peak > 0) m.peak_rss_bytes = peak;
  if (gpu_windows > 0) m.gpu_busy_pct = gpu / static_cast<double>(gpu_windows);
  if (const auto note = pattern_.detection_note()) m.notes.push_back(*note);
  if (m.short_windows > 0)
    m.notes.push_back(measure::short_windows_note(m.short_windows, ms.size(), steps_per_window_));
  // Lines that arrive together were written at once: the program's output is buffered, and the
  // time between them is not its steps'.
  if (intervals_ >= 4 && burst_ * 2 > intervals_) {
    char text[400];
    std::snprintf(
        text, sizeof text,
        "the program's step lines arrive in bursts (%lld of %lld within %g ms of the one before): its "
        "output is buffered, and the time between lines is not its steps'. Flush after each line "
        "(print(..., flush=True)), set PYTHONUNBUFFERED=1 (a Python program; ptune sets it unless "
        "program.env does), or run it under stdbuf -oL -eL",
        static_cast<long long>(burst_), static_cast<long long>(intervals_), kBurstMs);
    m.notes.push_back(text);
  }
  return m;
}

std::string ProgramInstance::process_description() const {
  std::string env;
  for (const auto& [k, v] : program_.env) env += (env.empty() ? "" : " ") + k + "=" + system::shell_quote(v);
  char startup[64] = "";
  if (first_line_ms_ >= 0)
    std::snprintf(startup, sizeof startup, "; its first step line %.1f s after it started",
                  (first_line_ms_ - started_ms_) / 1000.0);
  return "`" + (env.empty() ? "" : env + " ") + command_text_ + "`" +
         (program_.cwd ? " in " + *program_.cwd : std::string()) + startup;
}

void ProgramInstance::wait_for_tree() {
  const double until = now_ms() + kGraceS * 1000.0;
  while (now_ms() < until) {
    if (root_status(5)) {  // the root has exited: what is left of its tree
      walk();
      if (tree_->live() == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

void ProgramInstance::end() noexcept {
  if (out_fd_ >= 0) ::close(out_fd_), out_fd_ = -1;  // a program writing to a full pipe cannot block
  if (err_fd_ >= 0) ::close(err_fd_), err_fd_ = -1;
  out_open_ = err_open_ = false;
  if (pid_ > 0) {
    walk();
    ::kill(-pid_, SIGTERM);
    tree_->signal(SIGTERM);
    ::kill(-pid_, SIGCONT);  // a stopped process takes SIGTERM once continued
    tree_->signal(SIGCONT);
    wait_for_tree();
    // The root gone, or past the grace: what is left of its group and its tree.
    ::kill(-pgid_, SIGKILL);
    walk();
    tree_->signal(SIGKILL);
  }
  pid_ = -1;
  if (pgid_ > 0) system::own_process_group(pgid_, false);
  if (keeper_pid_ > 0) system::own_process_group(keeper_pid_, false);
  pgid_ = -1;
  running_ = false;
  // The keeper ends what it knows and ptune does not (a member it found in its walks), reaps all
  // and exits: within its grace and a second, else killed (a copy of the pipe's end held elsewhere).
  if (guard_fd_ >= 0) ::close(guard_fd_), guard_fd_ = -1;
  if (keeper_pid_ > 0) {
    const double until = now_ms() + (kGraceS + 1) * 1000.0;
    while (::waitpid(keeper_pid_, nullptr, WNOHANG) == 0) {
      if (now_ms() > until) {
        ::kill(keeper_pid_, SIGKILL);
        ::waitpid(keeper_pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    keeper_pid_ = -1;
  }
  if (keeper_fd_ >= 0) ::close(keeper_fd_), keeper_fd_ = -1;
}

}  // namespace ptune::proc
