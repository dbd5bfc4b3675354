#include "measure/child_side.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>

#include "config/config.hpp"
#include "dist/env.hpp"
#include "dist/group.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "models/flops.hpp"
#include "system/proc_stat.hpp"
#include "proc/program.hpp"

namespace ptune::measure {
namespace {

using Json = nlohmann::json;

/// `d` as the child continues it: "<limit_ms> <elapsed_ms> <budget_s>" (Deadline::continuing).
std::string deadline_text(const Deadline& d) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.17g %.17g %.17g", d.limit_ms(), d.elapsed_ms(), d.budget_s());
  return buf;
}

/// The deadline a command's words give (deadline_text).
Deadline read_deadline(std::istream& in) {
  double limit = Deadline::kNone, elapsed = 0, budget = 0;
  in >> limit >> elapsed >> budget;
  return Deadline::continuing(limit, elapsed, budget);
}

/// The model's FLOPs for a child's "build" command (" forward backward"), counted here in the
/// parent, so that the child builds no model for counting (models::remember_flops); empty where
/// its row counts none or the count fails (the child then counts, and its notes say why not).
std::string flops_text(const config::ExperimentConfig& cfg) {
  if (cfg.measure.mode == config::Mode::kData) return "";
  try {
    const models::Flops f = models::count_flops(cfg.model.arch, cfg.model.num_classes, cfg.data.image_size);
    char buf[80];
    std::snprintf(buf, sizeof buf, " %.17g %.17g", f.forward, f.backward);
    return buf;
  } catch (const std::exception&) {
    return "";
  }
}

/// The child's side of flops_text: the parent's count, where the command has one.
void remember_parents_flops(const config::ExperimentConfig& cfg, std::istream& in) {
  models::Flops f;
  if (in >> f.forward >> f.backward)
    models::remember_flops(cfg.model.arch, cfg.model.num_classes, cfg.data.image_size, f);
}

/// Writes all of `text` to `fd`; throws std::runtime_error "<reader> stopped reading: <why>".
void write_all(int fd, const std::string& text, const std::string& reader) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(reader + " stopped reading: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
}

/// The last non-empty line of what the child wrote to stderr (kept in `fd`).
std::string last_line(int fd) {
  std::string all;
  char buf[4096];
  off_t at = 0;
  for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, at)) > 0; at += n)
    all.append(buf, static_cast<size_t>(n));
  while (!all.empty() && (all.back() == '\n' || all.back() == '\r')) all.pop_back();
  const size_t nl = all.rfind('\n');
  return nl == std::string::npos ? all : all.substr(nl + 1);
}

/// utime + stime of process `pid` (all its threads), in clock ticks; -1 when gone.
long cpu_ticks(pid_t pid) {
  system::ProcStat st;
  return system::read_proc_stat(std::to_string(pid), &st) ? st.ticks() : -1;
}

/// The exception a child's {"error", "kind"} reply stands for.
[[noreturn]] void rethrow(const Json& reply) {
  const std::string what = reply.value("error", std::string("the row's child process failed"));
  const std::string kind = reply.value("kind", std::string("runtime"));
  if (kind == "config") throw ConfigError(what);
  if (kind == "data") throw DataError(what);
  if (kind == "write") throw WriteError(what);
  if (kind == "interrupted") throw Interrupted();
  throw std::runtime_error(what);
}

/// What each OpenMP thread of a parallel region finds out about itself.
struct ThreadCpus {
  int (*thread_num)() = nullptr;
  std::mutex mu;
  std::map<int, std::string> cpus;
};

void record_thread_cpus(void* data) {
  auto* t = static_cast<ThreadCpus*>(data);
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> list;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) list.push_back(c);
  std::lock_guard<std::mutex> lock(t->mu);
  t->cpus[t->thread_num()] = system::cpu_list_text(list);
}

