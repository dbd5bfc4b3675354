#pragma once
/// The one table of bottleneck rules: which figure crosses which threshold, what it means, and
/// the next move, said twice — as ptune's config key (the sweep's diagnosis, and `ptune
/// analyze` on ptune's own traces) and as the PyTorch code change (`ptune analyze` on a
/// Python trace). The sweep's diagnosis (measure/diagnosis) and the trace analysis
/// (analyze/advice) both read their thresholds here; docs/analyze.md's rule table is rules_markdown().

#include <string>
#include <vector>

namespace ptune::measure {

/// The rules, in the order they are tried: the first that fires is the verdict.
enum class RuleId {
  kInputBound,   // waiting for data
  kCopyBound,    // host-to-device copies
  kSyncBound,    // the host waiting on the device (per-step syncs)
  kCommBound,    // data-parallel communication not hidden behind compute
  kAllocator,    // CPU: the step's time in the kernel, faulting in memory the allocator gave back
  kLaunchBound,  // the GPU idle between kernels
  kHostBound,    // CPU trace: the step's time outside operators (Python between them, waits)
  kComputeFp32,  // compute, with fp32 math (no Tensor Cores / AMP off)
  kCompute,      // compute
  kLowMemory,    // an addition to any verdict: room for a larger batch
  kZeroGrad,     // an addition: gradients zeroed by kernels instead of dropped
};

/// One rule of the table.
struct Rule {
  RuleId id;
  const char* name;         // the verdict's first word(s): "input-bound"
  const char* figure;       // what is compared: "data wait (% of the step)"
  const char* comparison;   // ">=" or "<" (the rule fires when `figure comparison threshold`)
  double threshold;         // in the figure's unit (percent)
  const char* ptune_move;   // the next move as ptune config keys
  const char* python_move;  // the next move in a PyTorch (Python) training loop
};

/// Every rule, in RuleId order. Throws nothing.
const std::vector<Rule>& rules();

/// The rule `id`. Throws nothing.
const Rule& rule(RuleId id);

/// Whether `value` makes rule `id` fire (`value >= threshold` or `value < threshold`).
/// Throws nothing.
bool fires(RuleId id, double value);

/// The table as docs/analyze.md shows it (GitHub Markdown): one line per rule with its figure,
/// threshold and both moves. Throws nothing.
std::string rules_markdown();

}  // namespace ptune::measure
