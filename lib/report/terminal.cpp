#include "report/terminal.hpp"

#include <cstdio>
#include <cstring>

namespace ptune::report {

TerminalStyle terminal_style(bool is_tty, const char* term, const char* no_color) {
  TerminalStyle s;
  s.escapes = is_tty && term && *term && std::strcmp(term, "dumb") != 0;
  s.color = s.escapes && !(no_color && *no_color);
  return s;
}

std::string ProgressLine::tick(size_t index, size_t rows, const std::string& name, const std::string& phase,
                               int64_t step, int64_t steps, int64_t samples_per_step, double now_s) {
  const std::string key = std::to_string(index) + "\n" + phase;
  if (key != key_) {
    key_ = key;
    first_step_ = step;
    first_s_ = now_s;
  }
  const double secs = now_s - first_s_;
  const int64_t timed = step - first_step_;
  std::string rate;
  if (timed > 0 && secs >= kMinRateSeconds) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %.1f samples/s  ETA %.0fs", timed * samples_per_step / secs,
                  static_cast<double>(steps - step) * secs / timed);
    rate = buf;
  }
  char head[64];
  std::snprintf(head, sizeof head, "[%zu/%zu] ", index + 1, rows);
  const std::string text =
      head + name + ": " + phase + " " + std::to_string(step) + "/" + std::to_string(steps) + rate;
  const bool done = step == steps;
  if (!escapes_) return done || step == 0 ? text + "\n" : std::string();
  std::string out = "\r\033[K" + text;
  if ((phase == "measure" || phase == "profile") && done) out += "\r\033[K";
  return out;
}

std::string ProgressLine::clear() const { return escapes_ ? "\r\033[K" : ""; }

}  // namespace ptune::report
