#pragma once
/// The windows a trace's time is split in: its ProfilerStep#N steps, each extended to the device
/// work launched from it, or without steps the whole trace less its set-up.

#include <vector>

#include "analyze/breakdown.hpp"
#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// The windows of the steps of one trace (step_windows), or of its part's own steps, kept after
/// `prev_end` (the previous part's last window's end); without steps, the whole trace
/// (whole_trace_window).
std::vector<StepBreakdown> windows(const Trace& t, double prev_end, bool* from_steps, double* before_us,
                                   std::vector<NameTime>* stalls);

}  // namespace ptune::analyze
