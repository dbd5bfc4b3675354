#include "measure/process_group.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace ptune::measure {

// ---------------------------------------------------------------- several processes

ProcessGroup::ProcessGroup(std::vector<std::unique_ptr<RowSide>> children, bool shifted)
    : children_(std::move(children)), shifted_(shifted), counts_(children_.size(), 0) {
  if (children_.empty()) throw std::logic_error("ProcessGroup: no process");
}

int ProcessGroup::turn(size_t n) const {
  const size_t k = children_.size();
  return static_cast<int>((shifted_ ? n + n / k : n) % k);
}

double ProcessGroup::window(const Deadline& deadline) {
  const int next = turn(process_.size());
  if (resumed_ != next) {
    if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
    children_[static_cast<size_t>(next)]->resume();
    resumed_ = next;
  }
  const double ms = children_[static_cast<size_t>(next)]->window(deadline);
  process_.push_back(next);
  local_.push_back(counts_[static_cast<size_t>(next)]++);
  last_ = next;
  return ms;
}

void ProcessGroup::restart(bool shifted) {
  for (auto& child : children_) child->mark_previous();
  shifted_ = shifted;
  process_.clear();
  local_.clear();
  last_ = -1;
}

bool ProcessGroup::reusable(size_t count) const {
  return children_.size() == count &&
         std::all_of(counts_.begin(), counts_.end(), [](size_t n) { return n > 0; });
}

void ProcessGroup::pause() {
  if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
  resumed_ = -1;
}

void ProcessGroup::resume() {
  const int next = turn(process_.size());
  if (resumed_ == next) return;
  if (resumed_ >= 0) children_[static_cast<size_t>(resumed_)]->pause();
  children_[static_cast<size_t>(next)]->resume();
  resumed_ = next;
}

void ProcessGroup::set_progress(const Progress& progress, int64_t planned) {
  // Each process's windows are a share of the row's; its progress in steps counts toward the
  // group's (the others' steps so far added).
  const auto k = static_cast<int64_t>(children_.size());
  const int64_t share = (planned + k - 1) / k;
  steps_done_.assign(children_.size(), 0);
  steps_planned_.assign(children_.size(), share * steps_per_window());
  for (size_t p = 0; p < children_.size(); ++p)
    children_[p]->set_progress(
        [this, p, progress](const std::string& phase, int64_t step, int64_t total) {
          if (!progress) return;
          if (phase != "measure") return progress(phase, step, total);
          steps_done_[p] = step;
          steps_planned_[p] = total;
          progress(phase, std::accumulate(steps_done_.begin(), steps_done_.end(), int64_t{0}),
                   std::accumulate(steps_planned_.begin(), steps_planned_.end(), int64_t{0}));
        },
        share);
}

std::string ProcessGroup::process_description() const {
  const std::string first = children_.front()->process_description();
  if (children_.size() == 1) return first;
  return std::to_string(children_.size()) + " processes started alike, timed in turn; the first: " + first;
}

Measurement ProcessGroup::result(size_t first, size_t count) {
  const size_t end = count == SIZE_MAX ? process_.size() : std::min(process_.size(), first + count);
  if (first >= end) throw std::runtime_error("no timed window to report");
  std::vector<double> ms;
  std::vector<int> process;
  // Each process's own windows among them: a contiguous run of its windows.
  std::vector<size_t> from(children_.size(), SIZE_MAX), n(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    from[p] = std::min(from[p], local_[w]);
    ++n[p];
  }
  std::optional<Measurement> merged;
  // A process's note on its windows cut short counts its own windows: the group's counts all.
  int64_t short_windows = 0;
  auto counted_short = [&](Measurement& m, size_t kept) {
    if (m.short_windows == 0) return;
    short_windows += m.short_windows;
    const std::string own = short_windows_note(m.short_windows, kept, m.steps);
    m.notes.erase(std::remove(m.notes.begin(), m.notes.end(), own), m.notes.end());
  };
  double weight = 0, split_weight = 0;
  double wait = 0, h2d = 0, compute = 0, faults = 0, system = 0;
  double cores = 0;
  int64_t peak_rss = 0;
  bool any_faults = false, any_system = false, any_cores = false;
  std::vector<std::vector<double>> own(children_.size());
  for (size_t p = 0; p < children_.size(); ++p) {
    if (n[p] == 0) continue;
    Measurement m = children_[p]->result(from[p], n[p]);
    counted_short(m, n[p]);
    own[p] = m.repeat_ms;
    const double w = static_cast<double>(n[p]);
    weight += w;
    if (m.split) {
      split_weight += w;
      wait += w * m.split->data_wait_pct;
      h2d += w * m.split->h2d_pct;
      compute += w * m.split->compute_pct;
    }
    if (m.page_faults_per_step) faults += w * *m.page_faults_per_step, any_faults = true;
    if (m.system_time_pct) system += w * *m.system_time_pct, any_system = true;
    if (m.cpu_cores_busy) cores += w * *m.cpu_cores_busy, any_cores = true;
    if (m.peak_rss_bytes) peak_rss = std::max(peak_rss, *m.peak_rss_bytes);
    if (!merged) {
      merged = std::move(m);
      continue;
    }
    for (auto& note : m.notes)
      if (std::find(merged->notes.begin(), merged->notes.end(), note) == merged->notes.end())
        merged->notes.push_back(std::move(note));
  }
  // The windows in the group's order, each from its process's own result.
  std::vector<size_t> taken(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    ms.push_back(own[p].at(taken[p]++));
    process.push_back(process_[w]);
  }
  Measurement& m = *merged;
  m.split = split_weight > 0 ? std::optional<Measurement::StepSplit>(
                                   {wait / split_weight, h2d / split_weight, compute / split_weight})
                             : std::nullopt;
  m.page_faults_per_step = any_faults ? std::optional<double>(faults / weight) : std::nullopt;
  m.system_time_pct = any_system ? std::optional<double>(system / weight) : std::nullopt;
  m.cpu_cores_busy = any_cores ? std::optional<double>(cores / weight) : std::nullopt;
  if (peak_rss > 0) m.peak_rss_bytes = peak_rss;
  set_windows(m, ms, 1, process);
  m.short_windows = short_windows;
  if (short_windows > 0) m.notes.push_back(short_windows_note(short_windows, ms.size(), m.steps));
  return m;
}

}  // namespace ptune::measure
