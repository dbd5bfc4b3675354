#pragma once
/// program.step_pattern compiled: what the config checks (a logger's name, or a pattern that
/// compiles) and what a program's instance matches its lines against (proc/step_lines.hpp).
/// PCRE2, linked statically; torch-free.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ptune::config {

/// A logger whose step lines program.step_pattern names instead of a regular expression: a value
/// that is exactly one of these names is the name, anything else a regular expression.
struct StepLogger {
  const char* name;   // as program.step_pattern spells it
  const char* regex;  // its step lines: groups `step` and, where it prints them, `total` and `epoch`
  const char* what;   // for a person: whose lines they are
};

/// The loggers by name, in the order program.step_pattern "auto" tries them.
const std::vector<StepLogger>& step_loggers();
/// The logger named exactly `name`; null for any other text.
const StepLogger* find_step_logger(const std::string& name);
/// program.step_pattern's default: try the loggers on the program's first lines.
inline constexpr const char* kDetectStepLogger = "auto";
/// "auto, tqdm, torchvision, timm, step": the names program.step_pattern takes, for messages.
std::string step_logger_names();

/// What a step line's named groups captured: `step` (the step or iteration number), `total` (the
/// steps of one epoch or one progress bar) and `epoch`, each where the pattern has it and it
/// captured digits.
struct StepNumbers {
  std::optional<int64_t> step, total, epoch;
};

/// program.step_pattern compiled (PCRE2, Perl syntax): a named group `step` captures the step
/// number where the pattern has one.
class StepPattern {
 public:
  /// Throws std::invalid_argument "<why> at offset N" for a pattern that does not compile, or a
  /// `step` group that is not a named group of the pattern.
  explicit StepPattern(const std::string& pattern);
  ~StepPattern();
  StepPattern(StepPattern&&) noexcept;
  StepPattern& operator=(StepPattern&&) noexcept;
  /// Whether `line` matches; `step` (when the pattern has a `step` group that matched digits) is
  /// the number it captured. Not for two threads at once (one match buffer). Throws nothing.
  bool match(const std::string& line, std::optional<int64_t>* step = nullptr) const;
  /// As match(), with every number the line's named groups captured.
  bool match(const std::string& line, StepNumbers* numbers) const;
  /// Whether the pattern has a named group `step`.
  bool counts_steps() const { return step_group_ > 0; }
  const std::string& text() const { return text_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string text_;
  int step_group_ = 0, total_group_ = 0, epoch_group_ = 0;
};

}  // namespace ptune::config
