// CPU-only implementation of feeder.hpp: batches pass through unchanged.
#include "engine/feeder.hpp"

namespace ptune::engine {

struct Feeder::Impl {
  std::function<std::optional<data::Batch>()> source;
};

Feeder::Feeder(std::function<std::optional<data::Batch>()> source, c10::Device)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
}

Feeder::~Feeder() = default;

std::optional<data::Batch> Feeder::next(double* wait_ms, const std::function<void()>& before_device_wait) {
  return detail::pull(impl_->source, wait_ms, before_device_wait);
}

}  // namespace ptune::engine
