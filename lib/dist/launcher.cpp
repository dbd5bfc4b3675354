#include "dist/launcher.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>

#include "runtime/cuda_support.hpp"
#include "core/errors.hpp"
#include "system/process.hpp"

extern char** environ;

namespace ptune::dist {
namespace {

using Clock = std::chrono::steady_clock;

// Signals reach the event loop through a self-pipe: the handler writes the signal number.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_launch_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_signal_pipe[1] >= 0) (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

/// Installs the launcher's handlers for its lifetime and restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error("launch: cannot create a pipe");
    struct sigaction sa {};
    sa.sa_handler = on_launch_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      // A stop signal the process keeps ignoring (a job started with `&` from a script ignores
      // SIGINT) stays ignored, in the ranks too.
      if (kSignals[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN) continue;
      ::sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~SignalScope() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  int fd() const { return g_signal_pipe[0]; }

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  std::array<struct sigaction, 4> old_{};
};

/// Writes all of `data` to `fd` (retrying short writes); gives up silently on errors.
void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

/// One output stream of one rank: bytes in, prefixed whole lines out.
struct Stream {
  int fd = -1;     // read end of the rank's pipe; -1 once closed
  int out_fd = 1;  // where its lines go (1 or 2)
  std::string prefix;
  std::string partial;
  std::string last_error;  // the rank's last "ptune: error: " line, without that prefix
  std::string held;        // that line, not written yet: the launcher's own line may say it

  void emit(const std::string& line) {
    static const std::string kError = "ptune: error: ";
    if (out_fd == 2 && line.rfind(kError, 0) == 0) {  // a rank's error line (stderr)
      flush_held();
      last_error = line.substr(kError.size());
      held = line;
      return;
    }
    write(line);
  }
  void write(const std::string& line) const {
    const std::string text = prefix + line + "\n";
    write_all(out_fd, text.data(), text.size());
  }
  /// Writes the error line held back, if any.
  void flush_held() {
    if (!held.empty()) write(held);
    held.clear();
  }
  /// Reads what is available; returns false at end of file.
  bool pump() {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        partial.append(buf, static_cast<size_t>(n));
        size_t nl;
        while ((nl = partial.find('\n')) != std::string::npos) {
          emit(partial.substr(0, nl));
          partial.erase(0, nl + 1);
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      close();  // EOF or a read error
      return false;
    }
  }
  void close() {
    if (!partial.empty()) emit(partial);
    partial.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Rank {
  int rank = 0;       // global rank
  std::string where;  // " (node N, host H)" across nodes, else ""
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // waitpid status once exited
  Stream out, err;
};

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "signal " + std::to_string(sig);
  }
}

std::string describe(const Rank& r) {
  if (WIFSIGNALED(r.status)) {
    const int sig = WTERMSIG(r.status);
    return "rank " + std::to_string(r.rank) + r.where + " was killed by signal " + std::to_string(sig) +
           " (" + signal_name(sig) + ")";
  }
  return "rank " + std::to_string(r.rank) + r.where + " exited with status " +
         std::to_string(WEXITSTATUS(r.status));
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

/// The environment of rank `rank`: ours, with the rendezvous variables replaced.
std::vector<std::string> rank_environment(const system::LaunchOptions& o, int rank) {
  static const std::vector<std::string> kOwned = {
      "RANK=",       "WORLD_SIZE=",  "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
      "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT="};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    bool owned = false;
    for (const auto& k : kOwned) owned = owned || kv.rfind(k, 0) == 0;
    if (!owned) env.push_back(kv);
  }
  // As torchrun: global ranks are numbered node by node.
  env.push_back("RANK=" + std::to_string(o.node_rank * o.nproc_per_node + rank));
  env.push_back("WORLD_SIZE=" + std::to_string(o.nnodes * o.nproc_per_node));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nproc_per_node));
  env.push_back("GROUP_RANK=" + std::to_string(o.node_rank));
  env.push_back("MASTER_ADDR=" + o.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(o.master_port));
  return env;
}

