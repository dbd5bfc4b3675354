#include "proc/step_lines.hpp"

#include <algorithm>

namespace ptune::proc {

std::vector<Line> LineSplitter::feed(const char* bytes, size_t n, double t_ms) {
  std::vector<Line> out;
  auto cut = [&] {
    Line l;
    l.text.swap(partial_);
    l.t_ms = t_ms;
    l.err = err_;
    out.push_back(std::move(l));
  };
  for (size_t i = 0; i < n; ++i) {
    const char c = bytes[i];
    if (c == '\n' || c == '\r') {
      if (!partial_.empty()) cut();
      continue;
    }
    partial_.push_back(c);
    if (partial_.size() >= kMaxLine) cut();
  }
  return out;
}

std::optional<Line> LineSplitter::finish(double t_ms) {
  if (partial_.empty()) return std::nullopt;
  Line l{std::move(partial_), t_ms, err_};
  partial_.clear();
  return l;
}

std::optional<StepCounter::Interval> StepCounter::add(double t_ms, std::optional<int64_t> step) {
  ++lines_;
  std::optional<Interval> closed;
  if (step) {
    steps_ = std::max(steps_, *step);
    if (last_t_ && last_step_ && *step > *last_step_) closed = Interval{t_ms - *last_t_, *step - *last_step_};
  } else {
    steps_ += per_match_;
    if (last_t_ && !last_step_) closed = Interval{t_ms - *last_t_, per_match_};
  }
  last_t_ = t_ms;
  last_step_ = step;
  return closed;
}

void Tail::add(const std::string& line) {
  lines_.push_back(line.size() > 200 ? line.substr(0, 197) + "..." : line);
  while (lines_.size() > keep_) lines_.pop_front();
}

std::string Tail::text() const {
  std::string s;
  for (const auto& l : lines_) s += (s.empty() ? "" : " | ") + l;
  return s;
}

}  // namespace ptune::proc
