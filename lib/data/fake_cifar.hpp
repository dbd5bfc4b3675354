#pragma once
/// fake_cifar: N seeded random 32x32 RGB uint8 images with labels, as CIFAR-10 shapes them,
/// resized to the model's image size. Sample i depends only on (seed, i): nothing is stored.

#include <optional>

#include "data/dataset.hpp"
#include "data/resize.hpp"

namespace ptune::data {

class FakeCifar : public Dataset {
 public:
  static constexpr int64_t kSide = 32;  ///< side of the original images

  /// `out_size`: side of the images get() writes (bilinear resize from 32; 32 = originals).
  FakeCifar(int64_t num_samples, int64_t num_classes, uint64_t seed, int64_t out_size);

  int64_t size() const override { return num_samples_; }
  ImageShape shape() const override { return {3, out_size_, out_size_}; }
  int64_t get(int64_t index, uint64_t aug_seed, uint8_t* out) const override;

  /// Writes the 32x32 original of sample `index` (uint8 CHW) and returns its label.
  int64_t original(int64_t index, uint8_t* out) const;

 private:
  int64_t num_samples_, num_classes_;
  uint64_t seed_;
  int64_t out_size_;
  std::optional<Resizer> resizer_;
};

}  // namespace ptune::data