/// `options` checked (UsageError as launch() says), with the defaults filled in: master_addr
/// 127.0.0.1, master_port a free port.
system::LaunchOptions checked(const system::LaunchOptions& options) {
  system::LaunchOptions o = options;
  if (o.nproc_per_node < 1)
    throw UsageError("launch: --nproc-per-node " + std::to_string(o.nproc_per_node) + " must be at least 1");
  const int limit = max_ranks_per_node();
  if (o.nproc_per_node > limit) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    throw UsageError("launch: --nproc-per-node " + std::to_string(o.nproc_per_node) +
                     " is more ranks than this machine can run; at most " + std::to_string(limit) + " (" +
                     std::to_string(kRanksPerCore) + " per core on " + std::to_string(cores) +
                     " cores, or one per GPU on " + std::to_string(runtime::cuda::device_count()) + " GPUs)");
  }
  if (o.args.empty())
    throw UsageError(
        "launch: no command; put the ptune command after --, e.g. ptune launch --nproc-per-node 2 -- train "
        "exp.json");
  if (o.args.front() == "launch") throw UsageError("launch: the command after -- cannot be another launch");
  if (o.master_port < 0 || o.master_port > 65535)
    throw UsageError("launch: --master-port " + std::to_string(o.master_port) + " is not in [0, 65535]");
  if (o.nnodes < 1) throw UsageError("launch: --nnodes " + std::to_string(o.nnodes) + " must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw UsageError("launch: --node-rank " + std::to_string(o.node_rank) + " is not in [0, " +
                     std::to_string(o.nnodes) + ") (--nnodes " + std::to_string(o.nnodes) + ")");
  if (o.nnodes > 1 && o.master_addr.empty())
    throw UsageError("launch: --nnodes " + std::to_string(o.nnodes) +
                     " needs --master-addr: the address of node 0 that every node reaches");
  if (o.nnodes > 1 && o.master_port == 0)
    throw UsageError("launch: --nnodes " + std::to_string(o.nnodes) +
                     " needs one --master-port for every node; 0 (any free port) only works on one node");
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  if (o.master_port == 0) o.master_port = free_port();
  return o;
}

/// Across nodes, what a rank's failure says of where it ran: " (node N, host H)"; "" on one node.
std::string node_where(const system::LaunchOptions& o) {
  if (o.nnodes <= 1) return "";
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return " (node " + std::to_string(o.node_rank) + (host[0] ? std::string(", host ") + host : std::string()) +
         ")";
}

/// Sends `sig` to every rank still running.
void kill_running(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) ::kill(r.pid, sig);
}

