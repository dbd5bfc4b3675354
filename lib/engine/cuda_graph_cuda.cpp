// CUDA implementation of cuda_graph.hpp.
#include "engine/cuda_graph.hpp"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>

#include <optional>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

namespace ptune::engine {

struct GraphStep::Impl {
  at::cuda::CUDAGraph graph;
  std::optional<c10::cuda::CUDAStream> side;

  c10::cuda::CUDAStream side_stream() {
    if (!side) side = c10::cuda::getStreamFromPool();
    return *side;
  }
};

GraphStep::GraphStep() : impl_(std::make_unique<Impl>()) {}
GraphStep::~GraphStep() = default;

void GraphStep::run_eager(const std::function<void()>& body) {
  c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
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
  c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream();
  c10::cuda::CUDAStream side = impl_->side_stream();
  // Capture needs an idle side stream that no other stream is still feeding.
  main.synchronize();
  side.synchronize();
  // Autocast caches casted weights across calls; inside a graph that cache would hold
  // tensors from the capture's private pool, so it is off while capturing (as PyTorch does).
  const bool cache = at::autocast::is_autocast_cache_enabled();
  try {
    c10::cuda::CUDAStreamGuard guard(side);
    at::autocast::set_autocast_cache_enabled(false);
    // Thread-local capture mode: the loader's worker threads keep allocating page-locked
    // batches (cudaHostAlloc, event queries) while this thread captures; in the default
    // global mode those calls from other threads would be refused and break the capture.
    impl_->graph.capture_begin(/*pool=*/{0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    impl_->graph.capture_end();
    at::autocast::set_autocast_cache_enabled(cache);
  } catch (const c10::Error& e) {
    at::autocast::set_autocast_cache_enabled(cache);
    impl_->graph.reset();
    failure_ = e.what_without_backtrace();
    failure_ = failure_.substr(0, failure_.find('\n'));
    captured_ = false;
    return false;
  }
  captured_ = true;
  return true;
}

void GraphStep::replay() {
  TORCH_CHECK(captured_, "GraphStep::replay() before a successful capture()");
  impl_->graph.replay();
}

}  // namespace ptune::engine
