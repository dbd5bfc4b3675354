#include "config/step_pattern.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <new>
#include <stdexcept>

namespace ptune::config {

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

}  // namespace ptune::config
