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

namespace {

/// The number that group `group` of the last match captured in `line`: digits only, at most 18.
std::optional<int64_t> group_number(const std::string& line, pcre2_match_data* md, int rc, int group) {
  if (group <= 0 || group >= rc) return std::nullopt;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  const PCRE2_SIZE b = ov[2 * group], e = ov[2 * group + 1];
  if (b == PCRE2_UNSET || e <= b || e - b > 18) return std::nullopt;
  int64_t v = 0;
  for (PCRE2_SIZE i = b; i < e; ++i) {
    const char c = line[i];
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

int group_named(pcre2_code* re, const char* name) {
  const int n = pcre2_substring_number_from_name(re, reinterpret_cast<PCRE2_SPTR>(name));
  return n > 0 ? n : 0;
}

}  // namespace

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
  step_group_ = group_named(code_->re, "step");
  total_group_ = group_named(code_->re, "total");
  epoch_group_ = group_named(code_->re, "epoch");
}

StepPattern::~StepPattern() = default;
StepPattern::StepPattern(StepPattern&&) noexcept = default;
StepPattern& StepPattern::operator=(StepPattern&&) noexcept = default;

bool StepPattern::match(const std::string& line, std::optional<int64_t>* step) const {
  StepNumbers numbers;
  const bool matched = match(line, &numbers);
  if (step) *step = numbers.step;
  return matched;
}

bool StepPattern::match(const std::string& line, StepNumbers* numbers) const {
  *numbers = StepNumbers{};
  pcre2_match_data* md = code_->md;
  const int rc =
      pcre2_match(code_->re, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0, md, nullptr);
  if (rc <= 0) return false;
  numbers->step = group_number(line, md, rc, step_group_);
  numbers->total = group_number(line, md, rc, total_group_);
  numbers->epoch = group_number(line, md, rc, epoch_group_);
  return true;
}

const std::vector<StepLogger>& step_loggers() {
  // tqdm: "Epoch 0:  40%|████      | 2/5 [00:00<00:00, 89.9it/s]", or "7it [00:01, 4.9it/s]"
  // without a total. torchvision's references (MetricLogger): "Epoch: [0]  [ 40/390]  eta: ...".
  // timm's train.py: "Train: 0 [  50/1251 (  4%)]  Loss: ...".
  static const std::vector<StepLogger> loggers = {
      {"tqdm", R"((?|\d+%\|[^|]*\| *(?<step>\d+)/(?<total>\d+) \[|\b(?<step>\d+)it \[\d))",
       "tqdm's progress bar"},
      {"torchvision", R"(\bEpoch: \[(?<epoch>\d+)\]\s+\[\s*(?<step>\d+)/(?<total>\d+)\])",
       "torchvision's reference scripts"},
      {"timm", R"(\bTrain: (?<epoch>\d+) \[\s*(?<step>\d+)/(?<total>\d+) \()", "timm's train.py"},
      {"step", R"((?i)\bstep\b\D{0,3}(?<step>\d+))", "`step N` lines"},
  };
  return loggers;
}

const StepLogger* find_step_logger(const std::string& name) {
  for (const StepLogger& l : step_loggers())
    if (name == l.name) return &l;
  return nullptr;
}

std::string step_logger_names() {
  std::string names = kDetectStepLogger;
  for (const StepLogger& l : step_loggers()) names += std::string(", ") + l.name;
  return names;
}

}  // namespace ptune::config