/// Each OpenMP thread of this process and the CPUs it may run on: "2 OpenMP threads on CPUs {0}
/// {1}". A parallel region of LibTorch's intra-op thread count, opened through the OpenMP runtime's
/// own entry point (GOMP_parallel, which Intel's runtime provides too): the threads and binding
/// LibTorch's kernels get. ptune itself is not compiled with OpenMP.
std::string omp_threads() {
  using Parallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  const auto parallel = reinterpret_cast<Parallel>(::dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  ThreadCpus t;
  t.thread_num = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
  const int n = at::get_num_threads();
  if (!parallel || !t.thread_num) return std::to_string(n) + " threads (no OpenMP runtime found)";
  parallel(record_thread_cpus, &t, static_cast<unsigned>(n), 0);
  std::string text =
      std::to_string(t.cpus.size()) + " OpenMP thread" + (t.cpus.size() == 1 ? "" : "s") + " on CPUs";
  for (const auto& [k, c] : t.cpus) text += " {" + c + "}";
  return text;
}

}  // namespace

bool times_beside_companion(const config::ExperimentConfig& cfg) {
  try {
    return system::default_process(cfg.process) && dist::rank_device(cfg.device).is_cpu();
  } catch (const std::exception&) {
    return false;
  }
}

std::unique_ptr<Bench> prime(const config::ExperimentConfig& cfg, const Progress& progress) {
  if (!system::default_process(cfg.process)) return nullptr;
  std::unique_ptr<Bench> companion;
  try {
    // Two at once: the first row is then built into the first's freed memory, beside the second.
    auto first = std::make_unique<Bench>(cfg, progress, Deadline());
    companion = std::make_unique<Bench>(cfg, progress, Deadline());
    companion->pause();  // idle: its loader's workers hold while the first row is timed
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception&) {
    companion.reset();
  }
  if (!times_beside_companion(cfg)) companion.reset();
  system::return_free_memory();  // the freed pages back to the kernel before the rows
  return companion;
}

// ---------------------------------------------------------------- the parent's side

