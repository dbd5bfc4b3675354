#pragma once
/// program.step_pattern compiled: what the config checks (a pattern that compiles, a `step` group
/// that is a named group of it) and what a program's instance matches its lines against
/// (proc/step_lines.hpp). PCRE2, linked statically; torch-free.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ptune::config {

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
  /// Whether the pattern has a named group `step`.
  bool counts_steps() const { return step_group_ > 0; }
  const std::string& text() const { return text_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string text_;
  int step_group_ = 0;
};

}  // namespace ptune::config
