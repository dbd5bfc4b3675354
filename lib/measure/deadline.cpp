#include "measure/deadline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace ptune::measure {

// ---------------------------------------------------------------- Deadline

Deadline::Deadline(double budget_ms, Clock clock) : clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  start_ms_ = clock_();
  budget_s_ = std::max(0.0, budget_ms / 1000.0);
  automatic_ = budget_ms <= 0;
  limit_ms_ = automatic_ ? kAutoBudgetMs : budget_ms;
}

Deadline::Deadline() : Deadline(0) {
  automatic_ = false;
  limit_ms_ = kNone;
}

Deadline Deadline::continuing(double limit_ms, double elapsed_ms, double budget_s) {
  Deadline d(1.0);
  d.start_ms_ -= elapsed_ms;
  d.limit_ms_ = limit_ms;
  d.budget_s_ = budget_s;
  d.automatic_ = false;
  d.settled_ = true;
  return d;
}

void Deadline::agree_with(std::function<double(double)> max_over_ranks) {
  max_over_ranks_ = std::move(max_over_ranks);
}

double Deadline::elapsed_ms() const { return clock_ ? clock_() - start_ms_ : 0.0; }

double Deadline::left_ms() const { return limited() ? limit_ms_ - elapsed_ms() : kNone; }

bool Deadline::fits(double next_ms) const {
  if (!limited()) return true;
  const bool over = left_ms() < next_ms;
  return !(max_over_ranks_ ? max_over_ranks_(over ? 1.0 : 0.0) > 0 : over);
}

int64_t Deadline::steps_that_fit(double step_ms, int64_t max_steps) const {
  if (!limited() || max_steps <= 1) return std::max<int64_t>(1, max_steps);
  double n = step_ms > 0 ? std::floor(left_ms() / step_ms) : static_cast<double>(max_steps);
  n = std::clamp(n, 1.0, static_cast<double>(max_steps));
  if (max_over_ranks_) n = -max_over_ranks_(-n);  // the fewest over the ranks
  return static_cast<int64_t>(n);
}

Deadline Deadline::share(int64_t windows) const {
  Deadline d = *this;
  if (limited() && windows > 1)
    d.limit_ms_ = std::min(
        limit_ms_, elapsed_ms() + kShareFraction * std::max(0.0, left_ms()) / static_cast<double>(windows));
  return d;
}

void Deadline::settle() {
  if (!automatic_ || settled_) return;
  settled_ = true;
  limit_ms_ = std::min(kAutoBudgetMs, kAutoBudgetFactor * elapsed_ms());
}

bool Deadline::grow_to(double limit_ms) {
  if (!can_grow() || !(limit_ms > limit_ms_) || limit_ms > auto_most_ms_) return false;
  limit_ms_ = limit_ms;
  return true;
}

}  // namespace ptune::measure
