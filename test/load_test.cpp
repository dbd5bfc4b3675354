// The load view (system/load.hpp): the GPU side against a stand-in for NVIDIA's management
// library (test/fake_nvml.cpp, named by PTUNE_NVML_LIBRARY), so that it runs on any machine.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda_support.hpp"
#include "system/job_groups.hpp"
#include "system/load.hpp"
#include "test_util.hpp"

using ptune::system::LoadReport;
using ptune::system::LoadSampler;

namespace {

/// Spins until this process has used `ns` nanoseconds (under a second) of its own CPU time.
void burn_cpu_ns(long ns) {
  timespec t{};
  volatile unsigned long x = 0;
  do {
    for (int i = 0; i < 100000; ++i) x = x + 1;
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  } while (t.tv_sec < 1 && t.tv_nsec < ns);
}

/// Sets environment variables for one test case and puts the old values back after it.
class Env {
 public:
  Env& set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
    return *this;
  }
  Env& unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
    return *this;
  }
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  void save(const std::string& name) {
    const char* v = std::getenv(name.c_str());
    saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

/// The stand-in, with nothing on it: no other process, clocks and reasons "not supported".
void fake_gpu(Env& env) {
  // CUDA reads CUDA_VISIBLE_DEVICES once, when first asked: ask it now, with the machine's own
  // value, before any test case here changes it (on a GPU machine the suite goes on using CUDA).
  (void)ptune::runtime::cuda::available();
  env.set("PTUNE_NVML_LIBRARY", PTUNE_FAKE_NVML)
      .unset("PTUNE_FAKE_NVML_DEVICES")
      .unset("PTUNE_FAKE_NVML_PIDS")
      .unset("PTUNE_FAKE_NVML_SM_MHZ")
      .unset("PTUNE_FAKE_NVML_SM_MAX_MHZ")
      .unset("PTUNE_FAKE_NVML_REASONS")
      .unset("PTUNE_FAKE_NVML_ENTRY_BYTES")
      .unset("CUDA_VISIBLE_DEVICES");
}

/// A function of the stand-in's own (which device it read last, how often it was initialised).
int fake_says(const char* fn) {
  void* handle = ::dlopen(PTUNE_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  auto* f = reinterpret_cast<int (*)()>(::dlsym(handle, fn));
  REQUIRE(f != nullptr);
  const int v = f();
  ::dlclose(handle);
  return v;
}

LoadReport sample(int gpu_index) {
  LoadSampler s;
  s.start(gpu_index);
  return s.stop(gpu_index);
}

/// Whether the CPU side alone puts the report under load (a busy test machine may).
bool cpu_under_load(const LoadReport& r) {
  const auto t = ptune::system::load_thresholds(r.cores);
  return r.sampled && (r.other_cpu_cores >= t.other_cores || r.steal_pct >= t.steal_pct);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

const std::string kSelf = std::to_string(::getpid());

}  // namespace

TEST_CASE("without the driver's management library the load view has no GPU part", "[load]") {
  Env env;
  env.set("PTUNE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  LoadReport r;
  REQUIRE_NOTHROW(r = sample(0));
  CHECK_FALSE(r.gpu_sampled);
  CHECK_FALSE(r.gpu_other_processes);
  CHECK(r.gpu_notes.empty());
  CHECK(r.under_load == cpu_under_load(r));
  CHECK(r.summary().find("GPU") == std::string::npos);
}

TEST_CASE("a CPU row does not ask the driver's management library", "[load]") {
  Env env;
  fake_gpu(env);
  env.set("PTUNE_FAKE_NVML_PIDS", kSelf + ",1");
  const LoadReport r = sample(-1);
  CHECK_FALSE(r.gpu_sampled);
  CHECK_FALSE(r.gpu_other_processes);
}

TEST_CASE("another process on the GPU puts the row under load", "[load]") {
  Env env;
  fake_gpu(env);
  env.set("PTUNE_FAKE_NVML_PIDS", kSelf + ",1");  // init (pid 1) is never one of the job's
  const LoadReport r = sample(0);
  CHECK(r.gpu_sampled);
  REQUIRE(r.gpu_other_processes);
  CHECK(*r.gpu_other_processes == 1);
  CHECK(r.under_load);
  CHECK(r.gpu_notes.empty());
  CHECK(ends_with(r.summary(), ", 1 other process on the GPU"));

  SECTION("more processes than the first buffer holds") {
    std::string pids = kSelf;
    for (int i = 0; i < 40; ++i) pids += "," + std::to_string(4000000 + i);
    env.set("PTUNE_FAKE_NVML_PIDS", pids);
    const LoadReport many = sample(0);
    REQUIRE(many.gpu_other_processes);
    CHECK(*many.gpu_other_processes == 40);
    CHECK(ends_with(many.summary(), ", 40 other processes on the GPU"));
  }
  SECTION("a process seen only at the start counts") {
    LoadSampler s;
    s.start(0);
    env.set("PTUNE_FAKE_NVML_PIDS", kSelf);
    const LoadReport gone = s.stop(0);
    REQUIRE(gone.gpu_other_processes);
    CHECK(*gone.gpu_other_processes == 1);
    CHECK(gone.under_load);
  }
  SECTION("one seen at the start on another GPU does not") {
    LoadSampler s;
    s.start(1);
    env.set("PTUNE_FAKE_NVML_PIDS", kSelf);
    const LoadReport other = s.stop(0);
    REQUIRE(other.gpu_other_processes);
    CHECK(*other.gpu_other_processes == 0);
  }
}

TEST_CASE("the job's own process on the GPU is not load", "[load]") {
  Env env;
  fake_gpu(env);
  env.set("PTUNE_FAKE_NVML_PIDS", kSelf + "," + kSelf);  // listed once per context
  const LoadReport r = sample(0);
  CHECK(r.gpu_sampled);
  REQUIRE(r.gpu_other_processes);
  CHECK(*r.gpu_other_processes == 0);
  CHECK(r.under_load == cpu_under_load(r));
  CHECK(ends_with(r.summary(), ", 0 other processes on the GPU"));
}

TEST_CASE("other GPU processes: the job's are not counted, nor more than are sure where IDs are foreign",
          "[load]") {
  using ptune::system::other_gpu_processes;
  const int64_t self = ::getpid();
  CHECK(other_gpu_processes({}, {self}) == 0);
  CHECK(other_gpu_processes({self, 1, 2}, {self}) == 2);
  CHECK(other_gpu_processes({self, 1, 2}, {self, 2}) == 1);  // 2: a sibling rank
  // This process not listed: another PID namespace's IDs (a container); all but the job's number.
  CHECK(other_gpu_processes({4000001, 4000002, 4000003}, {self, 7}) == 1);
  CHECK(other_gpu_processes({4000001}, {self, 7}) == 0);
}

TEST_CASE("a throttled GPU is noted with its SM clock and reasons, and is not load", "[load]") {
  Env env;
  fake_gpu(env);
  env.set("PTUNE_FAKE_NVML_PIDS", kSelf)
      .set("PTUNE_FAKE_NVML_SM_MHZ", "1410")
      .set("PTUNE_FAKE_NVML_SM_MAX_MHZ", "1980")
      .set("PTUNE_FAKE_NVML_REASONS", "0x4");  // SwPowerCap
  const LoadReport r = sample(0);
  REQUIRE(r.gpu_notes.size() == 1);
  CHECK(r.gpu_notes[0] == "SM clock 1410 of 1980 MHz; throttled: power cap");
  CHECK(r.under_load == cpu_under_load(r));
  CHECK(ends_with(r.summary(),
                  ", 0 other processes on the GPU, SM clock 1410 of 1980 MHz; throttled: power cap"));

  SECTION("several reasons") {
    env.set("PTUNE_FAKE_NVML_REASONS", "0x45");  // GpuIdle, SwPowerCap, HwThermalSlowdown
    CHECK(sample(0).gpu_notes ==
          std::vector<std::string>{
              "SM clock 1410 of 1980 MHz; throttled: power cap and hardware thermal slowdown"});
  }
  SECTION("settings are not slowdowns") {
    env.set("PTUNE_FAKE_NVML_REASONS",
            "0x113");  // GpuIdle, ApplicationsClocksSetting, SyncBoost, DisplayClockSetting
    CHECK(sample(0).gpu_notes.empty());
  }
  SECTION("no clocks where the driver does not tell them") {
    env.unset("PTUNE_FAKE_NVML_SM_MHZ").set("PTUNE_FAKE_NVML_REASONS", "8");
    CHECK(sample(0).gpu_notes == std::vector<std::string>{"throttled: hardware slowdown"});
  }
  SECTION("nothing where it does not tell the reasons") {
    env.unset("PTUNE_FAKE_NVML_REASONS");
    const LoadReport quiet = sample(0);
    CHECK(quiet.gpu_sampled);
    CHECK(quiet.gpu_notes.empty());
  }
}

TEST_CASE("throttle reasons in words", "[load]") {
  using ptune::system::gpu_slowdown_text;
  CHECK(gpu_slowdown_text(0) == "");
  CHECK(gpu_slowdown_text(0x1 | 0x2 | 0x10 | 0x100) == "");
  CHECK(gpu_slowdown_text(0x4) == "power cap");
  CHECK(gpu_slowdown_text(0x8 | 0x20 | 0x80) ==
        "hardware slowdown and software thermal slowdown and power brake");
}

TEST_CASE("CUDA_VISIBLE_DEVICES maps the CUDA index to the driver's device", "[load]") {
  Env env;
  fake_gpu(env);
  env.set("PTUNE_FAKE_NVML_PIDS", kSelf);
  // Which device the stand-in read for CUDA device `cuda_index`; -1 when the view is absent.
  auto read_for = [](int cuda_index) {
    const LoadReport r = sample(cuda_index);
    return r.gpu_sampled ? fake_says("ptune_fake_nvml_read") : -1;
  };
  // (A CUDA machine names its devices by UUID first; the stand-in knows none of those, so
  // the mapping below is what is left, there as here.)
  CHECK(read_for(1) == 1);   // unset: the same index
  CHECK(read_for(4) == -1);  // the stand-in has 4 devices
  env.set("CUDA_VISIBLE_DEVICES", "3,1");
  CHECK(read_for(0) == 3);
  CHECK(read_for(1) == 1);
  CHECK(read_for(2) == -1);
  env.set("CUDA_VISIBLE_DEVICES", "GPU-00000002-1111-2222-3333-444444444444,0");
  CHECK(read_for(0) == 2);
  CHECK(read_for(1) == 0);
  env.set("CUDA_VISIBLE_DEVICES", "GPU-00000003");  // a unique start of a UUID, as CUDA takes
  CHECK(read_for(0) == 3);
  env.set("CUDA_VISIBLE_DEVICES", "GPU-0000000");  // not unique
  CHECK(read_for(0) == -1);
  env.set("CUDA_VISIBLE_DEVICES", "2,x,1");  // CUDA ignores all from the first invalid entry
  CHECK(read_for(0) == 2);
  CHECK(read_for(1) == -1);
  env.set("CUDA_VISIBLE_DEVICES", "");
  CHECK(read_for(0) == -1);
}

TEST_CASE("the driver's management library is initialised once per process", "[load]") {
  Env env;
  fake_gpu(env);
  (void)sample(0);
  (void)sample(0);
  CHECK(fake_says("ptune_fake_nvml_inits") == 1);
}

TEST_CASE("each driver's layout of the process list is read at its own stride", "[load]") {
  // The stand-in built as three drivers' libraries (test/fake_nvml.cpp): a current one (_v3,
  // 24-byte entries), the R535 series' (_v3, 32-byte entries) and an old one (16-byte entries).
  const std::string current = PTUNE_FAKE_NVML;
  REQUIRE(ends_with(current, ".so"));
  const std::string stem = current.substr(0, current.size() - 3);
  for (const std::string& lib : {current, stem + "_r535.so", stem + "_r450.so"}) {
    DYNAMIC_SECTION(lib) {
      Env env;
      fake_gpu(env);
      env.set("PTUNE_NVML_LIBRARY", lib);
      // The job first, then others: a misread stride takes other fields for IDs (1 MiB of
      // memory, MIG's 0xFFFFFFFF) and counts them, or misses the second and third.
      std::string pids = kSelf + ",1";
      // Past the first buffer; IDs below any pid_max (the default is 32768), as the driver's are.
      for (int i = 2; i < 22; ++i) pids += "," + std::to_string(i);
      env.set("PTUNE_FAKE_NVML_PIDS", pids);
      const LoadReport r = sample(0);
      CHECK(r.gpu_sampled);
      REQUIRE(r.gpu_other_processes);
      CHECK(*r.gpu_other_processes == 21);
      env.set("PTUNE_FAKE_NVML_PIDS", kSelf + "," + kSelf);
      const LoadReport alone = sample(0);
      REQUIRE(alone.gpu_other_processes);
      CHECK(*alone.gpu_other_processes == 0);
      // A driver whose entries are not the size its functions suggest: the size that finds the
      // job's own process is taken.
      for (const char* size : {"16", "24", "32"}) {
        INFO("entries of " << size << " bytes");
        env.set("PTUNE_FAKE_NVML_ENTRY_BYTES", size).set("PTUNE_FAKE_NVML_PIDS", pids);
        const LoadReport odd = sample(0);
        REQUIRE(odd.gpu_other_processes);
        CHECK(*odd.gpu_other_processes == 21);
      }
    }
  }
}

TEST_CASE("a job whose parent is init still counts its children as its own", "[load]") {
  // ptune started in the background by a shell that has since exited, or as a container's first
  // process, has init (or no process) for its parent; a row's sides in child processes are still
  // the job's, not competing load. Here: a process that forks the job and exits, so that the job
  // is left to init; the job forks a child (the same executable) and reports whether its own
  // count of the job holds the child.
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t middle = ::fork();
  REQUIRE(middle >= 0);
  if (middle == 0) {
    ::close(report[0]);
    if (::fork() != 0) ::_exit(0);  // the job goes on alone
    ::alarm(20);                    // never left behind
    for (int i = 0; i < 1000 && ::getppid() == middle; ++i) ::usleep(1000);
    const pid_t child = ::fork();
    if (child == 0) {
      ::alarm(20);
      for (;;) ::pause();
    }
    const std::vector<int64_t> job = ptune::system::job_processes().pids();
    const bool counted = std::find(job.begin(), job.end(), child) != job.end();
    const char answer[2] = {counted ? 'y' : 'n', ::getppid() <= 1 ? '1' : 'p'};
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    if (::write(report[1], answer, 2) != 2) ::_exit(1);
    ::_exit(0);
  }
  ::close(report[1]);
  ::waitpid(middle, nullptr, 0);
  pollfd p{report[0], POLLIN, 0};
  REQUIRE(::poll(&p, 1, 15000) == 1);
  char answer[2] = {0, 0};
  REQUIRE(::read(report[0], answer, 2) == 2);
  ::close(report[0]);
  if (answer[1] != '1')
    WARN(
        "the job's parent was not init when it counted (a subreaper, or left late): its siblings counted "
        "too");
  CHECK(answer[0] == 'y');
}

TEST_CASE("a program's process in a session of its own is the job's while its group is owned", "[load]") {
  // A launcher's ranks (torchrun starts them with setsid) are in groups and sessions of their
  // own: they descend from the group's leader, the process ptune started.
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t leader = ::fork();
  REQUIRE(leader >= 0);
  if (leader == 0) {
    ::setpgid(0, 0);
    const pid_t rank = ::fork();
    if (rank == 0) {
      ::setsid();
      ::alarm(20);
      for (;;) ::pause();
    }
    (void)!::write(report[1], &rank, sizeof rank);
    ::alarm(20);
    for (;;) ::pause();
  }
  ::setpgid(leader, leader);
  pid_t rank = 0;
  REQUIRE(::read(report[0], &rank, sizeof rank) == static_cast<ssize_t>(sizeof rank));
  const auto counted = [rank] {
    const std::vector<int64_t> job = ptune::system::job_processes().pids();
    return std::find(job.begin(), job.end(), rank) != job.end();
  };
  CHECK(!counted());
  ptune::system::own_process_group(leader, true);
  CHECK(counted());
  ptune::system::own_process_group(leader, false);
  CHECK(!counted());
  ::kill(rank, SIGKILL);
  ::kill(-leader, SIGKILL);
  ::waitpid(leader, nullptr, 0);
  ::close(report[0]);
  ::close(report[1]);
}

TEST_CASE("a span too short for /proc's CPU time counters is not sampled, and says so", "[load]") {
  using ptune::system::min_load_span_s;
  // Derived (load.hpp): a tick per CPU and per process at most half of each threshold.
  CHECK(min_load_span_s(2, 1, 100) == Approx(0.4));   // the steal bound: 40 ticks a core
  CHECK(min_load_span_s(2, 9, 100) == Approx(1.1));   // 2 x 11 ticks over the 0.2-core threshold
  CHECK(min_load_span_s(64, 1, 100) == Approx(0.4));  // 2 x 65 / 6.4 = 20 ticks: the steal bound
  CHECK(min_load_span_s(2, 1, 1000) == Approx(0.04));
  const LoadReport now = sample(-1);  // microseconds
  CHECK_FALSE(now.sampled);
  CHECK_FALSE(now.under_load);
  const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // At least one process's bound: other tests of this executable that ctest runs beside it are
  // this job's siblings and raise it.
  CHECK(now.min_seconds >= min_load_span_s(now.cores, 1, ticks_per_s) - 1e-12);
  // (The span itself is how long the sampler's two looks took: microseconds, more on a loaded machine.)
  CHECK(now.summary().rfind("load not sampled (", 0) == 0);
  CHECK(now.summary().find(" ms, too short for /proc's CPU time counters: at least 0.") != std::string::npos);
  // Long enough, with room for a few more of the job's processes appearing meanwhile: sampled
  // (under load or not, as this machine is).
  const size_t job = ptune::system::job_processes().processes.size();
  LoadSampler s;
  s.start();
  std::this_thread::sleep_for(
      std::chrono::duration<double>(1.5 * min_load_span_s(now.cores, job + 4, ticks_per_s)));
  const LoadReport r = s.stop();
  CHECK(r.sampled);
  CHECK(r.summary().rfind("other processes used ", 0) == 0);
}

TEST_CASE("a child that has ended keeps its CPU time in the job's, before and after it is waited for",
          "[load]") {
  // A row's processes may end within a span (the previous row's, ended after it): their time
  // must not drop out of the job's, or it would read as other processes' load.
  using ptune::system::job_processes;
  const auto before = job_processes();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // half a second of its own CPU time, then ends
    ::alarm(20);
    burn_cpu_ns(500000000L);
    ::_exit(0);
  }
  // Ended, not yet waited for: still listed, with its time.
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  const auto ended = job_processes();
  const std::vector<int64_t> pids = ended.pids();
  CHECK(std::find(pids.begin(), pids.end(), child) != pids.end());
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  const auto after = job_processes();
  const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // 0.5 s of the child's, less a tick of rounding at each end; the test's own time only adds.
  CHECK(ended.ticks_since(before) >= 0.5 * ticks_per_s - 2);
  CHECK(after.ticks_since(before) >= 0.5 * ticks_per_s - 2);
  // Waiting moves the child's time into this process's, tick for tick.
  CHECK(after.ticks_since(ended) >= 0);
}

TEST_CASE("the job's time since a moment counts each process's own, whichever have ended or started",
          "[load]") {
  ptune::system::JobProcesses earlier, now;
  earlier.processes = {{100, 100, false}, {7, 50, false}, {8, 30, true}, {9, 10, true}};
  // Since: this process ran 5 ticks and waited for child 8, which ran 15 more (45 in all);
  // sibling 7 ended; child 9 ran 10; child 10 started and ran 5.
  now.processes = {{100, 100 + 5 + 45, false}, {9, 20, true}, {10, 5, true}};
  CHECK(now.ticks_since(earlier) == Approx(5 + 15 + 10 + 5));
  CHECK(now.pids() == std::vector<int64_t>{100, 9, 10});
  CHECK(earlier.ticks_since(earlier) == 0);
}

TEST_CASE("a sibling that ends within a span takes none of its time out of the job's", "[load]") {
  // Two ranks of one launch (here: two children of one process, running this executable); one
  // that has used CPU time ends between two looks of the other. Before, the job's time fell by
  // all of the ended one's, which read as other processes' load.
  int ready[2], go[2], result[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  REQUIRE(::pipe(result) == 0);
  const pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    ::alarm(30);
    const pid_t burner = ::fork();
    if (burner == 0) {  // 0.3 s of CPU time, then waits to be told to end
      ::alarm(30);
      burn_cpu_ns(300000000L);
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(1);
      ::_exit(0);
    }
    const pid_t looker = ::fork();
    if (looker == 0) {
      ::alarm(30);
      char c = 0;
      if (::read(ready[0], &c, 1) != 1) ::_exit(1);
      const auto before = ptune::system::job_processes();
      double burner_ticks = -1;
      for (const auto& p : before.processes)
        if (p.pid == burner) burner_ticks = p.ticks;
      if (::write(go[1], &c, 1) != 1) ::_exit(1);
      for (int i = 0; i < 5000 && ::kill(burner, 0) == 0; ++i) ::usleep(1000);  // until waited for
      const double since = ptune::system::job_processes().ticks_since(before);
      const std::string line = std::to_string(burner_ticks) + " " + std::to_string(since) + "\n";
      if (::write(result[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(1);
      ::_exit(0);
    }
    ::waitpid(burner, nullptr, 0);
    ::waitpid(looker, nullptr, 0);
    ::_exit(0);
  }
  ::close(result[1]);
  ::waitpid(parent, nullptr, 0);
  char buf[128] = {0};
  pollfd p{result[0], POLLIN, 0};
  REQUIRE(::poll(&p, 1, 15000) == 1);
  REQUIRE(::read(result[0], buf, sizeof buf - 1) > 0);
  for (int fd : {ready[0], ready[1], go[0], go[1], result[0]}) ::close(fd);
  double burner_ticks = -1, since = -1e9;
  REQUIRE(std::sscanf(buf, "%lf %lf", &burner_ticks, &since) == 2);
  const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  INFO("the ended sibling's ticks " << burner_ticks << ", the job's since " << since);
  CHECK(burner_ticks >= 0.3 * ticks_per_s / 2);  // it was one of the job's, with its time
  CHECK(since >= 0);
}