/// Starts local rank `i` into `r`: this program (o.exe) with the rank's environment, its stdin
/// /dev/null, its stdout and stderr into non-blocking pipes. Throws std::runtime_error when a
/// pipe or the fork cannot be had.
void start_rank(const system::LaunchOptions& o, int i, const std::string& where, pid_t parent, Rank& r) {
  r.rank = o.node_rank * o.nproc_per_node + i;
  r.where = where;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("launch: cannot create pipes for rank " + std::to_string(i));
  std::vector<std::string> env = rank_environment(o, i);
  std::vector<std::string> argv = {o.exe};
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  std::vector<char*> c_env = system::c_strings(env), c_argv = system::c_strings(argv);
  const std::string exe = o.exe;
  // Built before fork: the child only makes async-signal-safe calls until exec.
  const std::string exec_failed = "ptune: error: launch: cannot run " + exe + "\n";

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("launch: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The rank: its own process group (a terminal's Ctrl-C reaches it once, through us), and
    // SIGTERM if the launcher dies, so no rank outlives it.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(exe.c_str(), c_argv.data(), c_env.data());
    write_all(2, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
  r.pid = pid;
  r.running = true;
  r.out = Stream{out[0], 1, o.prefix_stdout ? prefix : "", {}, {}, {}};
  r.err = Stream{err[0], 2, o.prefix ? prefix : "", {}, {}, {}};
}

/// The launcher's event loop over the started ranks: their output copied as it comes, signals
/// forwarded, exits reaped; after the first failure (or an interrupt) the others are stopped,
/// SIGTERM then SIGKILL after the grace period.
class Supervisor {
 public:
  Supervisor(std::vector<Rank>& ranks, int signal_fd, double grace_s)
      : ranks_(ranks),
        signal_fd_(signal_fd),
        grace_(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000.0))) {}

  /// Until every rank has exited and its output is read (or, after the last exit, 2 s have
  /// passed: a grandchild holds a pipe open); then closes the pipes and kills what is left.
  void run() {
    std::optional<Clock::time_point> drain_until;  // after the last exit, wait this long for output
    while (any_running() || any_open()) {
      if (!any_running()) {
        if (!drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
        if (Clock::now() > *drain_until) break;  // a grandchild holds a pipe open: stop reading
      }
      if (!poll_once(term_at_ != kNever || drain_until ? 50 : 250)) break;
      reap();
      escalate();
    }
    for (auto& r : ranks_) r.out.close(), r.err.close();
    // The first failure's error line is the launcher's last line (result()); the others' are
    // written as they were, but for the same error again.
    std::string cause;
    if (first_failure_ != kNoRank && WIFEXITED(ranks_[first_failure_].status))
      cause = ranks_[first_failure_].err.held;
    for (auto& r : ranks_) {
      if (r.err.held == cause) r.err.held.clear();
      r.err.flush_held();
      if (r.running) {  // only after a stuck drain: make sure nothing is left behind
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &r.status, 0);
        r.running = false;
      }
    }
  }

  /// How the ranks ended.
  LaunchResult result() const {
    LaunchResult result;
    if (first_failure_ != kNoRank) {
      const Rank& r = ranks_[first_failure_];
      // The rank's own error line, so that the launcher's last line says what happened.
      const std::string& cause = r.err.last_error;
      result.error = describe(r) + (!cause.empty() && WIFEXITED(r.status) ? ": " + cause : "") +
                     (stopped_others_ ? "; stopped the others" : "");
      result.exit_code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 1;
      return result;
    }
    if (interrupted_) {
      result.exit_code = stopped_exit_code(stop_signal_);
      result.error = stop_signal_ == SIGTERM ? "terminated" : "interrupted";
    }
    return result;
  }

 private:
  bool any_running() const {
    for (auto& r : ranks_)
      if (r.running) return true;
    return false;
  }
  bool any_open() const {
    for (auto& r : ranks_)
      if (r.out.fd >= 0 || r.err.fd >= 0) return true;
    return false;
  }

  /// Waits up to `timeout_ms` for output or a signal and handles what came. False when poll
  /// failed.
  bool poll_once(int timeout_ms) {
    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    std::vector<Stream*> streams;
    for (auto& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return false;
    if (n > 0) {
      if (fds[0].revents & POLLIN) forward_signals();
      for (size_t k = 1; k < fds.size(); ++k)
        if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) streams[k - 1]->pump();
    }
    return true;
  }

  /// The signals received: SIGINT, SIGTERM and SIGHUP (as SIGTERM) go to every rank, which
  /// checkpoints and exits (130/143).
  void forward_signals() {
    unsigned char sigs[64];
    ssize_t got;
    while ((got = ::read(signal_fd_, sigs, sizeof sigs)) > 0) {
      for (ssize_t k = 0; k < got; ++k) {
        const int sig = sigs[k];
        if (sig == SIGCHLD) continue;  // reaped by reap()
        interrupted_ = interrupted_ || first_failure_ == kNoRank;
        if (!stop_signal_) stop_signal_ = sig == SIGHUP ? SIGTERM : sig;
        kill_running(ranks_, sig == SIGHUP ? SIGTERM : sig);
      }
    }
  }

  /// Collects the ranks that exited; the first failure (not after an interrupt) schedules
  /// stopping the others now.
  void reap() {
    std::vector<size_t> newly_failed;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      Rank& r = ranks_[i];
      if (!r.running) continue;
      int status = 0;
      const pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      if (w == r.pid) {
        r.running = false;
        r.status = status;
        if (failed(status)) newly_failed.push_back(i);
      }
    }
    if (interrupted_ && term_at_ == kNever) {
      // After Ctrl-C the ranks agree on a step, checkpoint and exit; once one has, the others
      // get a generous minute (a checkpoint being written), then are stopped.
      for (auto& r : ranks_)
        if (!r.running) term_at_ = Clock::now() + std::chrono::seconds(60);
    }
    if (newly_failed.empty() || first_failure_ != kNoRank || interrupted_) return;
    // Of ranks found dead together, one killed by a signal is likelier the cause than one
    // that exited because its peer vanished.
    size_t pick = newly_failed.front();
    for (size_t i : newly_failed)
      if (WIFSIGNALED(ranks_[i].status)) {
        pick = i;
        break;
      }
    first_failure_ = pick;
    for (auto& r : ranks_)
      if (r.running) stopped_others_ = true;
    term_at_ = Clock::now();
  }

  /// SIGTERM to the ranks still running once it is time, SIGKILL a grace period later.
  void escalate() {
    if (term_at_ != kNever && kill_at_ == kNever && Clock::now() >= term_at_) {
      kill_running(ranks_, SIGTERM);
      kill_at_ = Clock::now() + grace_;
    }
    if (kill_at_ != kNever && !killed_ && Clock::now() >= kill_at_) {
      kill_running(ranks_, SIGKILL);
      killed_ = true;
    }
  }

  std::vector<Rank>& ranks_;
  const int signal_fd_;
  const std::chrono::milliseconds grace_;
  // Sentinels rather than std::optional, which GCC 12 warns of as maybe uninitialized here.
  static constexpr size_t kNoRank = static_cast<size_t>(-1);
  static constexpr Clock::time_point kNever = Clock::time_point::max();
  size_t first_failure_ = kNoRank;  // index into ranks_
  bool stopped_others_ = false;
  bool interrupted_ = false;
  int stop_signal_ = 0;                 // the first SIGINT/SIGTERM/SIGHUP received
  Clock::time_point term_at_ = kNever;  // SIGTERM the ranks still running then ...
  Clock::time_point kill_at_ = kNever;  // ... and SIGKILL them then
  bool killed_ = false;
};

}  // namespace

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("launch: cannot create a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("launch: cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int max_ranks_per_node() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(kRanksPerCore * cores, runtime::cuda::device_count());
}

LaunchResult launch(const system::LaunchOptions& options) {
  const system::LaunchOptions o = checked(options);
  const std::string where = node_where(o);  // across nodes, a rank's failure names its node and this host
  SignalScope signals;
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc_per_node));
  const pid_t parent = ::getpid();
  for (int i = 0; i < o.nproc_per_node; ++i) {
    try {
      start_rank(o, i, where, parent, ranks[static_cast<size_t>(i)]);
    } catch (...) {
      kill_running(ranks, SIGKILL);
      throw;
    }
  }
  Supervisor supervisor(ranks, signals.fd(), o.grace_s);
  supervisor.run();
  return supervisor.result();
}

}  // namespace ptune::dist
