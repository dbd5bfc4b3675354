#pragma once
/// How a row and a run ended, as types (the results' JSON keeps their text: "ok",
/// "skipped: <why>", "complete", ...). The text is made and read here only.

#include <string>

namespace ptune::report {

/// How a row ended: measured ("ok", or measured after its CUDA graph fell back to eager
/// batches), not measured because this device or dataset cannot run it ("skipped"), or failed.
struct RowStatus {
  enum class State { kOk, kEagerFallback, kSkipped, kFailed };
  State state = State::kOk;
  std::string why;  // empty for kOk

  static RowStatus ok() { return {}; }
  static RowStatus eager_fallback(std::string why) { return {State::kEagerFallback, std::move(why)}; }
  static RowStatus skipped(std::string why) { return {State::kSkipped, std::move(why)}; }
  static RowStatus failed(std::string why) { return {State::kFailed, std::move(why)}; }

  bool is(State s) const { return state == s; }
  bool ok_state() const { return state == State::kOk; }
  /// "ok" | "eager fallback: <why>" | "skipped: <why>" | "failed: <why>".
  std::string text() const;
  /// The state alone: "ok" | "eager fallback" | "skipped" | "failed".
  std::string word() const;
  /// The status of `text` (text() of a row, or a results file's "status"): what does not start
  /// with a state's word is a failure with that text as its reason. Throws nothing.
  static RowStatus from_text(const std::string& text);
};

inline bool operator==(const RowStatus& a, const RowStatus& b) {
  return a.state == b.state && a.why == b.why;
}

/// How a run (a sweep, a tune search) stands: still writing rows, complete, or interrupted.
enum class RunStatus { kRunning, kComplete, kInterrupted };

/// "running" | "complete" | "interrupted". Throws nothing.
const char* run_status_text(RunStatus s);

}  // namespace ptune::report
