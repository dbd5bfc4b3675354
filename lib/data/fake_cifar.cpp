#include "data/fake_cifar.hpp"

#include <cstring>
#include <vector>

namespace ptune::data {

FakeCifar::FakeCifar(int64_t num_samples, int64_t num_classes, uint64_t seed, int64_t out_size)
    : num_samples_(num_samples), num_classes_(num_classes), seed_(seed), out_size_(out_size) {
  if (out_size_ != kSide) resizer_.emplace(kSide, kSide, out_size_, out_size_);
}

int64_t FakeCifar::original(int64_t index, uint8_t* out) const {
  SplitMix64 rng(mix_seed(seed_, static_cast<uint64_t>(index), 0xC1FA));
  const int64_t n = 3 * kSide * kSide;
  for (int64_t i = 0; i < n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(out + i, &v, 8);
  }
  return static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_classes_)));
}

int64_t FakeCifar::get(int64_t index, uint64_t /*aug_seed*/, uint8_t* out) const {
  if (!resizer_) return original(index, out);
  thread_local std::vector<uint8_t> raw(3 * kSide * kSide);
  int64_t label = original(index, raw.data());
  resizer_->run(raw.data(), 3, out);
  return label;
}

}  // namespace ptune::data
