#include "analyze/step_windows.hpp"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "analyze/correlations.hpp"
#include "analyze/events.hpp"
#include "analyze/intervals.hpp"
#include "analyze/name_times.hpp"

namespace ptune::analyze {
namespace {

/// Without steps, one-time set-up with the device idle at the start of window `s`: host calls
/// of 100 ms or more (creating streams and events, lazy loading of kernels, cuDNN's first
/// calls, freeing the caching allocator's blocks). The window starts after the last one when
/// device work follows it; those calls are added to `stalls`.
void skip_setup(const Trace& t, StepBreakdown& s, std::vector<NameTime>* stalls) {
  Ranges device;
  for (const auto& e : t.events)
    if (is_device(e)) device.emplace_back(e.ts, e.end());
  device = merge(std::move(device));
  NameTimes found;
  double last_end = -1e300;
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.dur >= 100000 && total(clip(device, e.ts, e.end())) < 0.1 * e.dur) {
      add_time(found, e.name, e.dur, e.dur);
      last_end = std::max(last_end, e.end());
    }
  const bool work_after = !device.empty() && device.back().second > last_end;
  if (!found.empty() && last_end > s.start && work_after) {
    s.start = last_end;
    for (const auto& n : top_times(found, false, kTopN)) stalls->push_back(n);
  }
}

/// The window of a trace without steps: the whole trace, less what came before its device work
/// (`before_us`; the set-up calls in `stalls`).
StepBreakdown whole_trace_window(const Trace& t, double* before_us, std::vector<NameTime>* stalls) {
  StepBreakdown s;
  s.name = "whole trace";
  s.start = 1e300;
  s.end = -1e300;
  for (const auto& e : t.events) s.start = std::min(s.start, e.ts), s.end = std::max(s.end, e.end());
  // A trace recorded without a schedule often starts before the model's first kernel: CUDA's
  // initialization, the first allocations, copying the model to the device. The window starts
  // at the launch of the first device work; what comes before is left out (and said).
  double first_dev = 1e300;
  int64_t first_corr = -1;
  for (const auto& e : t.events)
    if (is_device(e) && e.ts < first_dev) first_dev = e.ts, first_corr = e.correlation;
  if (first_dev >= 1e300) return s;
  double from = first_dev;
  if (first_corr >= 0)
    for (const auto& e : t.events)
      if (e.kind == Kind::kRuntime && e.correlation == first_corr) from = std::min(from, e.ts);
  const double trace_start = s.start;
  if (from - s.start > 0.01 * (s.end - s.start) && from > s.start) s.start = from;
  skip_setup(t, s, stalls);
  if (s.start > trace_start) *before_us = s.start - trace_start;
  return s;
}

/// The windows of the ProfilerStep#N host spans `host` (sorted by start), each extended to the
/// end of the device work launched from it (and the first one back to its first device work),
/// kept apart from the next step and after `prev_end`.
std::vector<StepBreakdown> step_windows(const Trace& t, const std::vector<const Event*>& host,
                                        double prev_end) {
  std::vector<std::pair<int64_t, const Event*>> calls;  // correlation -> runtime call (the last)
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.correlation >= 0) calls.emplace_back(e.correlation, &e);
  const ByCorrelation<const Event*> launch(std::move(calls),
                                           [](const Event*& a, const Event* const& b) { a = b; });
  std::vector<double> dev_min(host.size(), 1e300), dev_max(host.size(), -1e300);
  for (const auto& e : t.events) {
    if (!is_device(e)) continue;
    const Event* const* call = launch.find(e.correlation);
    if (!call) continue;
    const double at = (*call)->ts;
    auto st =
        std::upper_bound(host.begin(), host.end(), at, [](double v, const Event* s) { return v < s->ts; });
    if (st == host.begin()) continue;
    const size_t i = static_cast<size_t>(st - host.begin()) - 1;
    if (at > host[i]->end()) continue;
    dev_min[i] = std::min(dev_min[i], e.ts);
    dev_max[i] = std::max(dev_max[i], e.end());
  }
  std::vector<StepBreakdown> steps;
  for (size_t i = 0; i < host.size(); ++i) {
    StepBreakdown s;
    s.name = std::string(host[i]->name);
    const bool first = i == 0 && t.part.first;
    s.start = std::max(first ? std::min(host[i]->ts, dev_min[i]) : host[i]->ts, prev_end);
    s.end = std::max({host[i]->end(), dev_max[i], s.start});
    s.host_start = host[i]->ts;
    s.host_end = host[i]->end();
    prev_end = s.end;
    steps.push_back(s);
  }
  return steps;
}

}  // namespace

std::vector<StepBreakdown> windows(const Trace& t, double prev_end, bool* from_steps, double* before_us,
                                   std::vector<NameTime>* stalls) {
  std::vector<const Event*> host;
  for (const auto& e : t.events)
    if (is_step(e) && t.part.own(e.ts)) host.push_back(&e);
  std::sort(host.begin(), host.end(), [](const Event* a, const Event* b) { return a->ts < b->ts; });
  *from_steps = !host.empty();
  if (host.empty()) {
    StepBreakdown w = whole_trace_window(t, before_us, stalls);
    w.host_start = w.start, w.host_end = w.end;
    return {w};
  }
  return step_windows(t, host, prev_end);
}

}  // namespace ptune::analyze
