#pragma once
/// Reading a program's step rate from what it prints (config's `program`): its output cut into
/// lines, each line read as program.step_pattern says (a regular expression, a logger's name, or
/// "auto": the first logger whose lines the program prints), and the steps between two step lines
/// counted. Torch-free, and free of any process: the program instance (proc/program.hpp) feeds it
/// the bytes it reads and the time it read them.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "config/step_pattern.hpp"

namespace ptune::proc {

using config::StepNumbers;
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

/// The steps a sequence of step lines stands for: with a step number, the difference of two
/// numbers; without, program.steps_per_match a line. A number not above the last is a step already
/// seen (another rank printing the same step, a progress bar redrawn): that line is left out. One
/// that falls to under half the last, and by 3 or more, starts a new pass (an epoch whose count
/// starts again): that interval is not counted, and steps() goes on from where it was.
class StepCounter {
 public:
  explicit StepCounter(int64_t steps_per_match) : per_match_(steps_per_match) {}
  /// A step line at `t_ms` with its number, if any. Returns the interval it closes (ms, steps), or
  /// none for the first line after forget(), a new pass, or a step already seen.
  struct Interval {
    double ms = 0;
    int64_t steps = 0;
  };
  std::optional<Interval> add(double t_ms, std::optional<int64_t> step);
  /// The next line opens a new interval (after a pause: the step the pause cut is not counted).
  /// The last number is kept: a line of a step seen before the pause is still left out.
  void forget() { last_t_.reset(); }
  /// Step lines seen, and steps counted in all (the first line counts one step, or its number
  /// where it has one); steps() never goes back.
  int64_t lines() const { return lines_; }
  int64_t steps() const { return steps_; }

 private:
  int64_t per_match_ = 1;
  std::optional<double> last_t_;
  std::optional<int64_t> last_step_;
  int64_t lines_ = 0, steps_ = 0, base_ = 0;  // base_: what this pass's numbers add to steps()
};

/// The step number of a line from what its pattern captured, for StepCounter: with `epoch` and
/// `total`, epoch * total + step; with a `total` only (a progress bar), the bar's count, going on
/// across bars. A bar that falls to under half its highest (by 3 or more) is the next epoch's:
/// its count goes on from the last bar's total. A bar with another total while the followed bar
/// has not reached its end is another bar (an evaluation's): not a step line (none). Once the
/// followed bar has reached its end, the next bar is followed, its count going on from there.
/// Without a total, the step as captured.
class StepNumbering {
 public:
  std::optional<int64_t> number(const StepNumbers& n);

 private:
  std::optional<int64_t> in_bar(int64_t step, int64_t total);
  int64_t highest_ = 0, base_ = 0, pass_high_ = 0;  // pass_high_: the followed bar's highest count
  std::optional<int64_t> total_;                    // the followed bar's total
};

/// What a program's line holds: torchrun's rank prefix (`[default0]:`, `[rank1]:`, from its
/// --tee) where it has one, and the text after it.
struct RankedLine {
  std::optional<std::string> rank;  // "default0"
  std::string text;                 // the line without the prefix
};
RankedLine split_rank_prefix(const std::string& line);

/// program.step_pattern as a program instance reads its lines: a regular expression, a logger by
/// name (config::step_loggers()), or "auto", which takes the first logger to match two of the
/// program's lines (in the order of step_loggers(), where one line matches several). Each step is
/// counted once however many ranks print it: a number already seen is left out (StepCounter); for a
/// pattern without a number, only the lines of the first rank prefix seen (torchrun --tee) count.
class StepReader {
 public:
  /// Throws std::invalid_argument as StepPattern does, for a regular expression that does not compile.
  explicit StepReader(const std::string& step_pattern);
  /// Whether `line` is a step line; `step`: its number for StepCounter (StepNumbering), where it
  /// has one. Throws nothing.
  bool match(const std::string& line, std::optional<int64_t>* step = nullptr);
  /// program.step_pattern as configured.
  const std::string& text() const { return text_; }
  /// For messages: "program.step_pattern '...'", and for "auto" the names it tries.
  std::string described() const;
  /// The logger "auto" took; none while it has not decided, or for another program.step_pattern.
  std::optional<std::string> detected() const;
  /// A row's note saying which logger "auto" took; none where it took none.
  std::optional<std::string> detection_note() const;

 private:
  /// "auto" while undecided: whether a logger now has two lines; `line`'s hits counted.
  bool detect(const std::string& line, const RankedLine& ranked);
  bool matches(const StepPattern& p, const std::string& line, const RankedLine& ranked, StepNumbers* n) const;
  std::string text_;
  std::vector<StepPattern> patterns_;  // the regular expression, or each logger's
  std::vector<int> hits_;              // "auto": lines each logger has matched
  std::optional<size_t> chosen_;       // the pattern lines are read with
  bool detecting_ = false;
  StepNumbering numbering_;
  std::optional<std::string> rank_;  // the rank whose lines count, for a pattern without a number
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
