#pragma once
/// Reading a program's step rate from what it prints (config's `program`): its output cut into
/// lines, each line tested against program.step_pattern, and the steps between two matching lines
/// counted. Torch-free, and free of any process: the program instance (proc/program.hpp) feeds it
/// the bytes it reads and the time it read them.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "config/step_pattern.hpp"

namespace ptune::proc {

using config::StepPattern;

/// One line of the program's output, cut at '\n' or '\r' (a progress bar rewrites its line with
/// '\r'); empty lines are dropped.
struct Line {
  std::string text;
  double t_ms = 0;   // when the bytes that ended it were read (monotonic clock)
  bool err = false;  // from stderr
};

/// Cuts a stream's bytes into lines. A line longer than kMaxLine is cut there (a program that
/// prints no line end must not grow ptune's memory).
class LineSplitter {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;
  explicit LineSplitter(bool err = false) : err_(err) {}
  /// The lines `bytes` (read at `t_ms`) end, in order.
  std::vector<Line> feed(const char* bytes, size_t n, double t_ms);
  /// The rest of the stream once it has ended, as a last line (if not empty).
  std::optional<Line> finish(double t_ms);

 private:
  std::string partial_;
  bool err_ = false;
};

/// The steps a sequence of matching lines stands for: with a `step` group, the difference of two
/// numbers (a number that does not grow, such as a new epoch's first step, starts the count
/// afresh: that interval is not counted); without, program.steps_per_match a line.
class StepCounter {
 public:
  explicit StepCounter(int64_t steps_per_match) : per_match_(steps_per_match) {}
  /// A matching line at `t_ms` with its captured number, if any. Returns the interval it closes
  /// (ms, steps), or none for the first line after forget() or a number that did not grow.
  struct Interval {
    double ms = 0;
    int64_t steps = 0;
  };
  std::optional<Interval> add(double t_ms, std::optional<int64_t> step);
  /// The next line opens a new interval (after a pause: the step the pause cut is not counted).
  void forget() { last_t_.reset(), last_step_.reset(); }
  /// Matching lines seen, and steps counted in all (the first line counts one step, or its
  /// number where it has one).
  int64_t lines() const { return lines_; }
  int64_t steps() const { return steps_; }

 private:
  int64_t per_match_ = 1;
  std::optional<double> last_t_;
  std::optional<int64_t> last_step_;
  int64_t lines_ = 0, steps_ = 0;
};

/// The last lines of an output, for error messages.
class Tail {
 public:
  explicit Tail(size_t keep = 5) : keep_(keep) {}
  void add(const std::string& line);
  /// The lines kept, joined with " | ", each shortened to 200 bytes; "" when none.
  std::string text() const;
  bool empty() const { return lines_.empty(); }

 private:
  size_t keep_;
  std::deque<std::string> lines_;
};

}  // namespace ptune::proc
