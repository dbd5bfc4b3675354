// CPU-only implementation of cuda_graph.hpp: there is nothing to capture without CUDA.
#include "engine/cuda_graph.hpp"

#include <stdexcept>

namespace ptune::engine {

struct GraphStep::Impl {};

GraphStep::GraphStep(int) {}
GraphStep::~GraphStep() = default;

void GraphStep::run_eager(const std::function<void()>& body) { body(); }

bool GraphStep::capture(const std::function<void()>&) {
  failure_ = "this build of LibTorch has no CUDA";
  return false;
}

void GraphStep::replay() { throw std::logic_error("GraphStep::replay() without CUDA"); }

}  // namespace ptune::engine
