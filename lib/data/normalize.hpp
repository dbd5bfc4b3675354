#pragma once
/// Normalization of uint8 pixels to floats, (x / 255 - mean) / std per channel, as one multiply-add
/// per pixel. The loader's float batches and the trainer's uint8 path on the CPU both use it, so
/// the two give the same floats bit for bit.

#include <array>
#include <cstdint>

namespace ptune::data {

/// x * scale + shift == (x / 255 - mean) / std, per channel.
struct Normalization {
  std::array<float, 3> scale{};
  std::array<float, 3> shift{};
};

/// The normalization for `mean` and `std` of pixels scaled to [0, 1]. Throws nothing.
Normalization normalization(const std::array<float, 3>& mean, const std::array<float, 3>& std);

/// Writes `n` images of 3 planes of `plane` uint8 pixels each (CHW, one image after the other)
/// as normalized floats to `dst`: the same CHW order, or with `channels_last` pixel by pixel
/// (HWC, the NHWC layout of a channels_last batch). One pass in the calling thread. Throws
/// nothing.
void normalize(const uint8_t* src, float* dst, int64_t n, int64_t plane, const Normalization& norm,
               bool channels_last = false);

}  // namespace ptune::data
