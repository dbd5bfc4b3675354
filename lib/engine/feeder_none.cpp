// CPU-only LibTorch: no device copies; batches pass through the feeder unchanged.
#include "engine/feeder.hpp"

namespace ptune::engine {

std::unique_ptr<DeviceCopy> make_device_copy(c10::Device) { return nullptr; }

}  // namespace ptune::engine
