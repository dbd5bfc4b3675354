#include "engine/feeder.hpp"

#include "runtime/compat.hpp"
#include "core/ranges.hpp"
#include "core/stats.hpp"

namespace ptune::engine {

Feeder::Feeder(Source source, c10::Device device) : Feeder(std::move(source), make_device_copy(device)) {}

Feeder::Feeder(Source source, std::unique_ptr<DeviceCopy> copy)
    : source_(std::move(source)), copy_(std::move(copy)) {}

Feeder::~Feeder() = default;

std::optional<data::Batch> Feeder::next(double* wait_ms, const std::function<void()>& before_device_wait) {
  stats::Stopwatch sw;
  std::optional<data::Batch> host = source_();
  if (wait_ms) *wait_ms = sw.ms();
  if (!host) return std::nullopt;
  if (!copy_) {
    if (before_device_wait) before_device_wait();
    return host;
  }
  runtime::compat::UserScope range(ranges::kH2DCopy);
  data::Batch batch = copy_->start(*host);
  if (before_device_wait) before_device_wait();
  copy_->finish(batch);
  return batch;
}

}  // namespace ptune::engine
