#include "runtime/device.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <ATen/Parallel.h>

#include "runtime/compat.hpp"
#include "runtime/cuda_support.hpp"
#include "system/process.hpp"
#include "core/errors.hpp"

namespace ptune::runtime {

c10::Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return c10::Device(c10::kCPU);
  if (spec == "auto") return cuda::available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  int index = 0;
  if (spec.rfind("cuda:", 0) == 0) index = std::stoi(spec.substr(5));
  if (!cuda::available())
    throw ConfigError("device: '" + spec +
                      "' needs a CUDA device; none is visible (use \"cpu\" or \"auto\")");
  if (index >= cuda::device_count())
    throw ConfigError("device: '" + spec + "' is out of range; " + std::to_string(cuda::device_count()) +
                      " CUDA device(s) visible");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void set_cpu_threads(int64_t n) {
  // 0: what a default PyTorch process uses (one thread per physical core), and no more threads
  // than the CPUs this process may run on (process.cpus, taskset, a container's limit).
  static const int default_threads = at::intraop_default_num_threads();
  const int allowed = static_cast<int>(std::max<size_t>(1, system::allowed_cpus().size()));
  const int threads = n > 0 ? static_cast<int>(n) : std::max(1, std::min(default_threads, allowed));
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

const system::CpuInfo& cpu_info() {
  static const system::CpuInfo info = [] {
    system::CpuFacts f = system::read_cpu_facts();
    const runtime::compat::CpuCapabilities lt = runtime::compat::cpu_capabilities();
    if (!lt.flags.empty()) f.flags = lt.flags;
    auto count = [&](const char* key, int64_t fallback) {
      auto it = lt.counts.find(key);
      return it != lt.counts.end() && it->second > 0 ? it->second : fallback;
    };
    f.physical_cores = count("num_physical_cores", f.physical_cores);
    f.logical_cores = count("num_logical_cores", f.logical_cores);
    if (auto it = lt.names.find("architecture"); it != lt.names.end() && !it->second.empty())
      f.arch = it->second;
    if (auto it = lt.names.find("cpu_name"); it != lt.names.end() && f.model.empty()) f.model = it->second;
    f.aten_isa = runtime::compat::aten_cpu_capability();
    f.onednn_bf16 = runtime::compat::onednn_bf16_supported();
    return system::describe_cpu(f);
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

}  // namespace ptune::runtime
