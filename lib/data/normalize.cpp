#include "data/normalize.hpp"

namespace ptune::data {

Normalization normalization(const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  Normalization n;
  for (int c = 0; c < 3; ++c) {
    n.scale[c] = 1.f / (255.f * std[c]);
    n.shift[c] = -mean[c] / std[c];
  }
  return n;
}

void normalize(const uint8_t* src, float* dst, int64_t n, int64_t plane, const Normalization& norm,
               bool channels_last) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* image = src + i * 3 * plane;
    float* out = dst + i * 3 * plane;
    for (int64_t c = 0; c < 3; ++c) {
      const float s = norm.scale[c], h = norm.shift[c];
      const uint8_t* in = image + c * plane;
      if (channels_last) {
        for (int64_t k = 0; k < plane; ++k) out[k * 3 + c] = static_cast<float>(in[k]) * s + h;
      } else {
        float* o = out + c * plane;
        for (int64_t k = 0; k < plane; ++k) o[k] = static_cast<float>(in[k]) * s + h;
      }
    }
  }
}

}  // namespace ptune::data
