#pragma once
/// What else ran on the machine while a row was measured: other processes' CPU time, the
/// hypervisor's steal time and the load average (Linux, from /proc), and on a GPU the other
/// processes on the device, its clocks and throttle reasons where the driver's management
/// library (NVML, libnvidia-ml.so.1, loaded at run time) tells. A row measured under competing
/// load is flagged in every output format, and so is a throttled GPU.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ptune::system {

/// The load seen over one span of time.
struct LoadReport {
  bool sampled = false;        // /proc was read (Linux) over a span its counters resolve
  double seconds = 0;          // the span
  double min_seconds = 0;      // when > 0: the shortest span the counters resolve here (min_load_span_s)
  int64_t cores = 0;           // online CPUs
  double other_cpu_cores = 0;  // CPU time of other processes per second of the span (cores)
  double steal_pct = 0;        // % of the machine's CPU time taken by the hypervisor
  double loadavg_1m = 0;       // the 1-minute load average at the end
  bool gpu_sampled = false;    // the driver's management library answered for this GPU
  std::optional<int64_t> gpu_other_processes;  // other processes on this GPU (driver permitting)
  std::vector<std::string> gpu_notes;          // e.g. "SM clock 1410 of 1980 MHz; throttled: power cap"
  bool under_load = false;  // competing load: see load_thresholds(); a throttled GPU is not load
  /// One line: "other processes used 0.93 of 2 cores, steal 0%, load average 2.1", then the
  /// GPU's view when read: ", 1 other process on the GPU, SM clock 1410 of 1980 MHz; throttled:
  /// power cap".
  std::string summary() const;
};

/// The processes of this job, with their CPU ticks so far: this one (first), its children
/// running the same executable (a row's sides in child processes; one that has ended and is not
/// yet waited for too) and, where its parent is not init, its siblings running it (the other
/// ranks of `ptune launch` or torchrun on this machine). Only this one, with 0 ticks, when /proc
/// cannot be read. Throws nothing.
struct JobProcesses {
  struct Process {
    int64_t pid = 0;
    double ticks = 0;    // utime + stime; this process's own also holds its waited-for children's
    bool child = false;  // this process's child: its time moves into this one's when waited for
  };
  std::vector<Process> processes;  // this one first
  std::vector<int64_t> pids() const;
  /// The job's CPU time since `earlier` (ticks), process by process, so that a process ending
  /// within the span takes none of its time out of the job's: a child's whole time is in this
  /// one's once waited for (its ticks at `earlier` are taken off), a sibling's last ticks are
  /// unknown (none of its time counts); a process that started since counts all of its own.
  double ticks_since(const JobProcesses& earlier) const;
};
JobProcesses job_processes();

/// Counts CPU time from start() to stop(). The job's own processes (job_processes: this process,
/// its children and its siblings running the same executable) do not count as load.
///
/// On a GPU (`gpu_index`, the CUDA device index as LibTorch numbers it) it also asks NVIDIA's
/// management library, loaded once per process with dlopen (PTUNE_NVML_LIBRARY names another
/// file: a driver installed elsewhere, or the tests' stand-in), for the compute processes on the
/// device at start and at stop, and at stop for the SM clock and the throttle reasons. Without
/// the library, or where it cannot answer, the GPU's view is simply absent.
class LoadSampler {
 public:
  /// Starts counting; `gpu_index` >= 0 also lists the processes on that GPU, found in the
  /// driver's library by `gpu_uuid` (the CUDA runtime's UUID of the device,
  /// runtime::cuda::device_uuid) or, without one, through CUDA_VISIBLE_DEVICES. Never throws.
  void start(int gpu_index = -1, const std::string& gpu_uuid = "");
  /// The load since start(); `gpu_index` >= 0 adds the GPU's view (the processes seen at
  /// start count too when start() was given the same GPU). Never throws.
  LoadReport stop(int gpu_index = -1);

 private:
  struct Snapshot {
    bool ok = false;
    double busy = 0, steal = 0, total = 0;  // /proc/stat, all CPUs, clock ticks
    JobProcesses job;                       // this job's processes and their clock ticks
  };
  static Snapshot snapshot();
  Snapshot start_;
  double start_s_ = 0;
  int start_gpu_ = -1;
  std::string start_gpu_uuid_;
  std::optional<int64_t> start_gpu_others_;  // other processes on start_gpu_ at start()
};

/// How many of `listed`, the process IDs the driver lists on a GPU, are not this job's: those
/// not in `job` (this job's processes, this one among them). Where this process is not listed
/// (the driver reports IDs of another PID namespace, e.g. the host's from inside a container, or
/// the job has no context on the GPU yet), it cannot tell whose each one is and counts all
/// but as many as the job has: never more than the truth. Never throws.
int64_t other_gpu_processes(const std::vector<int64_t>& listed, const std::vector<int64_t>& job);

/// The GPU busy share of processes `pids`: the mean, over the times NVML sampled since
/// `since_us` (CPU time, microseconds since the epoch), of their SM utilization summed (at most
/// 100%), on the GPU where it is highest (nvmlDeviceGetProcessUtilization, on every device the
/// library lists). nullopt without the library, the function, or a sample of theirs since then.
/// Never throws.
std::optional<double> gpu_busy_of(const std::vector<int64_t>& pids, uint64_t since_us);

/// The throttle reasons (NVML's clocks event reasons bitmask) that slow the GPU down, in
/// words, joined by " and ": "power cap", "hardware slowdown", "software thermal slowdown",
/// "hardware thermal slowdown", "power brake"; "" when none. Idle, the applications clocks
/// setting, sync boost and the display clock setting are settings, not slowdowns: left out.
std::string gpu_slowdown_text(uint64_t reasons);

/// Competing load: other processes used at least max(0.2, 10% of the cores) cores, or steal
/// took 5% or more, or another process ran on the GPU. Returns the two CPU thresholds.
struct LoadThresholds {
  double other_cores;
  double steal_pct;
};
LoadThresholds load_thresholds(int64_t cores);

/// The shortest span whose CPU figures can tell competing load. /proc counts CPU time in clock
/// ticks (`ticks_per_s`: USER_HZ, 100 on Linux), and each difference is off by up to a tick per
/// CPU (the machine's busy and steal time) and per process (the job's own time); over a few
/// milliseconds that error alone reads as whole cores of "other processes". The span must make
/// it at most half of each threshold (load_thresholds): (cores + processes) ticks at most half
/// of the cores threshold, and a tick per CPU at most half of the steal threshold. 0.4 s on 2
/// cores with one process, 1.1 s with 8 child processes more.
double min_load_span_s(int64_t cores, size_t job_processes, double ticks_per_s);

}  // namespace ptune::system
