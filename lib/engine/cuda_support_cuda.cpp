// CUDA implementation of cuda_support.hpp (built when LibTorch has CUDA).
#include "engine/cuda_support.hpp"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

namespace ptune::engine::cuda {

bool available() { return torch::cuda::is_available(); }

int device_count() { return available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::string device_name(int index) {
  if (!available()) return "";
  return at::cuda::getDeviceProperties(index)->name;
}

std::string version() {
#ifdef CUDA_VERSION
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
#else
  return "";
#endif
}

void synchronize(int index) {
  if (available()) torch::cuda::synchronize(index);
}

void reset_peak_memory(int index) {
  if (available()) c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

int64_t peak_memory(int index) {
  if (!available()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

int64_t total_memory(int index) {
  if (!available()) return 0;
  return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
}

void empty_cache() {
  if (available()) c10::cuda::CUDACachingAllocator::emptyCache();
}

void set_cudnn_benchmark(bool on) { at::globalContext().setBenchmarkCuDNN(on); }

}  // namespace ptune::engine::cuda
