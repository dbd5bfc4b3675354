// CUDA implementation of feeder.hpp.
#include "engine/feeder.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>


namespace ptune::engine {

struct Feeder::Impl {
  std::function<std::optional<data::Batch>()> source;
  c10::Device device{c10::kCPU};
  std::optional<c10::cuda::CUDAStream> copy_stream;
  struct InFlight {
    data::Batch batch;  // device tensors, written on the copy stream
    at::cuda::CUDAEvent copied;
  };
  std::optional<InFlight> next;
  bool started = false;
  double waited_ms = 0;

  /// Pulls a host batch and queues its copy on the copy stream.
  void issue() {
    double ms = 0;
    std::optional<data::Batch> host = detail::pull(source, &ms);
    waited_ms += ms;
    if (!host) return;
    c10::cuda::CUDAStreamGuard guard(*copy_stream);
    InFlight f;
    const bool pinned = host->images.is_pinned();
    f.batch.images = host->images.to(device, /*non_blocking=*/pinned);
    f.batch.labels = host->labels.to(device, /*non_blocking=*/pinned);
    f.batch.index = host->index;
    f.copied.record(*copy_stream);
    next.emplace(std::move(f));
  }
};

Feeder::Feeder(std::function<std::optional<data::Batch>()> source, c10::Device device)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  impl_->device = device;
  if (device.is_cuda()) impl_->copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
}

Feeder::~Feeder() = default;

std::optional<data::Batch> Feeder::next(double* wait_ms, const std::function<void()>& before_device_wait) {
  Impl& m = *impl_;
  m.waited_ms = 0;
  if (!m.device.is_cuda()) return detail::pull(m.source, wait_ms, before_device_wait);
  if (!m.started) {
    m.issue();
    m.started = true;
  }
  if (!m.next) {
    if (wait_ms) *wait_ms = m.waited_ms;
    return std::nullopt;
  }
  Impl::InFlight cur = std::move(*m.next);
  m.next.reset();
  c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(m.device.index());
  if (before_device_wait) before_device_wait();
  cur.copied.block(compute);  // the compute stream waits for this copy, the host does not
  // The tensors were allocated on the copy stream; tell the allocator they are used here too.
  cur.batch.images.record_stream(compute);
  cur.batch.labels.record_stream(compute);
  m.issue();  // the next batch's copy overlaps this batch's compute
  if (wait_ms) *wait_ms = m.waited_ms;
  return std::move(cur.batch);
}

}  // namespace ptune::engine
