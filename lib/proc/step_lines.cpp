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

std::optional<int64_t> StepNumbering::number(const StepNumbers& n) {
  if (!n.step) return std::nullopt;
  const bool whole_run = n.epoch && n.total && *n.total > 0 && *n.epoch <= (INT64_MAX - *n.step) / *n.total;
  if (!whole_run) return in_pass(*n.step, n.total);
  const int64_t v = *n.epoch * *n.total + *n.step;
  if (highest_ && v <= *highest_) return std::nullopt;  // a step already seen
  highest_ = v;
  return v;
}

std::optional<int64_t> StepNumbering::in_pass(int64_t step, std::optional<int64_t> total) {
  if (total != total_) {
    // Another progress bar: followed once the one followed has reached its end (or has none).
    if (highest_ && total_ && pass_high_ < *total_) return std::nullopt;
    total_ = total;
    if (highest_) {  // the steps across the change of bar are not counted
      base_ = *highest_ - step, pass_high_ = step;
      return highest_;
    }
  }
  if (highest_ && step * 2 < pass_high_ && pass_high_ - step >= 3) {  // a new pass
    pass_high_ = step;
    if (!total_) {  // how many steps it skipped is not known: not counted
      base_ = *highest_ - step;
      return highest_;
    }
    base_ += *total_;
    if (base_ + step <= *highest_) return highest_;
  }
  const int64_t v = base_ + step;
  if (highest_ && v <= *highest_) return std::nullopt;  // a step already seen
  pass_high_ = std::max(pass_high_, step);
  highest_ = v;
  return v;
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

StepReader::StepReader(const std::string& step_pattern) : text_(step_pattern), patterns_(patterns_of(step_pattern)) {
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
