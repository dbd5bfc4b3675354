#include "system/load.hpp"
#include "system/job_groups.hpp"
#include "system/proc_stat.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace ptune::system {
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

/// One process's /proc/<pid>/stat: its command name, state, parent, group, and utime + stime
/// (clock ticks; with `reaped`, also cutime + cstime: its children's that it has waited for).
struct ProcessStat {
  std::string comm;  // the executable's name, at most 15 characters; kept by an ended process
  char state = '?';
  long ppid = 0;
  long pgrp = 0;
  double ticks = 0;
};

std::mutex g_groups_mu;
std::set<int64_t> g_groups;  // own_process_group()'s

/// False when unreadable.
bool process_stat(const std::string& pid, ProcessStat* out, bool reaped = false) {
  system::ProcStat st;
  if (!system::read_proc_stat(pid, &st)) return false;
  out->comm = st.comm;
  out->state = st.state;
  out->ppid = st.ppid;
  out->pgrp = st.pgrp;
  out->ticks = static_cast<double>(st.ticks() + (reaped ? st.cutime + st.cstime : 0));
  return true;
}

std::string exe_of(const std::string& pid) {
  char buf[4096];
  const ssize_t n = ::readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

std::vector<int64_t> JobProcesses::pids() const {
  std::vector<int64_t> pids;
  for (const Process& p : processes) pids.push_back(p.pid);
  return pids;
}

double JobProcesses::ticks_since(const JobProcesses& earlier) const {
  std::map<int64_t, const Process*> before;
  for (const Process& p : earlier.processes) before[p.pid] = &p;
  double ticks = 0;
  for (const Process& p : processes) {
    const auto it = before.find(p.pid);
    ticks += p.ticks - (it == before.end() ? 0.0 : it->second->ticks);
    if (it != before.end()) before.erase(it);
  }
  // Ended since: a child's whole time is now in this process's (waited for; until then it is
  // still listed); a sibling's time since `earlier` is unknown, and none of its time counts.
  for (const auto& [pid, p] : before)
    if (p->child) ticks -= p->ticks;
  return ticks;
}

void own_process_group(int64_t pgid, bool own) {
  std::lock_guard<std::mutex> lock(g_groups_mu);
  if (own)
    g_groups.insert(pgid);
  else
    g_groups.erase(pgid);
}

namespace {

/// The processes of /proc now, each with its stat; unreadable ones left out.
std::vector<std::pair<std::string, ProcessStat>> all_processes() {
  std::vector<std::pair<std::string, ProcessStat>> all;
  DIR* dir = ::opendir("/proc");
  if (!dir) return all;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    ProcessStat p;
    if (process_stat(name, &p)) all.emplace_back(name, p);
  }
  ::closedir(dir);
  return all;
}

/// The pids of `all` that are processes of an owned group or descend from its leader (the process
/// ptune started), whatever session or group they are in.
std::set<long> owned_processes(const std::vector<std::pair<std::string, ProcessStat>>& all,
                               const std::set<int64_t>& groups) {
  std::set<long> owned(groups.begin(), groups.end());
  for (const auto& [name, p] : all)
    if (groups.count(p.pgrp)) owned.insert(std::atol(name.c_str()));
  for (bool grew = true; grew;) {  // until no new descendant appears (parents may come later in /proc)
    grew = false;
    for (const auto& [name, p] : all)
      if (owned.count(p.ppid) && owned.insert(std::atol(name.c_str())).second) grew = true;
  }
  return owned;
}

}  // namespace

