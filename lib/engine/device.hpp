#pragma once
/// Device selection and the facts about the machine that results files record.

#include <string>

#include <c10/core/Device.h>

namespace ptune::engine {

/// Resolves "auto" | "cpu" | "cuda" | "cuda:N". "auto" is the first CUDA device when one is
/// visible, else the CPU. Throws ConfigError when CUDA is asked for and none is visible, or
/// the index is out of range.
c10::Device resolve_device(const std::string& spec);

/// Sets LibTorch's intra-op threads; 0 = all cores.
void set_cpu_threads(int64_t n);

/// Human-readable device name: the GPU's name, or the CPU model.
std::string device_name(const c10::Device& device);

/// Waits for all queued work on the device (no-op on the CPU).
void synchronize(const c10::Device& device);

/// Throws ConfigError "<option> needs a CUDA device; none is visible" when `device` is not CUDA.
void require_cuda(const c10::Device& device, const std::string& option);

}  // namespace ptune::engine
