// CPU-only implementation of feeder.hpp: batches pass through unchanged.
#include "engine/feeder.hpp"

#include "measure/stats.hpp"

namespace ptune::engine {

struct Feeder::Impl {
  std::function<std::optional<data::Batch>()> source;
};

Feeder::Feeder(std::function<std::optional<data::Batch>()> source, c10::Device)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
}

Feeder::~Feeder() = default;

std::optional<data::Batch> Feeder::next(double* wait_ms) {
  measure::Stopwatch sw;
  auto b = impl_->source();
  if (wait_ms) *wait_ms = sw.ms();
  return b;
}

}  // namespace ptune::engine
