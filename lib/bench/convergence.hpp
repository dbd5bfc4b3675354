#pragma once
/// measure.convergence_steps: a row's loss curve and its comparison with the first row's.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace ptune::bench {

/// Trains a fresh model (seeded as every row) for `steps` steps and returns the loss of each
/// step (in a data-parallel run, the mean over ranks). Used to compare convergence.
std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps);

/// Compares a loss curve with a reference one over the last quarter of the shorter: the
/// verdict "unchanged" when their mean losses there differ by at most `tolerance` (relative),
/// else "altered"; `text` says it with the numbers.
struct ConvergenceVerdict {
  bool altered = false;
  double mean_loss = 0, reference_mean_loss = 0;
  std::string text;
};

ConvergenceVerdict compare_convergence(const std::vector<double>& curve, const std::vector<double>& reference,
                                       double tolerance = 0.10);

}  // namespace ptune::bench
