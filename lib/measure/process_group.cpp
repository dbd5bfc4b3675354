#include "measure/process_group.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace ptune::measure {

// ---------------------------------------------------------------- several processes

namespace {

/// A figure some processes' Measurements have, summed weighted by their windows.
struct WeightedSum {
  double sum = 0;
  bool any = false;

  void add(double weight, const std::optional<double>& value) {
    if (value) sum += weight * *value, any = true;
  }
  /// The mean over `weight` (all the processes' windows); none where no process had the figure.
  std::optional<double> mean(double weight) const {
    return any ? std::optional<double>(sum / weight) : std::nullopt;
  }
};

/// The Measurements of a group's processes merged into one: the first process's, with the others'
/// notes added once each, the step split, page faults, system time and busy cores averaged by
/// windows, the peak memory the largest.
class MergedResults {
 public:
  /// A process's note on its windows cut short counts its own windows (kept of them): it is taken
  /// out of `m`, and the group's note counts them all.
  void count_short(Measurement& m, size_t kept) {
    if (m.short_windows == 0) return;
    short_windows_ += m.short_windows;
    const std::string own = short_windows_note(m.short_windows, kept, m.steps);
    m.notes.erase(std::remove(m.notes.begin(), m.notes.end(), own), m.notes.end());
  }

  /// Adds a process's Measurement `m` over `windows` of its windows.
  void add(Measurement m, double windows) {
    weight_ += windows;
    if (m.split) {
      split_weight_ += windows;
      wait_ += windows * m.split->data_wait_pct;
      h2d_ += windows * m.split->h2d_pct;
      compute_ += windows * m.split->compute_pct;
    }
    faults_.add(windows, m.page_faults_per_step);
    system_.add(windows, m.system_time_pct);
    cores_.add(windows, m.cpu_cores_busy);
    if (m.peak_rss_bytes) peak_rss_ = std::max(peak_rss_, *m.peak_rss_bytes);
    if (!merged_) {
      merged_ = std::move(m);
      return;
    }
    for (auto& note : m.notes)
      if (std::find(merged_->notes.begin(), merged_->notes.end(), note) == merged_->notes.end())
        merged_->notes.push_back(std::move(note));
  }

  /// The merged Measurement, with the group's windows `ms` in order and the process of each.
  Measurement done(const std::vector<double>& ms, const std::vector<int>& process) {
    Measurement& m = *merged_;
    m.split = split_weight_ > 0 ? std::optional<Measurement::StepSplit>(
                                      {wait_ / split_weight_, h2d_ / split_weight_, compute_ / split_weight_})
                                : std::nullopt;
    m.page_faults_per_step = faults_.mean(weight_);
    m.system_time_pct = system_.mean(weight_);
    m.cpu_cores_busy = cores_.mean(weight_);
    if (peak_rss_ > 0) m.peak_rss_bytes = peak_rss_;
    set_windows(m, ms, 1, process);
    m.short_windows = short_windows_;
    if (short_windows_ > 0) m.notes.push_back(short_windows_note(short_windows_, ms.size(), m.steps));
    return m;
  }

 private:
  std::optional<Measurement> merged_;
  int64_t short_windows_ = 0;
  double weight_ = 0, split_weight_ = 0;
  double wait_ = 0, h2d_ = 0, compute_ = 0;
  WeightedSum faults_, system_, cores_;
  int64_t peak_rss_ = 0;
};

}  // namespace

ProcessGroup::ProcessGroup(std::vector<std::unique_ptr<RowSide>> children, bool shifted)
    : children_(std::move(children)),
      retired_(children_.size()),
      shifted_(shifted),
      counts_(children_.size(), 0) {
  if (children_.empty()) throw std::logic_error("ProcessGroup: no process");
  for (size_t p = 0; p < children_.size(); ++p) live_.push_back(static_cast<int>(p));
  description_ = children_.front()->process_description();
}

int ProcessGroup::turn(size_t n) const {
  const size_t k = live_.size();
  return live_[(shifted_ ? n + n / k : n) % k];
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
  for (auto& child : children_)
    if (child) child->mark_previous();
  shifted_ = shifted;
  process_.clear();
  local_.clear();
  last_ = -1;
}

