#include "engine/device.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <ATen/Parallel.h>

#include "engine/cuda_support.hpp"
#include "errors.hpp"

namespace ptune::engine {

c10::Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return c10::Device(c10::kCPU);
  if (spec == "auto") return cuda::available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  int index = 0;
  if (spec.rfind("cuda:", 0) == 0) index = std::stoi(spec.substr(5));
  if (!cuda::available())
    throw ConfigError("device: '" + spec + "' needs a CUDA device; none is visible (use \"cpu\" or \"auto\")");
  if (index >= cuda::device_count())
    throw ConfigError("device: '" + spec + "' is out of range; " + std::to_string(cuda::device_count()) +
                      " CUDA device(s) visible");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void set_cpu_threads(int64_t n) {
  int threads = n > 0 ? static_cast<int>(n) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
}

bool keep_host_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return false;
  for (const char* v : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TOP_PAD_"})
    if (std::getenv(v)) return false;
  // 32 MiB is glibc's largest mmap threshold; setting it also ends the threshold's adaptation,
  // which would otherwise reach the same only after large blocks have been freed a few times.
  // Larger blocks keep their own mappings: on the heap they would fragment it.
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

std::string device_name(const c10::Device& device) {
  if (device.is_cuda()) return cuda::device_name(device.index());
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "CPU";
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) cuda::synchronize(device.index());
}

void require_cuda(const c10::Device& device, const std::string& option) {
  if (!device.is_cuda()) {
    throw ConfigError(option + " needs a CUDA device; " +
                      std::string(cuda::available() ? "the device is the CPU" : "none is visible"));
  }
}

}  // namespace ptune::engine
