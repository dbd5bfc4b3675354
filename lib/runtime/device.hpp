#pragma once
/// Device selection and the facts about the machine that results files record.

#include <string>

#include <c10/core/Device.h>

#include "system/cpu_info.hpp"

namespace ptune::runtime {

/// Resolves "auto" | "cpu" | "cuda" | "cuda:N". "auto" is the first CUDA device when one is
/// visible, else the CPU. Throws ConfigError when CUDA is asked for and none is visible, or
/// the index is out of range.
c10::Device resolve_device(const std::string& spec);

/// Sets LibTorch's intra-op threads; 0 = a default PyTorch process's count (one per physical core),
/// at most one per CPU this process may run on.
void set_cpu_threads(int64_t n);

/// The CPU as LibTorch uses it (system/cpu_info.hpp): LibTorch's cpuinfo features and core counts,
/// ATen's dispatch (torch.backends.cpu.get_cpu_capability()) and oneDNN's bf16 answer
/// (torch.ops.mkldnn._is_mkldnn_bf16_supported()), under the caps in the environment; what
/// LibTorch does not say comes from /proc/cpuinfo. Worked out once per process. Throws nothing.
const system::CpuInfo& cpu_info();

/// Human-readable device name: the GPU's name, or the CPU model.
std::string device_name(const c10::Device& device);

/// Waits for all queued work on the device (no-op on the CPU).
void synchronize(const c10::Device& device);

/// Throws ConfigError "<option> needs a CUDA device; none is visible" when `device` is not CUDA.
void require_cuda(const c10::Device& device, const std::string& option);

}  // namespace ptune::runtime
