#include "bench/child_side.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>

#include "config/config.hpp"
#include "system/rendezvous.hpp"
#include "dist/group.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"
#include "models/flops.hpp"
#include "system/proc_stat.hpp"

namespace ptune::bench {

namespace {

using Json = nlohmann::json;

/// `d` as the child continues it: "<limit_ms> <elapsed_ms> <budget_s>" (Deadline::continuing).
std::string deadline_text(const measure::Deadline& d) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.17g %.17g %.17g", d.limit_ms(), d.elapsed_ms(), d.budget_s());
  return buf;
}

/// The deadline a command's words give (deadline_text).
measure::Deadline read_deadline(std::istream& in) {
  double limit = measure::Deadline::kNone, elapsed = 0, budget = 0;
  in >> limit >> elapsed >> budget;
  return measure::Deadline::continuing(limit, elapsed, budget);
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

/// The row's config in a file of its own, for its child process to read: the file's path.
std::string write_row_config(const config::ExperimentConfig& cfg) {
  std::string path = (std::filesystem::temp_directory_path() / "ptune-row-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  if (fd < 0)
    throw std::runtime_error("cannot write the row's config for its child process: " +
                             std::string(std::strerror(errno)));
  ::close(fd);
  std::ofstream out(path);
  out << config::to_json(cfg).dump();
  if (!out) throw std::runtime_error("cannot write the row's config for its child process: " + path);
  return path;
}

/// A file, already unlinked, that keeps what the child writes to stderr: its descriptor.
int open_error_file() {
  std::string path = (std::filesystem::temp_directory_path() / "ptune-row-err-XXXXXX").string();
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  ::unlink(path.c_str());
  return fd;
}

/// What the row's child process needs once forked, all made before the fork.
struct ChildPlan {
  pid_t parent;                     // ptune
  const system::ProcessPlan& plan;  // the row's process settings: its CPUs and memory
  char* const* argv;                // `ptune row-side CONFIG`
  char* const* envp;
  int commands, replies;  // the read end of the commands' pipe, the write end of the replies'
  int err;                // the file for its stderr
};

/// The child's side of ChildSide's start, after fork: only system calls. It enters a process
/// group of its own, takes /dev/null as stdin and stdout, `c.err` as stderr and the two pipes as
/// descriptors 3 and 4, binds its CPUs and memory (exit code 126 where it cannot) and runs
/// `ptune row-side`.
[[noreturn]] void exec_row_side(const ChildPlan& c) {
  if (system::enter_own_group(c.parent) != 0) ::_exit(127);
  const int in = ::fcntl(c.commands, F_DUPFD, 10), out = ::fcntl(c.replies, F_DUPFD, 10);
  const int null = ::open("/dev/null", O_RDWR);
  if (in < 0 || out < 0 || null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 || ::dup2(c.err, 2) < 0 ||
      ::dup2(in, 3) < 0 || ::dup2(out, 4) < 0)
    ::_exit(127);
  for (int fd = 5; fd < 4096; ++fd) ::close(fd);
  if (system::bind_process(c.plan) != 0) ::_exit(126);
  ::execve(c.argv[0], c.argv, c.envp);
  ::_exit(127);
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

std::unique_ptr<Bench> prime(const config::ExperimentConfig& cfg, const measure::Progress& progress) {
  if (!system::default_process(cfg.process)) return nullptr;
  std::unique_ptr<Bench> companion;
  try {
    // Two at once: the first row is then built into the first's freed memory, beside the second.
    auto first = std::make_unique<Bench>(cfg, progress, measure::Deadline());
    companion = std::make_unique<Bench>(cfg, progress, measure::Deadline());
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

ChildSide::ChildSide(const config::ExperimentConfig& cfg, const measure::Progress& progress,
                     const measure::Deadline& deadline, bool build)
    : progress_(progress) {
  if (system::world_size() > 1)
    throw ConfigError(
        "process: rows with their own process settings run in child processes, which a data-parallel rank "
        "cannot start; measure them without ptune launch");
  const system::ProcessPlan plan = system::plan_process(cfg.process);
  const std::string cfg_path = write_row_config(cfg);
  cfg_file_ = cfg_path;  // removed once the child has answered (it has read it then)
  err_fd_ = open_error_file();
  int cmd[2], rep[2];
  if (::pipe2(cmd, O_CLOEXEC) != 0 || ::pipe2(rep, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  // Everything the child needs, made before fork: after it, only system calls.
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> args = {exe, "--quiet", "row-side", cfg_path};
  std::vector<std::string> env = system::environment_with(plan);
  const std::vector<char*> argv = system::c_strings(args), envp = system::c_strings(env);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("cannot start the row's child process: " + std::string(std::strerror(errno)));
  if (pid_ == 0) exec_row_side({parent, plan, argv.data(), envp.data(), cmd[0], rep[1], err_fd_});
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

double ChildSide::window(const measure::Deadline& deadline) {
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

measure::Measurement ChildSide::result(size_t first, size_t count) {
  const Json reply = ask("result " + std::to_string(first) + " " +
                         std::to_string(count == SIZE_MAX ? int64_t{-1} : static_cast<int64_t>(count)));
  return measure::measurement_from_json(reply.at("measurement"));
}

void ChildSide::set_progress(const measure::Progress& progress, int64_t planned) {
  progress_ = progress;
  ask("plan " + std::to_string(planned));
}

// ---------------------------------------------------------------- the child's side

namespace {

/// The child's state while it serves its parent: the row's Bench once built.
struct Server {
  const config::ExperimentConfig& cfg;
  int out_fd;                  // replies, one JSON object a line
  measure::Progress progress;  // sent to the parent as {"progress": [phase, step, total]}
  std::unique_ptr<Bench> bench;

  void send(const Json& j) const { write_all(out_fd, j.dump() + "\n", "the parent"); }
};

/// The parent's command lines, read from `fd`.
struct CommandLines {
  int fd;
  const std::atomic<bool>* interrupted;
  std::string buf;  // read past the last line taken

  /// The next line into `line`; or the exit code to end with instead: 0 where the parent has
  /// closed its end, 130 where `interrupted` was set.
  std::optional<int> next(std::string& line) {
    char chunk[4096];
    size_t nl;
    while ((nl = buf.find('\n')) == std::string::npos) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) {
        if (interrupted && interrupted->load()) return stopped_exit_code(SIGINT);
        continue;
      }
      if (n <= 0) return 0;  // the parent is done with this side
      buf.append(chunk, static_cast<size_t>(n));
    }
    line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    return std::nullopt;
  }
};

/// "profile {request}": a profile of the row (bench::profile), whether built or not.
void serve_profile(Server& s, std::istream& line) {
  std::string rest;
  std::getline(line, rest);
  const Json request = Json::parse(rest);
  TraceTarget target;
  target.folder = request.value("folder", std::string());
  target.row = request.value("row", std::string());
  target.changes = nlohmann::ordered_json::parse(request.value("changes", Json::object()).dump());
  const ProfileResult p = bench::profile(s.cfg, request.value("timed_ms", 0.0), target, s.progress);
  s.send({{"gpu_busy_pct", p.gpu_busy_pct ? Json(*p.gpu_busy_pct) : Json(nullptr)},
          {"trace_path", p.trace_path}});
}

/// "build <deadline> [forward backward]": builds the row's Bench (the parent's FLOPs count kept).
void serve_build(Server& s, std::istream& line) {
  const measure::Deadline deadline = read_deadline(line);
  remember_parents_flops(s.cfg, line);
  s.bench = std::make_unique<Bench>(s.cfg, s.progress, deadline);
  s.send({{"steps_per_window", s.bench->steps_per_window()},
          {"samples_per_step", s.bench->samples_per_step()},
          {"process", system::describe_this_process() + "; " + omp_threads()}});
}

void serve_window(Server& s, std::istream& line) { s.send({{"ms", s.bench->window(read_deadline(line))}}); }

void serve_pause(Server& s, std::istream&) {
  s.bench->pause();
  s.send({{"ok", true}});
}

void serve_resume(Server& s, std::istream&) {
  s.bench->resume();
  s.send({{"ok", true}});
}

/// "plan <windows>": the windows planned, for the progress.
void serve_plan(Server& s, std::istream& line) {
  int64_t planned = 0;
  line >> planned;
  s.bench->set_progress(s.progress, planned);
  s.send({{"ok", true}});
}

/// "result <first> <count>": the Measurement of those windows (count -1: all from `first` on).
void serve_result(Server& s, std::istream& line) {
  int64_t first = 0, count = -1;
  line >> first >> count;
  s.send(
      {{"measurement", measure::measurement_json(s.bench->result(
                           static_cast<size_t>(first), count < 0 ? SIZE_MAX : static_cast<size_t>(count)))}});
}

/// A command of the parent's: its first word, whether it needs the Bench built first, its server.
struct ServedCommand {
  const char* name;
  bool needs_bench;
  void (*serve)(Server& s, std::istream& line);
};

const ServedCommand kServedCommands[] = {
    {"profile", false, serve_profile}, {"build", false, serve_build},  {"window", true, serve_window},
    {"pause", true, serve_pause},      {"resume", true, serve_resume}, {"plan", true, serve_plan},
    {"result", true, serve_result},
};

/// Serves `command` (the line's first word; the rest is in `line`).
void serve_command(Server& s, const std::string& command, std::istream& line) {
  const ServedCommand* c = std::find_if(std::begin(kServedCommands), std::end(kServedCommands),
                                        [&](const ServedCommand& k) { return command == k.name; });
  const bool known = c != std::end(kServedCommands);
  if ((!known || c->needs_bench) && !s.bench) throw std::logic_error("'" + command + "' before build");
  if (!known) throw std::logic_error("unknown command '" + command + "'");
  c->serve(s, line);
}

/// Called in a catch block: sends the error being handled to the parent as {"error", "kind"}
/// (rethrow() reads it back) and returns the exit code the child ends with.
int reply_error(const Server& s) {
  try {
    throw;
  } catch (const Interrupted&) {
    s.send({{"error", "interrupted"}, {"kind", "interrupted"}});
    return stopped_exit_code(SIGINT);
  } catch (const ConfigError& e) {
    s.send({{"error", e.what()}, {"kind", "config"}});
    return 2;
  } catch (const DataError& e) {
    s.send({{"error", e.what()}, {"kind", "data"}});
    return 1;
  } catch (const WriteError& e) {
    s.send({{"error", e.what()}, {"kind", "write"}});
    return 1;
  } catch (const std::exception& e) {
    s.send({{"error", message_of(e)}, {"kind", "runtime"}});
    return 1;
  }
}

}  // namespace

int serve_side(const config::ExperimentConfig& cfg, int in_fd, int out_fd,
               const std::atomic<bool>* interrupted) {
  Server s{cfg, out_fd, {}, nullptr};
  s.progress = [&s, interrupted](const std::string& phase, int64_t step, int64_t total) {
    if (interrupted && interrupted->load()) throw Interrupted();
    s.send(Json{{"progress", {phase, step, total}}});
  };
  CommandLines commands{in_fd, interrupted, {}};
  for (std::string text;;) {
    if (const std::optional<int> exit_code = commands.next(text)) return *exit_code;
    std::istringstream line(text);
    std::string command;
    line >> command;
    try {
      if (command == "quit") return 0;
      serve_command(s, command, line);
    } catch (...) {
      return reply_error(s);
    }
  }
}

// ---------------------------------------------------------------- Measurement as JSON

}  // namespace ptune::bench
