#include "proc/step_lines.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "core/log.hpp"

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

namespace {

/// Whether `step` falls from `highest` far enough to start a new pass (an epoch, a progress bar):
/// to under half, and by 3 or more. A smaller fall is a step already seen.
bool starts_anew(int64_t step, int64_t highest) { return step * 2 < highest && highest - step >= 3; }

}  // namespace

std::optional<StepCounter::Interval> StepCounter::add(double t_ms, std::optional<int64_t> step) {
  ++lines_;
  if (!step) {
    steps_ += per_match_;
    std::optional<Interval> closed;
    if (last_t_ && !last_step_) closed = Interval{t_ms - *last_t_, per_match_};
    last_t_ = t_ms;
    return closed;
  }
  if (last_step_ && *step <= *last_step_ && !starts_anew(*step, *last_step_))
    return std::nullopt;  // a step already seen: another rank's line, a redrawn bar
  std::optional<Interval> closed;
  if (last_step_ && *step < *last_step_) {
    base_ = steps_ - *step;  // a new pass: counted afresh, the total going on from here
  } else if (last_t_ && last_step_) {
    closed = Interval{t_ms - *last_t_, *step - *last_step_};
  }
  steps_ = std::max(steps_, base_ + *step);
  last_t_ = t_ms;
  last_step_ = step;
  return closed;
}

std::optional<int64_t> StepNumbering::number(const StepNumbers& n) {
  if (!n.step) return std::nullopt;
  if (!n.total || *n.total <= 0) return n.step;  // StepCounter finds its passes
  const int64_t total = *n.total;
  if (n.epoch && *n.epoch <= (INT64_MAX - *n.step) / total) return *n.epoch * total + *n.step;
  return in_bar(*n.step, total);
}

std::optional<int64_t> StepNumbering::in_bar(int64_t step, int64_t total) {
  if (total_ && total != *total_) {
    if (pass_high_ < *total_) return std::nullopt;  // another bar while the followed one runs
    base_ = highest_ - step;  // the bar followed has ended: the next one goes on from its count
    pass_high_ = 0;
  } else if (total_ && starts_anew(step, pass_high_)) {
    base_ += *total_;  // the same bar again (the next epoch's): on from its total
    pass_high_ = 0;
  }
  total_ = total;
  pass_high_ = std::max(pass_high_, step);
  highest_ = std::max(highest_, base_ + step);
  return base_ + step;
}

RankedLine split_rank_prefix(const std::string& line) {
  // torchrun --tee: "[{role}{local rank}]:" before each line, e.g. "[default0]:" or "[trainer1]:".
  RankedLine r{std::nullopt, line};
  if (line.empty() || line[0] != '[') return r;
  size_t i = 1;
  while (i < line.size() && (std::isalpha(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
  const size_t digits = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i == digits || i + 1 >= line.size() || line[i] != ']' || line[i + 1] != ':') return r;
  r.rank = line.substr(1, i - 1);
  r.text = line.substr(i + 2);
  return r;
}

namespace {

/// The patterns program.step_pattern stands for: a logger's, every logger's for "auto", or the
/// regular expression.
std::vector<StepPattern> patterns_of(const std::string& text) {
  std::vector<StepPattern> out;
  if (text == config::kDetectStepLogger) {
    for (const config::StepLogger& l : config::step_loggers()) out.emplace_back(l.regex);
  } else if (const config::StepLogger* l = config::find_step_logger(text)) {
    out.emplace_back(l->regex);
  } else {
    out.emplace_back(text);
  }
  return out;
}

}  // namespace

StepReader::StepReader(const std::string& step_pattern)
    : text_(step_pattern), patterns_(patterns_of(step_pattern)) {
  detecting_ = text_ == config::kDetectStepLogger;
  if (detecting_)
    hits_.assign(patterns_.size(), 0);
  else
    chosen_ = 0;
}

bool StepReader::matches(const StepPattern& p, const std::string& line, const RankedLine& ranked,
                         StepNumbers* n) const {
  // The line as printed first: a pattern may name the prefix itself.
  return p.match(line, n) || (ranked.rank && p.match(ranked.text, n));
}

bool StepReader::detect(const std::string& line, const RankedLine& ranked) {
  StepNumbers n;
  for (size_t i = 0; i < patterns_.size(); ++i) {
    if (!matches(patterns_[i], line, ranked, &n)) continue;
    if (++hits_[i] < 2) return false;
    chosen_ = i;
    detecting_ = false;
    const config::StepLogger& l = config::step_loggers()[i];
    log::debug(std::string("program.step_pattern \"auto\": the program prints ") + l.what +
               "; its steps are read as program.step_pattern \"" + l.name + "\" reads them");
    return true;
  }
  return false;
}

bool StepReader::match(const std::string& line, std::optional<int64_t>* step) {
  if (step) step->reset();
  const RankedLine ranked = split_rank_prefix(line);
  if (detecting_ && !detect(line, ranked)) return false;
  StepNumbers n;
  if (!matches(patterns_[*chosen_], line, ranked, &n)) return false;
  if (!n.step) {  // no number: the lines of one rank count
    if (!ranked.rank) return true;
    if (!rank_) rank_ = ranked.rank;
    return *rank_ == *ranked.rank;
  }
  const std::optional<int64_t> number = numbering_.number(n);
  if (!number) return false;
  if (step) *step = number;
  return true;
}

std::string StepReader::described() const {
  if (text_ == config::kDetectStepLogger) {
    std::string names;
    for (const config::StepLogger& l : config::step_loggers())
      names += std::string(names.empty() ? "" : ", ") + l.name;
    return "program.step_pattern 'auto' (two lines of one of: " + names + ")";
  }
  return "program.step_pattern '" + text_ + "'";
}

std::optional<std::string> StepReader::detected() const {
  if (text_ != config::kDetectStepLogger || !chosen_) return std::nullopt;
  return std::string(config::step_loggers()[*chosen_].name);
}

std::optional<std::string> StepReader::detection_note() const {
  const std::optional<std::string> name = detected();
  if (!name) return std::nullopt;
  return "step lines: " + std::string(config::step_loggers()[*chosen_].what) +
         ", found by program.step_pattern \"auto\" (set \"" + *name + "\" to say so)";
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
