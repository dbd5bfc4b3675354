#include "measure/load.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <thread>

namespace ptune::measure {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

/// utime + stime of process `pid` (clock ticks) and its parent; false when unreadable.
bool process_times(const std::string& pid, double* ticks, long* ppid) {
  const std::string stat = read_file("/proc/" + pid + "/stat");
  // The command name is in parentheses and may hold spaces: fields start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  std::vector<std::string> f;
  while (in >> field && f.size() < 13) f.push_back(field);
  if (f.size() < 13) return false;  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  *ppid = std::atol(f[1].c_str());
  *ticks = std::atof(f[11].c_str()) + std::atof(f[12].c_str());
  return true;
}

std::string exe_of(const std::string& pid) {
  char buf[4096];
  const ssize_t n = ::readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

/// CPU ticks of this job: this process and its siblings running the same executable.
double job_ticks() {
  double self = 0;
  long parent = 0;
  if (!process_times("self", &self, &parent)) return 0;
  const std::string exe = exe_of("self");
  const std::string me = std::to_string(::getpid());
  double total = self;
  if (parent <= 1 || exe.empty()) return total;
  DIR* dir = ::opendir("/proc");
  if (!dir) return total;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit) || name == me) continue;
    double t = 0;
    long pp = 0;
    if (process_times(name, &t, &pp) && pp == parent && exe_of(name) == exe) total += t;
  }
  ::closedir(dir);
  return total;
}

int64_t online_cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

}  // namespace

LoadSampler::Snapshot LoadSampler::snapshot() {
  Snapshot s;
  std::istringstream in(read_file("/proc/stat"));
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || cpu != "cpu") return s;
  in >> steal;  // absent on very old kernels
  s.busy = user + nice + system + irq + softirq;
  s.steal = steal;
  s.total = s.busy + idle + iowait + steal;
  s.job = job_ticks();
  s.ok = true;
  return s;
}

void LoadSampler::start() {
  start_ = snapshot();
  start_s_ = now_s();
}

LoadReport LoadSampler::stop(int gpu_index) {
  (void)gpu_index;  // the GPU's view needs the driver's management library: not read yet
  LoadReport r;
  r.cores = online_cores();
  r.seconds = now_s() - start_s_;
  const Snapshot end = snapshot();
  if (!start_.ok || !end.ok || end.total <= start_.total) return r;
  r.sampled = true;
  const double total = end.total - start_.total;  // ticks over all CPUs
  const double per_core = total / static_cast<double>(r.cores);
  const double others = std::max(0.0, (end.busy - start_.busy) - (end.job - start_.job));
  r.other_cpu_cores = per_core > 0 ? others / per_core : 0;
  r.steal_pct = 100.0 * (end.steal - start_.steal) / total;
  std::istringstream la(read_file("/proc/loadavg"));
  la >> r.loadavg_1m;
  const LoadThresholds t = load_thresholds(r.cores);
  r.under_load = r.other_cpu_cores >= t.other_cores || r.steal_pct >= t.steal_pct ||
                 (r.gpu_other_processes && *r.gpu_other_processes > 0);
  return r;
}

LoadThresholds load_thresholds(int64_t cores) {
  return {std::max(0.2, 0.1 * static_cast<double>(cores)), 5.0};
}

std::string LoadReport::summary() const {
  if (!sampled) return "load not sampled (no /proc)";
  char buf[200];
  std::snprintf(buf, sizeof buf, "other processes used %.2f of %lld cores, steal %.0f%%, load average %.1f",
                other_cpu_cores, static_cast<long long>(cores), steal_pct, loadavg_1m);
  std::string s = buf;
  if (gpu_other_processes) s += ", " + std::to_string(*gpu_other_processes) + " other processes on the GPU";
  for (const auto& n : gpu_notes) s += ", " + n;
  return s;
}

bool cpu_has_native_bf16(std::string* which) {
  std::istringstream in(read_file("/proc/cpuinfo"));
  std::string line;
  while (std::getline(in, line)) {
    const bool x86 = line.rfind("flags", 0) == 0, arm = line.rfind("Features", 0) == 0;
    if (!x86 && !arm) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) {
      if ((x86 && (w == "avx512_bf16" || w == "amx_bf16")) || (arm && w == "bf16")) {
        if (which) *which = w;
        return true;
      }
    }
    return false;  // the first CPU's flags speak for all
  }
  return false;
}

}  // namespace ptune::measure
