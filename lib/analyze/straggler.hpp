#pragma once
/// Stragglers of a data-parallel run: per rank the step time, its compute and input time and the
/// time it waited in collectives; the rank the others wait for (the one that waits least) and
/// why: slower input, more compute, or a slower device (the same work taking longer).

#include <optional>
#include <string>
#include <vector>

namespace ptune::analyze {

struct Analysis;  // analyze/advice.hpp

/// One rank, per step (the mean over its steps); times in microseconds.
struct RankTimes {
  size_t index = 0;  // into Analysis::ranks
  double step_us = 0;
  double compute_us = 0;  // GPU: merged computation kernels; CPU: operators' self time (not communication)
  double input_us = 0;    // the data loader
  double wait_us = 0;     // merged time in collectives (NCCL kernels, both ncclKernel_* and
                          // ncclDevKernel_*; Gloo and c10d operators on a CPU)
  double work = 0;        // the work done: FLOPs per step when the trace allows, else calls
  std::string work_unit;  // "FLOPs", "kernels", "operator calls"
};

/// The rank the others wait for.
struct Straggler {
  std::vector<RankTimes> ranks;
  std::optional<size_t> slow;  // index into `ranks`; none when the ranks wait alike
  std::string why;             // "slower input" | "more compute" | "a slower device"
  std::string text;            // one line, the evidence
};

/// The others wait for a rank when their wait exceeds its by at least this share of the step.
inline constexpr double kStragglerPct = 1.0;

/// Finds the straggler of an analysis of two or more ranks (Analysis::ranks and their
/// throughput). Throws nothing.
Straggler find_straggler(const Analysis& a);

}  // namespace ptune::analyze
