#pragma once
/// The one place where differences between LibTorch versions are absorbed. Everything else in
/// ptune calls these functions instead of the version-specific ATen/c10 API.

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace ptune::compat {

/// Enables or disables autocast for a device type with the given lower-precision dtype.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

/// Drops autocast's cache of casted weights (call after each step while autocast is on).
inline void clear_autocast_cache() { at::autocast::clear_cache(); }

}  // namespace ptune::compat