ChildSide::ChildSide(const config::ExperimentConfig& cfg, const Progress& progress, const Deadline& deadline,
                     bool build)
    : progress_(progress) {
  if (dist::world_size() > 1)
    throw ConfigError(
        "process: rows with their own process settings run in child processes, which a data-parallel rank "
        "cannot start; measure them without ptune launch");
  const system::ProcessPlan plan = system::plan_process(cfg.process);
  namespace fs = std::filesystem;
  // The row's config, for the child to read (removed once it has).
  std::string cfg_path = (fs::temp_directory_path() / "ptune-row-XXXXXX").string();
  const int cfg_fd = ::mkstemp(cfg_path.data());
  if (cfg_fd < 0)
    throw std::runtime_error("cannot write the row's config for its child process: " +
                             std::string(std::strerror(errno)));
  ::close(cfg_fd);
  {
    std::ofstream out(cfg_path);
    out << config::to_json(cfg).dump();
    if (!out) throw std::runtime_error("cannot write the row's config for its child process: " + cfg_path);
  }
  cfg_file_ = cfg_path;  // removed once the child has answered (it has read it then)
  std::string err_path = (fs::temp_directory_path() / "ptune-row-err-XXXXXX").string();
  err_fd_ = ::mkostemp(err_path.data(), O_CLOEXEC);
  if (err_fd_ < 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  ::unlink(err_path.c_str());
  int cmd[2], rep[2];
  if (::pipe2(cmd, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  // Everything the child needs, made before fork: after it, only system calls.
  std::error_code ec;
  const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> args = {exe, "--quiet", "row-side", cfg_path};
  std::vector<std::string> env = system::environment_with(plan);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  if (pid_ == 0) {
    if (system::enter_own_group(parent) != 0) ::_exit(127);
    const int in = ::fcntl(cmd[0], F_DUPFD, 10), out = ::fcntl(rep[1], F_DUPFD, 10);
    const int null = ::open("/dev/null", O_RDWR);
    if (in < 0 || out < 0 || null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 ||
        ::dup2(err_fd_, 2) < 0 || ::dup2(in, 3) < 0 || ::dup2(out, 4) < 0)
      ::_exit(127);
    for (int fd = 5; fd < 4096; ++fd) ::close(fd);
    if (system::bind_process(plan) != 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(cmd[0]);
  ::close(rep[1]);
  to_child_ = cmd[1];
  from_child_ = rep[0];
  if (!build) return;
  try {
    const Json ready = ask("build " + deadline_text(deadline) + flops_text(cfg));
    steps_per_window_ = ready.value("steps_per_window", int64_t{1});
    samples_per_step_ = ready.value("samples_per_step", 1.0);
    description_ = ready.value("process", std::string());
  } catch (...) {
    stop();
    throw;
  }
}

ChildSide::~ChildSide() { stop(); }

void ChildSide::forget_config() noexcept {
  if (!cfg_file_.empty()) std::remove(cfg_file_.c_str());
  cfg_file_.clear();
}

void ChildSide::stop() noexcept {
  forget_config();
  if (pid_ <= 0) return;
  if (busy_) ::kill(pid_, SIGINT);  // it stops between steps, as a sweep does on Ctrl-C
  if (to_child_ >= 0) ::close(to_child_), to_child_ = -1;  // end of commands: it exits
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  if (from_child_ >= 0) ::close(from_child_), from_child_ = -1;
  if (err_fd_ >= 0) ::close(err_fd_), err_fd_ = -1;
}

Json ChildSide::ask(const std::string& command) {
  if (pid_ <= 0) throw std::runtime_error(who() + " has ended");
  write_all(to_child_, command + "\n", who());
  busy_ = true;
  std::string phase = "warmup";
  int64_t step = 0, total = 1;
  for (;;) {
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      const std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      Json msg = Json::parse(line, nullptr, false);
      if (msg.is_discarded()) continue;
      if (msg.contains("progress")) {
        phase = msg["progress"][0].get<std::string>();
        step = msg["progress"][1].get<int64_t>();
        total = msg["progress"][2].get<int64_t>();
        if (progress_) progress_(phase, step, total);
        continue;
      }
      busy_ = false;
      forget_config();
      if (msg.contains("error")) rethrow(msg);
      return msg;
    }
    pollfd p{from_child_, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r == 0 || (r < 0 && errno == EINTR)) {
      if (progress_) progress_(phase, step, total);  // an interruption stops the wait
      continue;
    }
    char buf[65536];
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      pending_.append(buf, static_cast<size_t>(n));
      continue;
    }
    // The child is gone without answering.
    int status = 0;
    ::waitpid(pid_, &status, 0);
    const pid_t pid = pid_;
    pid_ = -1;
    busy_ = false;
    std::string how = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                          : "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 126) how = "its CPUs or memory could not be bound";
    std::string words = last_line(err_fd_);
    if (words.rfind("ptune: error: ", 0) == 0) words = words.substr(14);
    throw std::runtime_error(who() + " (pid " + std::to_string(pid) + ") ended (" + how + ")" +
                             (words.empty() ? "" : ": " + words));
  }
}

double ChildSide::window(const Deadline& deadline) {
  return ask("window " + deadline_text(deadline)).at("ms").get<double>();
}

void ChildSide::pause() {
  ask("pause");
  // Until its threads are idle: no CPU time over three looks 10 ms apart (a tick is 10 ms).
  long last = cpu_ticks(pid_);
  int quiet = 0;
  for (int i = 0; i < 100 && quiet < 3 && last >= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const long now = cpu_ticks(pid_);
    quiet = now == last ? quiet + 1 : 0;
    last = now;
  }
}

void ChildSide::resume() { ask("resume"); }

ProfileResult ChildSide::profile(double timed_ms_per_step, const TraceTarget& target) {
  const Json request = {{"timed_ms", timed_ms_per_step},
                        {"folder", target.folder},
                        {"row", target.row},
                        {"changes", target.changes}};
  const Json reply = ask("profile " + request.dump());
  ProfileResult p;
  if (reply.contains("gpu_busy_pct") && !reply["gpu_busy_pct"].is_null())
    p.gpu_busy_pct = reply["gpu_busy_pct"].get<double>();
  p.trace_path = reply.value("trace_path", std::string());
  return p;
}

Measurement ChildSide::result(size_t first, size_t count) {
  const Json reply = ask("result " + std::to_string(first) + " " +
                         std::to_string(count == SIZE_MAX ? int64_t{-1} : static_cast<int64_t>(count)));
  return measurement_from_json(reply.at("measurement"));
}

void ChildSide::set_progress(const Progress& progress, int64_t planned) {
  progress_ = progress;
  ask("plan " + std::to_string(planned));
}

// ---------------------------------------------------------------- several processes

ProcessGroup::ProcessGroup(std::vector<std::unique_ptr<RowSide>> children, bool shifted)
    : children_(std::move(children)), shifted_(shifted), counts_(children_.size(), 0) {
  if (children_.empty()) throw std::logic_error("ProcessGroup: no process");
}

int ProcessGroup::turn(size_t n) const {
  const size_t k = children_.size();
  return static_cast<int>((shifted_ ? n + n / k : n) % k);
}

double ProcessGroup::window(const Deadline& deadline) {
  const int next = turn(process_.size());
  if (resumed_ != next) {
    if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
    children_[static_cast<size_t>(next)]->resume();
    resumed_ = next;
  }
  const double ms = children_[static_cast<size_t>(next)]->window(deadline);
  process_.push_back(next);
  local_.push_back(counts_[static_cast<size_t>(next)]++);
  last_ = next;
  return ms;
}

void ProcessGroup::restart(bool shifted) {
  for (auto& child : children_) child->mark_previous();
  shifted_ = shifted;
  process_.clear();
  local_.clear();
  last_ = -1;
}

bool ProcessGroup::reusable(size_t count) const {
  return children_.size() == count &&
         std::all_of(counts_.begin(), counts_.end(), [](size_t n) { return n > 0; });
}

void ProcessGroup::pause() {
  if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
  resumed_ = -1;
}

void ProcessGroup::resume() {
  const int next = turn(process_.size());
  if (resumed_ == next) return;
  if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
  children_[static_cast<size_t>(next)]->resume();
  resumed_ = next;
}

void ProcessGroup::set_progress(const Progress& progress, int64_t planned) {
  // Each process's windows are a share of the row's; its progress in steps counts toward the
  // group's (the others' steps so far added).
  const auto k = static_cast<int64_t>(children_.size());
  const int64_t share = (planned + k - 1) / k;
  steps_done_.assign(children_.size(), 0);
  steps_planned_.assign(children_.size(), share * steps_per_window());
  for (size_t p = 0; p < children_.size(); ++p)
    children_[p]->set_progress(
        [this, p, progress](const std::string& phase, int64_t step, int64_t total) {
          if (!progress) return;
          if (phase != "measure") return progress(phase, step, total);
          steps_done_[p] = step;
          steps_planned_[p] = total;
          progress(phase, std::accumulate(steps_done_.begin(), steps_done_.end(), int64_t{0}),
                   std::accumulate(steps_planned_.begin(), steps_planned_.end(), int64_t{0}));
        },
        share);
}

std::string ProcessGroup::process_description() const {
  const std::string first = children_.front()->process_description();
  if (children_.size() == 1) return first;
  return std::to_string(children_.size()) + " processes started alike, timed in turn; the first: " + first;
}

Measurement ProcessGroup::result(size_t first, size_t count) {
  const size_t end = count == SIZE_MAX ? process_.size() : std::min(process_.size(), first + count);
  if (first >= end) throw std::runtime_error("no timed window to report");
  std::vector<double> ms;
  std::vector<int> process;
  // Each process's own windows among them: a contiguous run of its windows.
  std::vector<size_t> from(children_.size(), SIZE_MAX), n(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    from[p] = std::min(from[p], local_[w]);
    ++n[p];
  }
  std::optional<Measurement> merged;
  // A process's note on its windows cut short counts its own windows: the group's counts all.
  int64_t short_windows = 0;
  auto counted_short = [&](Measurement& m, size_t kept) {
    if (m.short_windows == 0) return;
    short_windows += m.short_windows;
    const std::string own = short_windows_note(m.short_windows, kept, m.steps);
    m.notes.erase(std::remove(m.notes.begin(), m.notes.end(), own), m.notes.end());
  };
  double weight = 0;
  double wait = 0, h2d = 0, compute = 0, faults = 0, system = 0;
  double cores = 0;
  int64_t peak_rss = 0;
  bool any_faults = false, any_system = false, any_cores = false;
  std::vector<std::vector<double>> own(children_.size());
  for (size_t p = 0; p < children_.size(); ++p) {
    if (n[p] == 0) continue;
    Measurement m = children_[p]->result(from[p], n[p]);
    counted_short(m, n[p]);
    own[p] = m.repeat_ms;
    const double w = static_cast<double>(n[p]);
    weight += w;
    wait += w * m.data_wait_pct;
    h2d += w * m.h2d_pct;
    compute += w * m.compute_pct;
    if (m.page_faults_per_step) faults += w * *m.page_faults_per_step, any_faults = true;
    if (m.system_time_pct) system += w * *m.system_time_pct, any_system = true;
    if (m.cpu_cores_busy) cores += w * *m.cpu_cores_busy, any_cores = true;
    if (m.peak_rss_bytes) peak_rss = std::max(peak_rss, *m.peak_rss_bytes);
    if (!merged) {
      merged = std::move(m);
      continue;
    }
    for (auto& note : m.notes)
      if (std::find(merged->notes.begin(), merged->notes.end(), note) == merged->notes.end())
        merged->notes.push_back(std::move(note));
  }
  // The windows in the group's order, each from its process's own result.
  std::vector<size_t> taken(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    ms.push_back(own[p].at(taken[p]++));
    process.push_back(process_[w]);
  }
  Measurement& m = *merged;
  m.data_wait_pct = wait / weight;
  m.h2d_pct = h2d / weight;
  m.compute_pct = compute / weight;
  m.page_faults_per_step = any_faults ? std::optional<double>(faults / weight) : std::nullopt;
  m.system_time_pct = any_system ? std::optional<double>(system / weight) : std::nullopt;
  m.cpu_cores_busy = any_cores ? std::optional<double>(cores / weight) : std::nullopt;
  if (peak_rss > 0) m.peak_rss_bytes = peak_rss;
  set_windows(m, ms, 1, process);
  m.short_windows = short_windows;
  if (short_windows > 0) m.notes.push_back(short_windows_note(short_windows, ms.size(), m.steps));
  return m;
}

std::unique_ptr<RowSide> start_process(const config::ExperimentConfig& cfg, const Progress& progress,
                                       const Deadline& deadline) {
  if (cfg.program.enabled()) return std::make_unique<proc::ProgramInstance>(cfg, progress, deadline);
  return std::make_unique<ChildSide>(cfg, progress, deadline);
}

RowProcesses start_row_processes(const config::ExperimentConfig* prev, const config::ExperimentConfig& cfg,
                                 int64_t count, const Progress& prev_progress, const Progress& progress,
                                 const Deadline& deadline) {
  std::vector<std::unique_ptr<RowSide>> a, b;
  auto start = [&](bool row_side) {
    auto child =
        row_side ? start_process(cfg, progress, deadline) : start_process(*prev, prev_progress, deadline);
    child->pause();
    (row_side ? b : a).push_back(std::move(child));
  };
  for (int64_t i = 0; i < count; ++i) {
    // A B, then B A: neither side has the earlier starts.
    const bool prev_first = prev && i % 2 == 0;
    if (prev_first) start(false);
    start(true);
    if (prev && !prev_first) start(false);
  }
  RowProcesses r;
  if (prev) r.prev = std::make_unique<ProcessGroup>(std::move(a), false);
  r.row = std::make_unique<ProcessGroup>(std::move(b), true);
  return r;
}

// ---------------------------------------------------------------- the child's side

int serve_side(const config::ExperimentConfig& cfg, int in_fd, int out_fd,
               const std::atomic<bool>* interrupted) {
  auto send = [&](const Json& j) { write_all(out_fd, j.dump() + "\n", "the parent"); };
  const Progress progress = [&](const std::string& phase, int64_t step, int64_t total) {
    if (interrupted && interrupted->load()) throw Interrupted();
    send(Json{{"progress", {phase, step, total}}});
  };
  std::unique_ptr<Bench> bench;
  std::string buf;
  char chunk[4096];
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) == std::string::npos) {
      const ssize_t n = ::read(in_fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) {
        if (interrupted && interrupted->load()) return stopped_exit_code(SIGINT);
        continue;
      }
      if (n <= 0) return 0;  // the parent is done with this side
      buf.append(chunk, static_cast<size_t>(n));
    }
    std::istringstream line(buf.substr(0, nl));
    buf.erase(0, nl + 1);
    std::string command;
    line >> command;
    try {
      if (command == "quit") return 0;
      if (command == "profile") {
        std::string rest;
        std::getline(line, rest);
        const Json request = Json::parse(rest);
        TraceTarget target;
        target.folder = request.value("folder", std::string());
        target.row = request.value("row", std::string());
        target.changes = nlohmann::ordered_json::parse(request.value("changes", Json::object()).dump());
        const ProfileResult p = measure::profile(cfg, request.value("timed_ms", 0.0), target, progress);
        send({{"gpu_busy_pct", p.gpu_busy_pct ? Json(*p.gpu_busy_pct) : Json(nullptr)},
              {"trace_path", p.trace_path}});
        continue;
      }
      if (command != "build" && !bench) throw std::logic_error("'" + command + "' before build");
      if (command == "build") {
        const Deadline deadline = read_deadline(line);
        remember_parents_flops(cfg, line);
        bench = std::make_unique<Bench>(cfg, progress, deadline);
        send({{"steps_per_window", bench->steps_per_window()},
              {"samples_per_step", bench->samples_per_step()},
              {"process", system::describe_this_process() + "; " + omp_threads()}});
      } else if (command == "window") {
        send({{"ms", bench->window(read_deadline(line))}});
      } else if (command == "pause" || command == "resume") {
        command == "pause" ? bench->pause() : bench->resume();
        send({{"ok", true}});
      } else if (command == "plan") {
        int64_t planned = 0;
        line >> planned;
        bench->set_progress(progress, planned);
        send({{"ok", true}});
      } else if (command == "result") {
        int64_t first = 0, count = -1;
        line >> first >> count;
        send({{"measurement",
               measurement_json(bench->result(static_cast<size_t>(first),
                                              count < 0 ? SIZE_MAX : static_cast<size_t>(count)))}});
      } else {
        throw std::logic_error("unknown command '" + command + "'");
      }
    } catch (const Interrupted&) {
      send({{"error", "interrupted"}, {"kind", "interrupted"}});
      return stopped_exit_code(SIGINT);
    } catch (const ConfigError& e) {
      send({{"error", e.what()}, {"kind", "config"}});
      return 2;
    } catch (const DataError& e) {
      send({{"error", e.what()}, {"kind", "data"}});
      return 1;
    } catch (const WriteError& e) {
      send({{"error", e.what()}, {"kind", "write"}});
      return 1;
    } catch (const std::exception& e) {
      send({{"error", message_of(e)}, {"kind", "runtime"}});
      return 1;
    }
  }
}

