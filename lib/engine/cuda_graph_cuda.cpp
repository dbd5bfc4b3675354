// CUDA implementation of cuda_graph.hpp.
#include "engine/cuda_graph.hpp"

#include <optional>

#include <ATen/autocast_mode.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include "core/errors.hpp"

namespace ptune::engine {
namespace {

/// at::cuda::CUDAGraph with a view of the state a failed capture leaves behind.
struct Graph : at::cuda::CUDAGraph {
  c10::MempoolId_t pool_id() const { return mempool_id_; }
  c10::DeviceIndex device() const { return capture_dev_; }
  bool ended() const { return capture_ended_; }
};

}  // namespace

struct GraphStep::Impl {
  c10::DeviceIndex device = 0;
  std::optional<Graph> graph;
  std::optional<c10::cuda::CUDAStream> side;

  c10::cuda::CUDAStream side_stream() {
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
    return *side;
  }

  /// After a capture that did not end cleanly: the allocators still route allocations to the
  /// capture's private pools and defer frees as if a capture were under way; end and release
  /// them (each call may legitimately find nothing to do), then drop the graph.
  void clean_up_failed_capture() {
    if (!graph) return;
    if (!graph->ended() && graph->device() >= 0) {
      const c10::MempoolId_t pool = graph->pool_id();
      auto* host = at::getHostAllocator(at::kCUDA);
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(graph->device(), pool);
      } catch (...) {
      }
      try {
        host->end_allocate_to_pool(pool);
      } catch (...) {
      }
      try {
        c10::cuda::CUDACachingAllocator::releasePool(graph->device(), pool);
      } catch (...) {
      }
      try {
        host->release_pool(pool);
      } catch (...) {
      }
    }
    try {
      graph->reset();
    } catch (...) {
    }
    graph.reset();
  }
};

GraphStep::GraphStep(int device_index) : impl_(std::make_unique<Impl>()) {
  impl_->device = static_cast<c10::DeviceIndex>(device_index);
}

GraphStep::~GraphStep() = default;

void GraphStep::run_eager(const std::function<void()>& body) {
  c10::cuda::CUDAGuard device_guard(impl_->device);
  c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(impl_->device);
  c10::cuda::CUDAStream side = impl_->side_stream();
  at::cuda::CUDAEvent queued;
  queued.record(main);
  queued.block(side);  // the side stream starts after everything queued so far
  {
    c10::cuda::CUDAStreamGuard guard(side);
    body();
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(main);  // later work on the main stream sees this step's results
}

bool GraphStep::capture(const std::function<void()>& body) {
  c10::cuda::CUDAGuard device_guard(impl_->device);
  c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(impl_->device);
  c10::cuda::CUDAStream side = impl_->side_stream();
  // Capture needs an idle side stream that no other stream is still feeding; then, as
  // torch.cuda.graph, the cached blocks go back to the device so the private pool can use them.
  main.synchronize();
  side.synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(impl_->device);
  // Autocast caches casted weights across calls; inside a graph that cache would hold
  // tensors from the capture's private pool, so it is off while capturing (as PyTorch does).
  const bool cache = at::autocast::is_autocast_cache_enabled();
  try {
    c10::cuda::CUDAStreamGuard guard(side);
    at::autocast::set_autocast_cache_enabled(false);
    impl_->graph.emplace();
    // Thread-local capture mode: the loader's worker threads keep allocating page-locked
    // batches (cudaHostAlloc, event queries) while this thread captures; in the default
    // global mode those calls from other threads would be refused and break the capture.
    impl_->graph->capture_begin(/*pool=*/{0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        impl_->graph->capture_end();
      } catch (...) {
      }
      throw;
    }
    impl_->graph->capture_end();
    at::autocast::set_autocast_cache_enabled(cache);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(impl_->device);
    capture_peak_bytes_ =
        stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  } catch (const std::exception& e) {
    at::autocast::set_autocast_cache_enabled(cache);
    impl_->clean_up_failed_capture();
    failure_ = message_of(e);
    captured_ = false;
    return false;
  }
  captured_ = true;
  return true;
}

void GraphStep::replay() {
  TORCH_CHECK(captured_, "GraphStep::replay() before a successful capture()");
  c10::cuda::CUDAGuard device_guard(impl_->device);
  impl_->graph->replay();
}

}  // namespace ptune::engine
