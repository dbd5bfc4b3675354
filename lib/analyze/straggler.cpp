#include "analyze/straggler.hpp"

#include <algorithm>
#include <cstdio>

#include "analyze/advice.hpp"
#include "analyze/events.hpp"

namespace ptune::analyze {
namespace {

std::string ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", us / 1000.0);
  return buf;
}

RankTimes times_of(const Analysis& a, size_t i) {
  const Breakdown& b = a.ranks[i];
  const auto m = b.mean();
  const double nsteps = static_cast<double>(std::max<size_t>(b.steps.size(), 1));
  RankTimes r;
  r.index = i;
  r.step_us = m.end - m.start;
  r.input_us = m.us[kDataLoader];
  r.wait_us = m.comm_us;
  double calls = 0, self = 0;
  for (const auto& o : (b.has_gpu ? b.all_kernels : b.all_operators)) {
    Event e;
    e.kind = b.has_gpu ? Kind::kKernel : Kind::kCpuOp;
    e.name = o.name;
    if (is_communication(e)) continue;
    calls += static_cast<double>(o.count);
    self += o.self_us;
  }
  r.compute_us = b.has_gpu ? m.compute_us : self / nsteps;
  r.work = calls / nsteps;
  r.work_unit = b.has_gpu ? "kernels" : "operator calls";
  if (i < a.throughput.size() && a.throughput[i].flops > 0) {
    r.work = a.throughput[i].flops;
    r.work_unit = "FLOPs";
  }
  return r;
}

std::string why_compute(const Analysis& a, const RankTimes& slow, const RankTimes& others, Straggler& s) {
  const std::string unit = slow.work_unit == others.work_unit ? slow.work_unit : "";
  char line[200];
  if (!unit.empty() && others.work > 0 && slow.work >= 1.05 * others.work) {
    s.why = "more compute";
    std::snprintf(line, sizeof line, "it does %.0f%% more work (%.4g %s per step against %.4g)",
                  100.0 * (slow.work / others.work - 1), slow.work, unit.c_str(), others.work);
    return line;
  }
  s.why = "a slower device";
  std::snprintf(line, sizeof line, "the same work (%.4g %s per step against %.4g) takes ", slow.work,
                slow.work_unit.c_str(), others.work);
  return line + ms(slow.compute_us) + " of compute against " + ms(others.compute_us) +
         (a.ranks[slow.index].has_gpu ? "" : " (a slower CPU, or fewer threads)");
}

}  // namespace

Straggler find_straggler(const Analysis& a) {
  Straggler s;
  for (size_t i = 0; i < a.ranks.size(); ++i) s.ranks.push_back(times_of(a, i));
  if (s.ranks.size() < 2) return s;
  size_t slow = 0;
  double most_wait = 0, longest = 0;
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    if (s.ranks[i].wait_us < s.ranks[slow].wait_us) slow = i;
    most_wait = std::max(most_wait, s.ranks[i].wait_us);
    longest = std::max(longest, s.ranks[i].step_us);
  }
  const RankTimes& r = s.ranks[slow];
  if (longest <= 0 || 100.0 * (most_wait - r.wait_us) / longest < kStragglerPct) {
    s.text = "no straggler: the ranks wait alike in collectives (at most " + ms(most_wait - r.wait_us) +
             " per step apart)";
    return s;
  }
  RankTimes others;  // their mean
  const double n = static_cast<double>(s.ranks.size() - 1);
  others.work_unit = s.ranks[(slow + 1) % s.ranks.size()].work_unit;
  for (size_t i = 0; i < s.ranks.size(); ++i) {
    if (i == slow) continue;
    others.wait_us += s.ranks[i].wait_us / n, others.input_us += s.ranks[i].input_us / n;
    others.compute_us += s.ranks[i].compute_us / n, others.work += s.ranks[i].work / n;
    if (s.ranks[i].work_unit != others.work_unit) others.work_unit.clear();
  }
  s.slow = slow;
  const double d_in = r.input_us - others.input_us, d_comp = r.compute_us - others.compute_us;
  std::string because;
  if (d_in > 0 && d_in >= d_comp) {
    s.why = "slower input";
    because = "its data loader takes " + ms(r.input_us) + " per step against " + ms(others.input_us);
  } else {
    because = why_compute(a, r, others, s);
  }
  s.text = a.ranks[r.index].who() + " is the straggler (" + s.why + "): the others wait " +
           ms(others.wait_us) + " per step in collectives, it waits " + ms(r.wait_us) + "; " + because;
  return s;
}

}  // namespace ptune::analyze
