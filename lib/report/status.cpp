#include "report/status.hpp"

namespace ptune::report {
namespace {

struct Word {
  RowStatus::State state;
  const char* prefix;  // the text's, before ": <why>"
};
constexpr Word kWords[] = {{RowStatus::State::kEagerFallback, "eager fallback"},
                           {RowStatus::State::kSkipped, "skipped"},
                           {RowStatus::State::kFailed, "failed"}};

}  // namespace

std::string RowStatus::word() const {
  for (const auto& w : kWords)
    if (w.state == state) return w.prefix;
  return "ok";
}

std::string RowStatus::text() const { return state == State::kOk ? "ok" : word() + ": " + why; }

RowStatus RowStatus::from_text(const std::string& text) {
  if (text == "ok") return ok();
  for (const auto& w : kWords) {
    const std::string prefix = std::string(w.prefix) + ": ";
    if (text.rfind(prefix, 0) == 0) return {w.state, text.substr(prefix.size())};
  }
  return failed(text);
}

const char* run_status_text(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kComplete:
      return "complete";
    case RunStatus::kInterrupted:
      break;
  }
  return "interrupted";
}

}  // namespace ptune::report
