#pragma once
/// The geometry of torchvision's image transforms (RandomResizedCrop, Resize(int), CenterCrop,
/// horizontal flip) on decoded RGB images, producing uint8 CHW. Resizing uses Resizer
/// (bilinear, half-pixel centres, antialias when shrinking), as torchvision does on tensors.

#include <cstdint>
#include <utility>
#include <vector>

#include "data/dataset.hpp"
#include "data/decode.hpp"

namespace ptune::data {

/// A rectangle of an image, in pixels.
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const CropBox& o) const {
    return top == o.top && left == o.left && height == o.height && width == o.width;
  }
};

/// The crop torchvision.transforms.RandomResizedCrop.get_params picks for a height x width
/// image, with `rng` in place of torch's generator: up to 10 tries of an area fraction uniform
/// in [scale_min, scale_max) and an aspect ratio log-uniform in [ratio_min, ratio_max), sides
/// rounded half-to-even as Python's round(); then the centre crop fallback.
CropBox random_resized_crop_box(int64_t height, int64_t width, SplitMix64& rng, double scale_min = 0.08,
                                double scale_max = 1.0, double ratio_min = 3.0 / 4.0,
                                double ratio_max = 4.0 / 3.0);

/// The (height, width) torchvision's Resize(size) (an int) gives a height x width image: the
/// short side becomes `size`, the long side int(size * long / short).
std::pair<int64_t, int64_t> resize_short_side(int64_t height, int64_t width, int64_t size);

/// The side evaluation resizes to before a centre crop of `image_size`:
/// round(image_size * 256 / 224), i.e. 256 for 224.
int64_t eval_resize_size(int64_t image_size);

/// torchvision's CenterCrop box of crop_height x crop_width in a height x width image (crop
/// no larger than the image): top = int(round((height - crop_height) / 2.0)), same for left.
CropBox center_crop_box(int64_t height, int64_t width, int64_t crop_height, int64_t crop_width);

/// `box`, given on an in_height x in_width image, on the same image decoded at out_height x
/// out_width (JPEG DCT scaling): its edges scaled and rounded, at least one pixel.
CropBox scale_box(const CropBox& box, int64_t in_height, int64_t in_width, int64_t out_height,
                  int64_t out_width);

/// Copies `box` of an interleaved RGB image into planar uint8 CHW (3 x box.height x box.width).
void crop_to_planar(const RgbImage& image, const CropBox& box, uint8_t* out);

/// Crops `box` of `image` and resizes it to out_height x out_width, as torchvision's
/// resized_crop(antialias=True) on a uint8 tensor; writes uint8 CHW.
void resized_crop(const RgbImage& image, const CropBox& box, int64_t out_height, int64_t out_width,
                  uint8_t* out);

/// Mirrors each of `channels` height x width planes left-right, in place.
void flip_horizontal(uint8_t* chw, int64_t channels, int64_t height, int64_t width);

}  // namespace ptune::data