JobProcesses job_processes() {
  std::set<int64_t> groups;
  {
    std::lock_guard<std::mutex> lock(g_groups_mu);
    groups = g_groups;
  }
  JobProcesses job;
  const int64_t me = ::getpid();
  job.processes.push_back({me, 0, false});
  // Its children's time stays the job's once they have ended and been waited for (a row's
  // processes ended within a span; a dead thread's time is in the process's own already).
  ProcessStat self;
  if (!process_stat("self", &self, /*reaped=*/true)) return job;
  const std::string exe = exe_of("self");
  job.processes[0].ticks = self.ticks;
  if (exe.empty()) return job;
  // A parent of 0 or 1 is none of the job's: ptune is then the container's first process, or
  // was left to init (started in the background by a shell that has exited); its children
  // are still its own.
  const long parent = self.ppid;
  const bool siblings = parent > 1;
  const auto all = all_processes();
  const std::set<long> owned = owned_processes(all, groups);
  for (const auto& [name, p] : all) {
    const long pid = std::atol(name.c_str());
    if (pid == me) continue;
    ProcessStat reaped;
    if (owned.count(pid)) {  // a program instance's: its ended processes' time is in their parent's
      if (process_stat(name, &reaped, /*reaped=*/true)) job.processes.push_back({pid, reaped.ticks, true});
      continue;
    }
    const bool child = p.ppid == me;
    // Its siblings (the ranks of one launch) and its children (a row's sides in child processes);
    // a child that has ended and is not yet waited for no longer names its executable (its
    // command name is matched instead), and its time moves into this process's only when it is.
    const bool same = exe_of(name) == exe || (child && p.state == 'Z' && p.comm == self.comm);
    if (((siblings && p.ppid == parent) || child) && same) job.processes.push_back({pid, p.ticks, child});
  }
  return job;
}

