// CPU-only implementation of cuda_support.hpp (built when LibTorch has no CUDA).
#include "runtime/cuda_support.hpp"

namespace ptune::runtime::cuda {

bool available() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return ""; }
std::string device_uuid(int) { return ""; }
std::string version() { return ""; }
void synchronize(int) {}
void reset_peak_memory(int) {}
int64_t peak_memory(int) { return 0; }
int64_t total_memory(int) { return 0; }
void empty_cache() {}
void set_cudnn_benchmark(bool) {}

struct EventMarks::Impl {
  size_t count = 0;
};
EventMarks::EventMarks(int) : impl_(std::make_unique<Impl>()) {}
EventMarks::~EventMarks() = default;
size_t EventMarks::record() { return impl_->count++; }
double EventMarks::elapsed_ms(size_t, size_t) const { return 0.0; }
void EventMarks::clear() { impl_->count = 0; }

}  // namespace ptune::runtime::cuda
