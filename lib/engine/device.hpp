#pragma once
/// Device selection and the facts about the machine that results files record.

#include <string>

#include <c10/core/Device.h>

#include "engine/cpu_info.hpp"

namespace ptune::engine {

/// Resolves "auto" | "cpu" | "cuda" | "cuda:N". "auto" is the first CUDA device when one is
/// visible, else the CPU. Throws ConfigError when CUDA is asked for and none is visible, or
/// the index is out of range.
c10::Device resolve_device(const std::string& spec);

/// Sets LibTorch's intra-op threads; 0 = all cores.
void set_cpu_threads(int64_t n);

/// Makes glibc's malloc keep freed host memory for reuse, as PyTorch's CUDA caching allocator
/// keeps device memory: every block comes from the heap (not a fresh mmap each time: glibc's
/// 32 MiB threshold, and no block mapped on its own above it), and the heap is not trimmed back
/// to the system (below 2 GiB free). With glibc's defaults a
/// training step's large tensors are mapped and unmapped every step, and each step's first
/// touches fault in and zero their pages again: on a CPU a fifth to a third of the step (ViT,
/// ConvNeXt, ResNet-50), spent in the kernel. Called by the commands that train, before
/// they allocate. Leaves the allocator alone (and returns false) when the environment tunes
/// it already (GLIBC_TUNABLES glibc.malloc.*, MALLOC_*_ variables) or outside glibc.
bool keep_host_memory();

/// The CPU as LibTorch uses it (engine/cpu_info.hpp): LibTorch's cpuinfo features and core counts,
/// ATen's dispatch (torch.backends.cpu.get_cpu_capability()) and oneDNN's bf16 answer
/// (torch.ops.mkldnn._is_mkldnn_bf16_supported()), under the caps in the environment; what
/// LibTorch does not say comes from /proc/cpuinfo. Worked out once per process. Throws nothing.
const CpuInfo& cpu_info();

/// Human-readable device name: the GPU's name, or the CPU model.
std::string device_name(const c10::Device& device);

/// Waits for all queued work on the device (no-op on the CPU).
void synchronize(const c10::Device& device);

/// Throws ConfigError "<option> needs a CUDA device; none is visible" when `device` is not CUDA.
void require_cuda(const c10::Device& device, const std::string& option);

}  // namespace ptune::engine
