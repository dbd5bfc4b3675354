#pragma once
/// What else ran on the machine while a row was measured: other processes' CPU time, the
/// hypervisor's steal time and the load average (Linux, from /proc), and on a GPU the other
/// processes on the device, its clocks and throttle reasons where the driver's management
/// library tells. A row measured under competing load is flagged in every output format.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ptune::measure {

/// The load seen over one span of time.
struct LoadReport {
  bool sampled = false;          // /proc could be read (Linux)
  double seconds = 0;            // the span
  int64_t cores = 0;             // online CPUs
  double other_cpu_cores = 0;    // CPU time of other processes per second of the span (cores)
  double steal_pct = 0;          // % of the machine's CPU time taken by the hypervisor
  double loadavg_1m = 0;         // the 1-minute load average at the end
  std::optional<int64_t> gpu_other_processes;  // other processes on this GPU (driver permitting)
  std::vector<std::string> gpu_notes;          // e.g. "SM clock 1410 of 1980 MHz; throttled: power cap"
  bool under_load = false;       // competing load: see load_thresholds()
  /// One line: "other processes used 0.93 of 2 cores, steal 0%, load average 2.1".
  std::string summary() const;
};

/// Counts CPU time from start() to stop(). The job's own processes (this process and its
/// siblings running the same executable: the other ranks of `ptune launch` or torchrun on this
/// machine) do not count as load.
class LoadSampler {
 public:
  /// Starts counting. Never throws.
  void start();
  /// The load since start(); `gpu_index` >= 0 adds the GPU's view. Never throws.
  LoadReport stop(int gpu_index = -1);

 private:
  struct Snapshot {
    bool ok = false;
    double busy = 0, steal = 0, total = 0;  // /proc/stat, all CPUs, clock ticks
    double job = 0;                          // this job's processes, clock ticks
  };
  static Snapshot snapshot();
  Snapshot start_;
  double start_s_ = 0;
};

/// Competing load: other processes used at least max(0.2, 10% of the cores) cores, or steal
/// took 5% or more, or another process ran on the GPU. Returns the two CPU thresholds.
struct LoadThresholds {
  double other_cores;
  double steal_pct;
};
LoadThresholds load_thresholds(int64_t cores);

/// Whether the CPU has native bf16 arithmetic (AVX512-BF16 or AMX-BF16 on x86, BF16 on
/// Arm), from /proc/cpuinfo's flags; `which` receives the flag found. Never throws.
bool cpu_has_native_bf16(std::string* which = nullptr);

}  // namespace ptune::measure
