#pragma once
/// What the terminal gets: colour and cursor-control escapes only where they work, and the
/// live progress line of a sweep (row, phase, step, samples/s, ETA).

#include <cstdint>
#include <optional>
#include <string>

namespace ptune::report {

/// Which escape codes an output stream may carry.
struct TerminalStyle {
  bool escapes = false;  // cursor control (\r\033[K: rewrite the progress line in place)
  bool color = false;    // ANSI colours
};

/// The style of a stream: escapes on a terminal whose TERM is set and not "dumb"; colour
/// there too unless NO_COLOR is set to a non-empty value (https://no-color.org: an empty
/// NO_COLOR does not count). `term` and `no_color` are the variables' values, nullptr when
/// unset. Throws nothing.
TerminalStyle terminal_style(bool is_tty, const char* term, const char* no_color);

/// The live progress line of a sweep. Rates are taken over the steps since the phase's first
/// tick, and shown only once at least one step and kMinRateSeconds have passed since then, so
/// the first ticks of a phase never show a rate from a step that was not timed.
class ProgressLine {
 public:
  static constexpr double kMinRateSeconds = 0.25;

  /// `escapes`: rewrite one line in place (\r\033[K); without, print a plain line when a
  /// phase ends (for TERM=dumb and other terminals without cursor control).
  explicit ProgressLine(bool escapes) : escapes_(escapes) {}

  /// What to write to stderr for one tick, possibly "": row `index` of `rows` named `name`,
  /// `phase` ("warmup", "measure", ...), step `step` of `steps`, `samples_per_step` samples
  /// each, at `now_s` seconds on any monotonic clock. Throws nothing.
  std::string tick(size_t index, size_t rows, const std::string& name, const std::string& phase, int64_t step,
                   int64_t steps, int64_t samples_per_step, double now_s);

  /// What clears the line at the end ("" without escapes). Throws nothing.
  std::string clear() const;

 private:
  bool escapes_;
  std::string key_;         // row and phase of the current phase
  int64_t first_step_ = 0;  // the step of the phase's first tick
  double first_s_ = 0;      // and when it came
};

}  // namespace ptune::report