namespace {

int64_t online_cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

// NVIDIA's management library (NVML), declared here from its API reference (nvml.h) rather
// than included, so that ptune builds without the header and runs without the driver: only
// the few types and functions read below. Every function returns an nvmlReturn_t.
namespace nvml {
using Return = int;                      // nvmlReturn_t
constexpr Return kSuccess = 0;           // NVML_SUCCESS
constexpr Return kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
struct DeviceSt;
using Device = DeviceSt*;    // nvmlDevice_t
constexpr int kClockSm = 1;  // NVML_CLOCK_SM (an nvmlClockType_t, an enum)
// The entries nvmlDeviceGetComputeRunningProcesses* fill all begin with the process ID (an
// unsigned int) and differ in size, which nvml.h has changed under one function name:
// nvmlProcessInfo_v1_t {pid, usedGpuMemory} is 16 bytes (the unversioned function);
// nvmlProcessInfo_v2_t adds {gpuInstanceId, computeInstanceId}: 24 bytes (_v2, and _v3 on most
// drivers); nvmlProcessInfo_v3_t adds usedGpuCcProtectedMemory: 32 bytes, what _v3 fills on the
// drivers that have confidential computing's nvmlDeviceGetConfComputeMemSizeInfo but not yet
// nvmlDeviceGetRunningProcessDetailList (the R535 series; later ones went back to v2 for _v3).
// The entries are read at their stride from a buffer sized for the largest, so a wrong guess
// can misread IDs but never overruns the buffer.
constexpr size_t kProcessInfoV1Size = 16, kProcessInfoV2Size = 24, kProcessInfoV3Size = 32;
constexpr unsigned kUuidBuffer = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

/// The functions found in one loaded copy of the library; a missing one drops its piece.
struct Library {
  Return (*count)(unsigned int*) = nullptr;                     // nvmlDeviceGetCount_v2
  Return (*by_index)(unsigned int, Device*) = nullptr;          // nvmlDeviceGetHandleByIndex_v2
  Return (*by_uuid)(const char*, Device*) = nullptr;            // nvmlDeviceGetHandleByUUID
  Return (*uuid)(Device, char*, unsigned int) = nullptr;        // nvmlDeviceGetUUID
  Return (*processes)(Device, unsigned int*, void*) = nullptr;  // ..._v3, ..._v2, or the first
  size_t process_info_size = kProcessInfoV2Size;                // the stride of its entries
  Return (*clock)(Device, int, unsigned int*) = nullptr;        // nvmlDeviceGetClockInfo
  Return (*max_clock)(Device, int, unsigned int*) = nullptr;    // nvmlDeviceGetMaxClockInfo
  Return (*reasons)(Device, unsigned long long*) = nullptr;  // ...ClocksEventReasons, else ...ThrottleReasons
  // nvmlDeviceGetProcessUtilization: samples of each process's SM use since a CPU timestamp (us).
  Return (*utilization)(Device, void*, unsigned int*, unsigned long long) = nullptr;
};

/// nvmlProcessUtilizationSample_t: {unsigned int pid; unsigned long long timeStamp (CPU time, us);
/// unsigned int smUtil, memUtil, encUtil, decUtil}: 32 bytes with the padding after pid.
struct UtilizationSample {
  unsigned int pid;
  unsigned long long time_us;
  unsigned int sm, memory, encoder, decoder;
};
static_assert(sizeof(UtilizationSample) == 32, "nvmlProcessUtilizationSample_t is 32 bytes");

/// Points `fn` at the first of `names` the library has; false when it has none.
template <typename F>
bool resolve(void* handle, F* fn, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (void* p = ::dlsym(handle, name)) {
      *fn = reinterpret_cast<F>(p);
      return true;
    }
  return false;
}

/// Opens and initialises `file`; nullptr when it cannot be loaded or nvmlInit fails.
std::unique_ptr<Library> load_library(const std::string& file) {
  // Never closed, nor nvmlShutdown called: the driver's library stays for the process's life,
  // as every row asks it again, and closing it while another thread asks would crash.
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return nullptr;
  Return (*init)() = nullptr;
  resolve(handle, &init, {"nvmlInit_v2", "nvmlInit"});
  if (!init || init() != kSuccess) return nullptr;
  auto lib = std::make_unique<Library>();
  resolve(handle, &lib->count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  resolve(handle, &lib->by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  resolve(handle, &lib->by_uuid, {"nvmlDeviceGetHandleByUUID"});
  resolve(handle, &lib->uuid, {"nvmlDeviceGetUUID"});
  if (resolve(handle, &lib->processes, {"nvmlDeviceGetComputeRunningProcesses_v3"})) {
    if (::dlsym(handle, "nvmlDeviceGetConfComputeMemSizeInfo") &&
        !::dlsym(handle, "nvmlDeviceGetRunningProcessDetailList"))
      lib->process_info_size = kProcessInfoV3Size;
  } else if (!resolve(handle, &lib->processes, {"nvmlDeviceGetComputeRunningProcesses_v2"}) &&
             resolve(handle, &lib->processes, {"nvmlDeviceGetComputeRunningProcesses"})) {
    lib->process_info_size = kProcessInfoV1Size;
  }
  resolve(handle, &lib->clock, {"nvmlDeviceGetClockInfo"});
  resolve(handle, &lib->max_clock, {"nvmlDeviceGetMaxClockInfo"});
  resolve(handle, &lib->reasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  resolve(handle, &lib->utilization, {"nvmlDeviceGetProcessUtilization"});
  return lib;
}

/// The library, loaded and initialised once per process (per file name: the tests switch
/// PTUNE_NVML_LIBRARY between cases); nullptr where there is none.
const Library* library() {
  const char* env = std::getenv("PTUNE_NVML_LIBRARY");
  const std::string file = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  static std::mutex mutex;
  static auto* loaded =
      new std::map<std::string, std::unique_ptr<Library>>();  // never freed: see load_library()
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded->find(file);
  if (it == loaded->end()) it = loaded->emplace(file, load_library(file)).first;
  return it->second.get();
}

/// The device whose UUID starts with `prefix` (CUDA takes a unique prefix of a UUID too).
Device by_uuid(const Library& lib, const std::string& prefix) {
  Device d = nullptr;
  if (lib.by_uuid && lib.by_uuid(prefix.c_str(), &d) == kSuccess) return d;
  unsigned int n = 0;
  if (!lib.count || !lib.by_index || !lib.uuid || lib.count(&n) != kSuccess) return nullptr;
  Device found = nullptr;
  for (unsigned int i = 0; i < n; ++i) {
    char uuid[kUuidBuffer] = {};
    if (lib.by_index(i, &d) != kSuccess || lib.uuid(d, uuid, kUuidBuffer) != kSuccess) continue;
    if (std::string(uuid).rfind(prefix, 0) != 0) continue;
    if (found) return nullptr;  // ambiguous
    found = d;
  }
  return found;
}

/// The library's device for CUDA device `cuda_index`. LibTorch numbers the devices CUDA shows,
/// the library all of the machine's. The CUDA runtime's UUID of the device names it exactly
/// (whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say); without it (a build without
/// CUDA, or an older driver) CUDA_VISIBLE_DEVICES maps: its `cuda_index`-th entry, an index or
/// a UUID ("GPU-...", "MIG-...", or a unique start of one), up to its first entry that is
/// neither (CUDA ignores the rest); unset, the index is the library's. An index is then the
/// same device where CUDA_DEVICE_ORDER=PCI_BUS_ID or the GPUs are alike (CUDA's default order
/// is fastest first, the library's by PCI bus). nullptr when none.
Device device_of(const Library& lib, int cuda_index, const std::string& u) {
  if (!u.empty()) {
    Device d = nullptr;
    for (const char* kind : {"GPU-", "MIG-"})
      if (lib.by_uuid && lib.by_uuid((kind + u).c_str(), &d) == kSuccess) return d;
  }
  std::string entry = std::to_string(cuda_index);
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::vector<std::string> entries;
    std::istringstream in(visible);
    std::string e;
    while (std::getline(in, e, ',')) {
      e.erase(0, e.find_first_not_of(" \t"));
      e.erase(e.find_last_not_of(" \t") + 1);
      const bool index = !e.empty() && std::all_of(e.begin(), e.end(), ::isdigit);
      const bool uuid = e.rfind("GPU-", 0) == 0 || e.rfind("MIG-", 0) == 0;
      if (!index && !uuid) break;
      entries.push_back(e);
    }
    if (cuda_index >= static_cast<int>(entries.size())) return nullptr;
    entry = entries[static_cast<size_t>(cuda_index)];
  }
  if (!std::isdigit(static_cast<unsigned char>(entry[0]))) return by_uuid(lib, entry);
  Device d = nullptr;
  if (!lib.by_index || entry.size() > 9) return nullptr;
  return lib.by_index(static_cast<unsigned int>(std::stoul(entry)), &d) == kSuccess ? d : nullptr;
}

/// The process IDs of the device's compute processes; nullopt where the library does not tell.
/// Read at the library's entry size, unless that reading does not look right and another does:
/// right is every ID a possible process ID (a misread takes memory sizes, MIG's 0xFFFFFFFF or
/// the zeros past the list for IDs) and one of them the job's (which holds a context on the
/// device). So a driver that fills entries of another size than its functions suggest is read
/// right all the same, where its IDs are this PID namespace's.
std::optional<std::vector<int64_t>> process_ids(const Library& lib, Device d,
                                                const std::vector<int64_t>& job) {
  if (!lib.processes) return std::nullopt;
  const size_t stride = lib.process_info_size;
  size_t capacity = 16;                            // entries
  for (int attempt = 0; attempt < 4; ++attempt) {  // processes may start between two calls
    // Room for `capacity` of the largest entries, 8-byte aligned (usedGpuMemory).
    std::vector<unsigned long long> buffer(capacity * kProcessInfoV3Size / sizeof(unsigned long long));
    unsigned int n = static_cast<unsigned int>(capacity);
    const Return r = lib.processes(d, &n, buffer.data());
    if (r == kSuccess) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(buffer.data());
      auto read = [&](size_t size) {
        std::vector<int64_t> pids;
        for (size_t i = 0; i < n && i < capacity; ++i) {
          unsigned int pid = 0;
          std::memcpy(&pid, bytes + i * size, sizeof pid);
          pids.push_back(pid);
        }
        return pids;
      };
      static const int64_t pid_max = [] {
        int64_t v = 0;
        std::ifstream("/proc/sys/kernel/pid_max") >> v;
        return v > 0 ? v : int64_t{4194304};  // Linux's largest
      }();
      auto right = [&](const std::vector<int64_t>& pids) {
        return std::all_of(pids.begin(), pids.end(), [](int64_t p) { return p > 0 && p <= pid_max; }) &&
               std::any_of(pids.begin(), pids.end(),
                           [&](int64_t p) { return std::find(job.begin(), job.end(), p) != job.end(); });
      };
      std::vector<int64_t> pids = read(stride);
      if (n > 0 && !right(pids))
        for (size_t size : {kProcessInfoV2Size, kProcessInfoV3Size, kProcessInfoV1Size})
          if (size != stride)
            if (std::vector<int64_t> other = read(size); right(other)) return other;
      return pids;
    }
    if (r != kInsufficientSize) return std::nullopt;
    capacity = 2 * std::max<size_t>(n, capacity);
  }
  return std::nullopt;
}

std::optional<int64_t> other_processes(const Library& lib, Device d, const std::vector<int64_t>& job) {
  const std::optional<std::vector<int64_t>> pids = process_ids(lib, d, job);
  if (!pids) return std::nullopt;
  return other_gpu_processes(*pids, job);
}

/// "SM clock 1410 of 1980 MHz; throttled: power cap" while a slowdown holds the clocks down,
/// else "".
std::string clock_note(const Library& lib, Device d) {
  unsigned long long reasons = 0;
  if (!lib.reasons || lib.reasons(d, &reasons) != kSuccess) return "";
  const std::string slowdown = gpu_slowdown_text(reasons);
  if (slowdown.empty()) return "";
  unsigned int sm = 0, max = 0;
  std::string note;
  if (lib.clock && lib.max_clock && lib.clock(d, kClockSm, &sm) == kSuccess &&
      lib.max_clock(d, kClockSm, &max) == kSuccess && max > 0)
    note = "SM clock " + std::to_string(sm) + " of " + std::to_string(max) + " MHz; ";
  return note + "throttled: " + slowdown;
}

}  // namespace nvml

/// The other processes on CUDA device `gpu_index` now; nullopt where the library does not tell.
std::optional<int64_t> gpu_others_now(int gpu_index, const std::string& uuid,
                                      const std::vector<int64_t>& job) {
  try {
    const nvml::Library* lib = nvml::library();
    if (!lib) return std::nullopt;
    const nvml::Device d = nvml::device_of(*lib, gpu_index, uuid);
    if (!d) return std::nullopt;
    return nvml::other_processes(*lib, d, job);
  } catch (...) {
    return std::nullopt;
  }
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
  s.job = job_processes();
  s.ok = true;
  return s;
}

void LoadSampler::start(int gpu_index, const std::string& gpu_uuid) {
  start_ = snapshot();
  start_gpu_ = gpu_index;
  start_gpu_uuid_ = gpu_uuid;
  start_gpu_others_.reset();
  if (gpu_index >= 0)
    start_gpu_others_ =
        gpu_others_now(gpu_index, gpu_uuid, (start_.ok ? start_.job : job_processes()).pids());
  start_s_ = now_s();
}

LoadReport LoadSampler::stop(int gpu_index) {
  LoadReport r;
  r.cores = online_cores();
  r.seconds = now_s() - start_s_;
  const Snapshot end = snapshot();
  if (start_.ok && end.ok) {
    const double total = end.total - start_.total;  // ticks over all CPUs
    const double per_core = total / static_cast<double>(r.cores);
    static const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
    r.min_seconds = min_load_span_s(r.cores, std::max(start_.job.processes.size(), end.job.processes.size()),
                                    ticks_per_s);
    if (total > 0 && per_core >= r.min_seconds * ticks_per_s) {
      r.sampled = true;
      const double others = std::max(0.0, (end.busy - start_.busy) - end.job.ticks_since(start_.job));
      r.other_cpu_cores = others / per_core;
      r.steal_pct = 100.0 * (end.steal - start_.steal) / total;
      std::istringstream la(read_file("/proc/loadavg"));
      la >> r.loadavg_1m;
    }
  }
  if (gpu_index >= 0) {
    try {
      if (const nvml::Library* lib = nvml::library())
        if (const nvml::Device d =
                nvml::device_of(*lib, gpu_index, gpu_index == start_gpu_ ? start_gpu_uuid_ : "")) {
          r.gpu_sampled = true;
          r.gpu_other_processes = nvml::other_processes(*lib, d, (end.ok ? end.job : job_processes()).pids());
          // A process may have come and gone within the row: the more of the two samples.
          if (gpu_index == start_gpu_ && start_gpu_others_)
            r.gpu_other_processes = std::max(r.gpu_other_processes.value_or(0), *start_gpu_others_);
          if (std::string note = nvml::clock_note(*lib, d); !note.empty())
            r.gpu_notes.push_back(std::move(note));
        }
    } catch (...) {
      // The view is what was read before the failure (an allocation); never an error.
    }
  }
  // A throttled GPU is the GPU's own state, not competing load: its note flags the row apart.
  const LoadThresholds t = load_thresholds(r.cores);
  r.under_load = (r.sampled && (r.other_cpu_cores >= t.other_cores || r.steal_pct >= t.steal_pct)) ||
                 (r.gpu_other_processes && *r.gpu_other_processes > 0);
  return r;
}

std::optional<double> gpu_busy_of(const std::vector<int64_t>& pids, uint64_t since_us) {
  using namespace nvml;
  const Library* lib = library();
  unsigned int devices = 0;
  if (!lib || !lib->utilization || !lib->count || !lib->by_index || lib->count(&devices) != kSuccess)
    return std::nullopt;
  std::optional<double> busiest;
  for (unsigned int i = 0; i < devices; ++i) {
    Device d = nullptr;
    if (lib->by_index(i, &d) != kSuccess) continue;
    unsigned int n = 0;
    Return r = lib->utilization(d, nullptr, &n, since_us);  // how many samples there are
    if ((r != kSuccess && r != kInsufficientSize) || n == 0) continue;
    std::vector<UtilizationSample> samples(n + 8);  // room for samples taken between the calls
    n = static_cast<unsigned int>(samples.size());
    if (lib->utilization(d, samples.data(), &n, since_us) != kSuccess) continue;
    // The processes' SM use summed per sampling time, then averaged over the times.
    std::map<unsigned long long, double> at;
    for (unsigned int k = 0; k < n && k < samples.size(); ++k) {
      const UtilizationSample& u = samples[k];
      if (u.time_us <= since_us || std::find(pids.begin(), pids.end(), int64_t{u.pid}) == pids.end())
        continue;
      at[u.time_us] = std::min(100.0, at[u.time_us] + u.sm);
    }
    if (at.empty()) continue;
    double sum = 0;
    for (const auto& [t, v] : at) sum += v;
    busiest = std::max(busiest.value_or(0.0), sum / static_cast<double>(at.size()));
  }
  return busiest;
}

int64_t other_gpu_processes(const std::vector<int64_t>& listed, const std::vector<int64_t>& job) {
  const std::set<int64_t> pids(listed.begin(), listed.end());  // a process may be listed once per context
  if (!pids.count(static_cast<int64_t>(::getpid())))
    return std::max<int64_t>(0, static_cast<int64_t>(pids.size()) - static_cast<int64_t>(job.size()));
  int64_t others = 0;
  for (int64_t p : pids) others += std::find(job.begin(), job.end(), p) == job.end();
  return others;
}

std::string gpu_slowdown_text(uint64_t reasons) {
  // nvml.h's nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*).
  static const std::pair<uint64_t, const char*> kSlowdowns[] = {
      {0x4, "power cap"},                   // SwPowerCap
      {0x8, "hardware slowdown"},           // HwSlowdown: temperature, power brake or power draw
      {0x20, "software thermal slowdown"},  // SwThermalSlowdown
      {0x40, "hardware thermal slowdown"},  // HwThermalSlowdown
      {0x80, "power brake"},                // HwPowerBrakeSlowdown
  };
  std::string s;
  for (const auto& [bit, name] : kSlowdowns)
    if (reasons & bit) s += (s.empty() ? "" : " and ") + std::string(name);
  return s;
}

LoadThresholds load_thresholds(int64_t cores) {
  return {std::max(0.2, 0.1 * static_cast<double>(cores)), 5.0};
}

double min_load_span_s(int64_t cores, size_t job_processes, double ticks_per_s) {
  const LoadThresholds t = load_thresholds(cores);
  const double c = static_cast<double>(std::max<int64_t>(cores, 1));
  const double per_core_ticks =
      std::max(2.0 * (c + static_cast<double>(job_processes)) / t.other_cores, 2.0 * 100.0 / t.steal_pct);
  return per_core_ticks / std::max(ticks_per_s, 1.0);
}

std::string LoadReport::summary() const {
  std::string s = "load not sampled (no /proc)";
  if (!sampled && min_seconds > 0) {
    char span[40], buf[200];
    if (seconds < 0.1)
      std::snprintf(span, sizeof span, "%.1f ms", seconds * 1e3);
    else
      std::snprintf(span, sizeof span, "%.2f s", seconds);
    std::snprintf(buf, sizeof buf,
                  "load not sampled (%s, too short for /proc's CPU time counters: at least %.2f s here)",
                  span, min_seconds);
    s = buf;
  }
  if (sampled) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "other processes used %.2f of %lld cores, steal %.0f%%, load average %.1f",
                  other_cpu_cores, static_cast<long long>(cores), steal_pct, loadavg_1m);
    s = buf;
  }
  if (gpu_other_processes)
    s += ", " + std::to_string(*gpu_other_processes) +
         (*gpu_other_processes == 1 ? " other process" : " other processes") + " on the GPU";
  for (const auto& n : gpu_notes) s += ", " + n;
  return s;
}

}  // namespace ptune::system
