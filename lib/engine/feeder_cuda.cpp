// CUDA copier of feeder.hpp: a copy stream and one CUDA event per batch.
#include "engine/feeder.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace ptune::engine {
namespace {

class CudaCopy final : public DeviceCopy {
 public:
  explicit CudaCopy(c10::Device device)
      : device_(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())) {}

  data::Batch start(const data::Batch& host) override {
    // Device blocks come from the copy stream's pool; finish()'s record_stream keeps a block
    // from being reused before the compute stream is done with it, and the pinned host block
    // is not recycled before this copy has finished (the host allocator records an event).
    c10::cuda::CUDAStreamGuard guard(stream_);
    const bool pinned = host.images.is_pinned();
    data::Batch b;
    b.images = host.images.to(device_, /*non_blocking=*/pinned);
    b.labels = host.labels.to(device_, /*non_blocking=*/pinned);
    b.index = host.index;
    copied_.record(stream_);
    return b;
  }

  void finish(data::Batch& batch) override {
    c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    copied_.block(compute);  // the compute stream waits for this copy, the host does not
    // The tensors were allocated on the copy stream; tell the allocator they are used here too.
    batch.images.record_stream(compute);
    batch.labels.record_stream(compute);
  }

 private:
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent copied_;
};

}  // namespace

std::unique_ptr<DeviceCopy> make_device_copy(c10::Device device) {
  if (!device.is_cuda()) return nullptr;
  return std::make_unique<CudaCopy>(device);
}

}  // namespace ptune::engine