bool ProcessGroup::reusable(size_t count) const {
  return live_.size() >= count && std::all_of(live_.begin(), live_.end(),
                                              [this](int p) { return counts_[static_cast<size_t>(p)] > 0; });
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
  const auto k = static_cast<int64_t>(live_.size());
  progress_ = progress;
  share_ = (planned + k - 1) / k;
  steps_done_.assign(children_.size(), 0);
  steps_planned_.assign(children_.size(), share_ * steps_per_window());
  for (int p : live_) wire_progress(static_cast<size_t>(p));
}

void ProcessGroup::wire_progress(size_t p) {
  children_[p]->set_progress(
      [this, p](const std::string& phase, int64_t step, int64_t total) {
        if (!progress_) return;
        if (phase != "measure") return progress_(phase, step, total);
        steps_done_[p] = step;
        steps_planned_[p] = total;
        progress_(phase, std::accumulate(steps_done_.begin(), steps_done_.end(), int64_t{0}),
                  std::accumulate(steps_planned_.begin(), steps_planned_.end(), int64_t{0}));
      },
      share_);
}

void ProcessGroup::add(std::unique_ptr<RowSide> child) {
  if (!child) throw std::logic_error("ProcessGroup::add: no process");
  live_.push_back(static_cast<int>(children_.size()));
  children_.push_back(std::move(child));
  retired_.emplace_back();
  counts_.push_back(0);
  if (steps_done_.size() + 1 == children_.size()) {
    steps_done_.push_back(0);
    steps_planned_.push_back(share_ * steps_per_window());
    wire_progress(children_.size() - 1);
  }
}

void ProcessGroup::retire_oldest() {
  if (live_.size() < 2) throw std::logic_error("ProcessGroup::retire_oldest: the last process alive");
  const auto p = static_cast<size_t>(live_.front());
  if (resumed_ == static_cast<int>(p)) pause();
  if (counts_[p] > 0) retired_[p] = children_[p]->result(0, counts_[p]);
  children_[p].reset();  // ends its process
  live_.erase(live_.begin());
}

std::string ProcessGroup::process_description() const {
  if (children_.size() == 1) return description_;
  return std::to_string(children_.size()) +
         " processes started alike, timed in turn; the first: " + description_;
}

Measurement ProcessGroup::retired_part(size_t p, size_t from, size_t n) const {
  if (!retired_[p]) throw std::logic_error("ProcessGroup: a retired process without a result");
  Measurement m = *retired_[p];
  const auto& all = retired_[p]->repeat_ms;
  if (from + n > all.size()) throw std::logic_error("ProcessGroup: windows past a retired process's");
  m.repeat_ms.assign(all.begin() + static_cast<std::ptrdiff_t>(from),
                     all.begin() + static_cast<std::ptrdiff_t>(from + n));
  return m;
}

Measurement ProcessGroup::result(size_t first, size_t count) {
  const size_t end = count == SIZE_MAX ? process_.size() : std::min(process_.size(), first + count);
  if (first >= end) throw std::runtime_error("no timed window to report");
  // Each process's own windows among them: a contiguous run of its windows.
  std::vector<size_t> from(children_.size(), SIZE_MAX), n(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    from[p] = std::min(from[p], local_[w]);
    ++n[p];
  }
  MergedResults merged;
  std::vector<std::vector<double>> own(children_.size());
  for (size_t p = 0; p < children_.size(); ++p) {
    if (n[p] == 0) continue;
    Measurement m = children_[p] ? children_[p]->result(from[p], n[p]) : retired_part(p, from[p], n[p]);
    merged.count_short(m, n[p]);
    own[p] = m.repeat_ms;
    merged.add(std::move(m), static_cast<double>(n[p]));
  }
  // The windows in the group's order, each from its process's own result.
  std::vector<double> ms;
  std::vector<int> process;
  std::vector<size_t> taken(children_.size(), 0);
  for (size_t w = first; w < end; ++w) {
    const auto p = static_cast<size_t>(process_[w]);
    ms.push_back(own[p].at(taken[p]++));
    process.push_back(process_[w]);
  }
  return merged.done(ms, process);
}

}  // namespace ptune::measure
