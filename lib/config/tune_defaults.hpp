#pragma once
/// The defaults of `ptune tune`'s search, plain numbers: the command line shows them in its help
/// and starts from them (apps/ptune), and the tuner's options take them (tune/tuner.hpp), so
/// that a command that needs no tensors reads them without the tuner.

#include <cstdint>

namespace ptune::config {

/// The greedy search keeps a change that is faster beyond noise and gains at least this many
/// percent (--threshold).
inline constexpr double kDefaultThresholdPct = 3.0;

/// The batch-size finder leaves this percent of the GPU's memory free (--margin).
inline constexpr double kDefaultMarginPct = 10.0;

/// The largest batch the batch-size finder tries (--max-batch) on a GPU, and on the CPU, where
/// there is no memory limit to find.
inline constexpr int64_t kDefaultMaxBatchCuda = 4096;
inline constexpr int64_t kDefaultMaxBatchCpu = 64;

}  // namespace ptune::config
