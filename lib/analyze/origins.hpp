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
    std::vector<std::string> steps;
  };
  std::map<std::pair<std::string, std::string>, Entry> by;

  /// Adds `calls` (host syncs in `steps`, named as `names`) of trace `t`.
  void add(const Trace& t, const std::vector<const Event*>& calls, const std::vector<std::string>& names,
           const std::vector<StepBreakdown>& steps);

  /// The origins, most calls first (ten at most).
  std::vector<SyncOrigin> list() const;
};

}  // namespace ptune::analyze
