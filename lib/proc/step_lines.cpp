#include "proc/step_lines.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <new>
#include <stdexcept>

namespace ptune::proc {

struct StepPattern::Code {
  pcre2_code* re = nullptr;
  pcre2_match_data* md = nullptr;  // made once: match() runs for every line the program prints
  ~Code() {
    pcre2_match_data_free(md);
    pcre2_code_free(re);
  }
};

StepPattern::StepPattern(const std::string& pattern) : code_(std::make_unique<Code>()), text_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  // A program's output need not be UTF-8: such lines are matched all the same (MATCH_INVALID_UTF).
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (!code_->re) {
    // A pattern that is not UTF-8 text is matched byte by byte instead.
    if (err == PCRE2_ERROR_UTF8_ERR1 || (err <= PCRE2_ERROR_UTF8_ERR1 && err >= PCRE2_ERROR_UTF8_ERR21))
      code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &err,
                                &offset, nullptr);
  }
  if (!code_->re) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(err, message, sizeof message);
    throw std::invalid_argument(std::string(reinterpret_cast<const char*>(message)) + " at offset " +
                                std::to_string(offset));
  }
  code_->md = pcre2_match_data_create_from_pattern(code_->re, nullptr);
  if (!code_->md) throw std::bad_alloc();
  const int n = pcre2_substring_number_from_name(code_->re, reinterpret_cast<PCRE2_SPTR>("step"));
  step_group_ = n > 0 ? n : 0;
}

StepPattern::~StepPattern() = default;
StepPattern::StepPattern(StepPattern&&) noexcept = default;
StepPattern& StepPattern::operator=(StepPattern&&) noexcept = default;

bool StepPattern::match(const std::string& line, std::optional<int64_t>* step) const {
  if (step) step->reset();
  pcre2_match_data* md = code_->md;
  const int rc =
      pcre2_match(code_->re, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0, md, nullptr);
  bool matched = rc > 0;
  if (matched && step && step_group_ > 0 && step_group_ < rc) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const PCRE2_SIZE b = ov[2 * step_group_], e = ov[2 * step_group_ + 1];
    if (b != PCRE2_UNSET && e > b && e - b <= 18) {
      int64_t v = 0;
      bool digits = true;
      for (PCRE2_SIZE i = b; i < e; ++i) {
        const char c = line[i];
        if (c < '0' || c > '9') {
          digits = false;
          break;
        }
        v = v * 10 + (c - '0');
      }
      if (digits) *step = v;
    }
  }
  return matched;
}

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
