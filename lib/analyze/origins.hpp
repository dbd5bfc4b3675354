#pragma once
/// Where a trace's host syncs came from: the call's Python frames (the training code's, past the
/// libraries'), or without them its thread and steps.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analyze/breakdown.hpp"
#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// Where host syncs came from, by (sync name, where): calls, and without a Python stack the steps.
struct Origins {
  struct Entry {
    int64_t count = 0;
    std::map<size_t, std::string> steps;  // the steps it was called in, by their place in the trace
  };
  std::map<std::pair<std::string, std::string>, Entry> by;

  /// Adds `calls` (host syncs in `steps`, named as `names`) of trace `t`; `steps_before`: the
  /// steps of the process added before these (the first's place among them all).
  void add(const Trace& t, const std::vector<const Event*>& calls, const std::vector<std::string>& names,
           const std::vector<StepBreakdown>& steps, size_t steps_before);

  /// The origins, most calls first (ten at most).
  std::vector<SyncOrigin> list() const;
};

}  // namespace ptune::analyze
