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

#include "compat.hpp"
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
  // Blocks above it are not mapped one by one either (M_MMAP_MAX 0): a step's largest buffers
  // come back every step, so they stay on the heap too. Which buffers pass 32 MiB depends on the
  // CPU and the batch: oneDNN's scratchpad for a convolution's weight gradient is a 72 MiB block
  // per call for ResNet-18 at 64x64, batch 8, with its AVX2 kernels (8 MiB with AVX-512), and a
  // ResNet-50 at 224x224, batch 32, has 100 MiB activations. Threads other than the main one
  // still map blocks over 64 MiB (glibc's largest heap for a thread's arena).
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
         mallopt(M_MMAP_MAX, 0) == 1;
#else
  return false;
#endif
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuFacts f = read_cpu_facts();
    const compat::CpuCapabilities lt = compat::cpu_capabilities();
    if (!lt.flags.empty()) f.flags = lt.flags;
    auto count = [&](const char* key, int64_t fallback) {
      auto it = lt.counts.find(key);
      return it != lt.counts.end() && it->second > 0 ? it->second : fallback;
    };
    f.physical_cores = count("num_physical_cores", f.physical_cores);
    f.logical_cores = count("num_logical_cores", f.logical_cores);
    if (auto it = lt.names.find("architecture"); it != lt.names.end() && !it->second.empty()) f.arch = it->second;
    if (auto it = lt.names.find("cpu_name"); it != lt.names.end() && f.model.empty()) f.model = it->second;
    f.aten_isa = compat::aten_cpu_capability();
    f.onednn_bf16 = compat::onednn_bf16_supported();
    return describe_cpu(f);
  }();
  return info;
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
