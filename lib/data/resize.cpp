#include "data/resize.hpp"

#include <algorithm>
#include <cmath>

namespace ptune::data {

Resizer::Resizer(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w)
    : in_h_(in_h),
      in_w_(in_w),
      out_h_(out_h),
      out_w_(out_w),
      rows_(make_taps(in_h, out_h)),
      cols_(make_taps(in_w, out_w)) {}

Resizer::Taps Resizer::make_taps(int64_t in, int64_t out) {
  // Output pixel i covers input coordinates centred at scale * (i + 0.5). Upsampling
  // (scale < 1) uses the plain bilinear tent of radius 1; shrinking widens it to `scale`
  // input pixels (antialiasing). Weights are normalised to sum to one, which also clamps
  // at the borders.
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? scale : 1.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.start.resize(out);
  t.count.resize(out);
  t.weights.assign(out * t.max_taps, 0.f);
  std::vector<double> w(static_cast<size_t>(t.max_taps));  // one row's raw weights, reused
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    int64_t n = std::min(hi - lo, t.max_taps);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      double x = std::abs((j + lo - center + 0.5) * invscale);
      w[j] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[j];
    }
    for (int64_t j = 0; j < n; ++j)
      t.weights[i * t.max_taps + j] = static_cast<float>(total > 0 ? w[j] / total : 0.0);
    t.start[i] = lo;
    t.count[i] = n;
  }
  return t;
}

template <class Out, class Store>
void Resizer::run_impl(const uint8_t* in, int64_t channels, Out* out, Store store) const {
  // Horizontal pass into a float buffer (in_h x out_w per channel), then vertical.
  thread_local std::vector<float> tmp;
  tmp.resize(static_cast<size_t>(in_h_ * out_w_));
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* src = in + c * in_h_ * in_w_;
    for (int64_t y = 0; y < in_h_; ++y) {
      const uint8_t* row = src + y * in_w_;
      float* dst = tmp.data() + y * out_w_;
      for (int64_t x = 0; x < out_w_; ++x) {
        const float* w = cols_.weights.data() + x * cols_.max_taps;
        const uint8_t* p = row + cols_.start[x];
        float acc = 0.f;
        for (int64_t k = 0; k < cols_.count[x]; ++k) acc += w[k] * p[k];
        dst[x] = acc;
      }
    }
    Out* plane = out + c * out_h_ * out_w_;
    thread_local std::vector<float> acc;
    acc.resize(static_cast<size_t>(out_w_));
    for (int64_t y = 0; y < out_h_; ++y) {
      // Accumulate whole rows, tap by tap: contiguous, vectorizable loops.
      const float* w = rows_.weights.data() + y * rows_.max_taps;
      const float* base = tmp.data() + rows_.start[y] * out_w_;
      const int64_t n = rows_.count[y];
      float* a = acc.data();
      Out* dst = plane + y * out_w_;
      if (n == 2) {  // the upsampling case: one fused pass
        const float w0 = w[0], w1 = w[1];
        const float* r0 = base;
        const float* r1 = base + out_w_;
        for (int64_t x = 0; x < out_w_; ++x) dst[x] = store(w0 * r0[x] + w1 * r1[x]);
        continue;
      }
      for (int64_t x = 0; x < out_w_; ++x) a[x] = w[0] * base[x];
      for (int64_t k = 1; k < n; ++k) {
        const float wk = w[k];
        const float* src = base + k * out_w_;
        for (int64_t x = 0; x < out_w_; ++x) a[x] += wk * src[x];
      }
      for (int64_t x = 0; x < out_w_; ++x) dst[x] = store(a[x]);
    }
  }
}

void Resizer::run(const uint8_t* in, int64_t channels, uint8_t* out) const {
  // Weights are non-negative and sum to one, so v is in [0, 255] up to rounding error.
  run_impl(in, channels, out, [](float v) { return static_cast<uint8_t>(std::min(v + 0.5f, 255.f)); });
}

void Resizer::run_float(const uint8_t* in, int64_t channels, float* out) const {
  run_impl(in, channels, out, [](float v) { return v; });
}

}  // namespace ptune::data