// ---------------------------------------------------------------- Measurement as JSON

namespace {

Json interval_json(const stats::Interval& i) {
  return {{"point", i.point}, {"lo", i.lo}, {"hi", i.hi}, {"n", i.n}, {"level", i.level}};
}

stats::Interval interval_from(const Json& j) {
  stats::Interval i;
  i.point = j.value("point", 0.0);
  i.lo = j.value("lo", 0.0);
  i.hi = j.value("hi", 0.0);
  i.n = j.value("n", int64_t{0});
  i.level = j.value("level", 0.0);
  return i;
}

template <class T>
Json optional_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

template <class T>
std::optional<T> optional_from(const Json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

}  // namespace

Json measurement_json(const Measurement& m) {
  return {{"batch_size", m.batch_size},
          {"steps", m.steps},
          {"ms_per_step", m.ms_per_step},
          {"samples_per_s", m.samples_per_s},
          {"samples_per_s_ci", interval_json(m.samples_per_s_ci)},
          {"repeat_ms", m.repeat_ms},
          {"transient_windows", m.transient_windows},
          {"short_windows", m.short_windows},
          {"spread_pct", m.spread_pct},
          {"data_wait_pct", m.data_wait_pct},
          {"h2d_pct", m.h2d_pct},
          {"compute_pct", m.compute_pct},
          {"loss", optional_json(m.loss)},
          {"peak_mem_bytes", optional_json(m.peak_mem_bytes)},
          {"device_mem_bytes", optional_json(m.device_mem_bytes)},
          {"gpu_busy_pct", optional_json(m.gpu_busy_pct)},
          {"trace_path", m.trace_path},
          {"eager_fallback", m.eager_fallback},
          {"notes", m.notes},
          {"model_flops_per_sample", optional_json(m.model_flops_per_sample)},
          {"peak_flops_per_s", optional_json(m.peak_flops_per_s)},
          {"peak_precision", m.peak_precision},
          {"peak_source", m.peak_source},
          {"peak_under_load", m.peak_under_load},
          {"page_faults_per_step", optional_json(m.page_faults_per_step)},
          {"system_time_pct", optional_json(m.system_time_pct)}};
}

Measurement measurement_from_json(const Json& j) {
  Measurement m;
  m.batch_size = j.at("batch_size").get<int64_t>();
  m.steps = j.at("steps").get<int64_t>();
  m.ms_per_step = j.at("ms_per_step").get<double>();
  m.samples_per_s = j.at("samples_per_s").get<double>();
  m.samples_per_s_ci = interval_from(j.at("samples_per_s_ci"));
  m.repeat_ms = j.at("repeat_ms").get<std::vector<double>>();
  m.transient_windows = j.value("transient_windows", int64_t{0});
  m.short_windows = j.value("short_windows", int64_t{0});
  m.spread_pct = j.value("spread_pct", 0.0);
  m.data_wait_pct = j.value("data_wait_pct", 0.0);
  m.h2d_pct = j.value("h2d_pct", 0.0);
  m.compute_pct = j.value("compute_pct", 0.0);
  m.loss = optional_from<double>(j, "loss");
  m.peak_mem_bytes = optional_from<int64_t>(j, "peak_mem_bytes");
  m.device_mem_bytes = optional_from<int64_t>(j, "device_mem_bytes");
  m.gpu_busy_pct = optional_from<double>(j, "gpu_busy_pct");
  m.trace_path = j.value("trace_path", std::string());
  m.eager_fallback = j.value("eager_fallback", std::string());
  m.notes = j.value("notes", std::vector<std::string>{});
  m.model_flops_per_sample = optional_from<double>(j, "model_flops_per_sample");
  m.peak_flops_per_s = optional_from<double>(j, "peak_flops_per_s");
  m.peak_precision = j.value("peak_precision", std::string());
  m.peak_source = j.value("peak_source", std::string());
  m.peak_under_load = j.value("peak_under_load", false);
  m.page_faults_per_step = optional_from<double>(j, "page_faults_per_step");
  m.system_time_pct = optional_from<double>(j, "system_time_pct");
  return m;
}

}  // namespace ptune::measure
