#pragma once
/// Bilinear resize of uint8 CHW images with half-pixel centres (align_corners=False), with
/// torchvision's antialiasing when shrinking (a triangle filter widened by the scale), as
/// torchvision's Resize computes it. The weight tables are computed when a Resizer is made: once
/// per size pair for fake_cifar; per sample for the random crops of image folders.

#include <cstdint>
#include <vector>

namespace ptune::data {

class Resizer {
 public:
  /// Prepares the tables for in_h x in_w -> out_h x out_w.
  Resizer(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w);

  /// Resizes `channels` planes of uint8 into uint8 (rounded to nearest, clamped).
  void run(const uint8_t* in, int64_t channels, uint8_t* out) const;
  /// Resizes `channels` planes of uint8 into float, unrounded (0..255 scale).
  void run_float(const uint8_t* in, int64_t channels, float* out) const;

 private:
  struct Taps {
    std::vector<int64_t> start;  // first input index per output index
    std::vector<int64_t> count;  // taps per output index
    std::vector<float> weights;  // max_taps weights per output index
    int64_t max_taps = 0;
  };
  static Taps make_taps(int64_t in, int64_t out);
  template <class Out, class Store>
  void run_impl(const uint8_t* in, int64_t channels, Out* out, Store store) const;

  int64_t in_h_, in_w_, out_h_, out_w_;
  Taps rows_, cols_;
};

}  // namespace ptune::data
