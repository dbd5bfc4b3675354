#include "data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/resize.hpp"

namespace ptune::data {
namespace {

/// Python's int(round(x)) for the non-negative values used here: halves go to even.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, SplitMix64& rng, double scale_min,
                                double scale_max, double ratio_min, double ratio_max) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * (scale_min + (scale_max - scale_min) * rng.uniform());
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(height - h + 1)));
      const int64_t left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(width - w + 1)));
      return {top, left, h, w};
    }
  }
  // Fallback: the centre crop closest to the allowed ratios.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(ratio_min, ratio_max)) {
    h = round_half_even(static_cast<double>(w) / std::min(ratio_min, ratio_max));
  } else if (in_ratio > std::max(ratio_min, ratio_max)) {
    w = round_half_even(static_cast<double>(h) * std::max(ratio_min, ratio_max));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

std::pair<int64_t, int64_t> resize_short_side(int64_t height, int64_t width, int64_t size) {
  // torchvision _compute_resized_output_size: int(size * long / short) truncates.
  if (width <= height) {
    const int64_t long_side = static_cast<int64_t>(static_cast<double>(size) * height / width);
    return {long_side, size};
  }
  const int64_t long_side = static_cast<int64_t>(static_cast<double>(size) * width / height);
  return {size, long_side};
}

int64_t eval_resize_size(int64_t image_size) {
  // image_size * 256 / 224 = image_size * 8 / 7 is never exactly halfway, so no tie rule.
  return (image_size * 256 + 112) / 224;
}

CropBox center_crop_box(int64_t height, int64_t width, int64_t crop_height, int64_t crop_width) {
  return {round_half_even(static_cast<double>(height - crop_height) / 2.0),
          round_half_even(static_cast<double>(width - crop_width) / 2.0), crop_height, crop_width};
}

CropBox scale_box(const CropBox& box, int64_t in_height, int64_t in_width, int64_t out_height,
                  int64_t out_width) {
  if (in_height == out_height && in_width == out_width) return box;
  auto axis = [](int64_t start, int64_t len, int64_t in, int64_t out, int64_t& new_start, int64_t& new_len) {
    const double s = static_cast<double>(out) / static_cast<double>(in);
    int64_t a = std::llround(start * s), b = std::llround((start + len) * s);
    a = std::clamp<int64_t>(a, 0, out - 1);
    b = std::clamp<int64_t>(b, a + 1, out);
    new_start = a;
    new_len = b - a;
  };
  CropBox r;
  axis(box.top, box.height, in_height, out_height, r.top, r.height);
  axis(box.left, box.width, in_width, out_width, r.left, r.width);
  return r;
}

void crop_to_planar(const RgbImage& image, const CropBox& box, uint8_t* out) {
  const int64_t plane = box.height * box.width;
  for (int64_t y = 0; y < box.height; ++y) {
    const uint8_t* src = image.pixels.data() + ((box.top + y) * image.width + box.left) * 3;
    uint8_t* r = out + y * box.width;
    uint8_t* g = r + plane;
    uint8_t* b = g + plane;
    for (int64_t x = 0; x < box.width; ++x) {
      r[x] = src[3 * x];
      g[x] = src[3 * x + 1];
      b[x] = src[3 * x + 2];
    }
  }
}

void resized_crop(const RgbImage& image, const CropBox& box, int64_t out_height, int64_t out_width,
                  uint8_t* out) {
  if (box.height == out_height && box.width == out_width) {
    crop_to_planar(image, box, out);
    return;
  }
  thread_local std::vector<uint8_t> planar;
  planar.resize(static_cast<size_t>(3 * box.height * box.width));
  crop_to_planar(image, box, planar.data());
  Resizer(box.height, box.width, out_height, out_width).run(planar.data(), 3, out);
}

void flip_horizontal(uint8_t* chw, int64_t channels, int64_t height, int64_t width) {
  for (int64_t row = 0; row < channels * height; ++row) {
    uint8_t* p = chw + row * width;
    std::reverse(p, p + width);
  }
}

}  // namespace ptune::data
