// CUDA implementation of cuda_support.hpp (built when LibTorch has CUDA).
#include "runtime/cuda_support.hpp"

#include <cstdio>
#include <memory>
#include <vector>

#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

namespace ptune::runtime::cuda {

bool available() { return torch::cuda::is_available(); }

int device_count() { return available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::string device_name(int index) {
  if (!available()) return "";
  return at::cuda::getDeviceProperties(index)->name;
}

std::string device_uuid(int index) {
  try {
    if (index < 0 || index >= device_count()) return "";
    const cudaUUID_t& u = at::cuda::getDeviceProperties(index)->uuid;
    std::string s;
    char hex[3];
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(u.bytes[i]));
      s += hex;
    }
    return s;
  } catch (...) {
    return "";
  }
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
  if (!available()) return;
  c10::cuda::CUDACachingAllocator::emptyCache();
  // Page-locked host blocks (power-of-two sizes) pile up over a batch-size search too.
  at::getHostAllocator(at::kCUDA)->empty_cache();
}

void set_cudnn_benchmark(bool on) { at::globalContext().setBenchmarkCuDNN(on); }

struct EventMarks::Impl {
  c10::DeviceIndex device = 0;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;  // reused across clear()
  size_t used = 0;
};

EventMarks::EventMarks(int device_index) : impl_(std::make_unique<Impl>()) {
  impl_->device = static_cast<c10::DeviceIndex>(device_index);
}

EventMarks::~EventMarks() = default;

size_t EventMarks::record() {
  Impl& m = *impl_;
  if (m.used == m.events.size()) m.events.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
  m.events[m.used]->record(c10::cuda::getCurrentCUDAStream(m.device));
  return m.used++;
}

double EventMarks::elapsed_ms(size_t from, size_t to) const {
  const Impl& m = *impl_;
  TORCH_CHECK(from < m.used && to < m.used, "EventMarks::elapsed_ms: mark out of range");
  return static_cast<double>(m.events[from]->elapsed_time(*m.events[to]));
}

void EventMarks::clear() { impl_->used = 0; }

}  // namespace ptune::runtime::cuda
