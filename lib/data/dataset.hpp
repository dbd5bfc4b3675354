#pragma once
/// The dataset interface the loader builds batches from, and the seeded random helpers that
/// keep every sample and every epoch's order deterministic.

#include <cstdint>
#include <memory>
#include <string>

namespace ptune::data {

/// Shape of the uint8 CHW images a dataset writes.
struct ImageShape {
  int64_t channels = 3;
  int64_t height = 0;
  int64_t width = 0;
  int64_t numel() const { return channels * height * width; }
};

/// A random-access dataset of labelled images. Implementations must be safe to call from
/// several threads at once (the loader's workers share one instance).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// Shape of every image get() writes.
  virtual ImageShape shape() const = 0;
  /// Writes sample `index` as uint8 CHW (shape()) into `out` and returns its label.
  /// `aug_seed` seeds any random augmentation, so a sample is the same whichever worker
  /// builds it. Throws DataError for an unreadable sample.
  virtual int64_t get(int64_t index, uint64_t aug_seed, uint8_t* out) const = 0;
};

/// SplitMix64: a tiny, fast, well-distributed 64-bit generator; the state is the seed.
struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  /// Uniform double in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

/// Mixes several values into one seed (order matters).
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0) {
  SplitMix64 r(a * 0x100000001B3ull ^ (b + 0x632BE59BD9B4E019ull));
  uint64_t x = r.next();
  SplitMix64 r2(x ^ (c * 0xD6E8FEB86659FD93ull));
  return r2.next();
}

}  // namespace ptune::data
