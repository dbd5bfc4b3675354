#include "report/status.hpp"

namespace ptune::report {
namespace {

struct Word {
  RowStatus::State state;
  const char* prefix;
};
constexpr Word kWords[] = {{RowStatus::State::kEagerFallback, "eager fallback: "},
                           {RowStatus::State::kSkipped, "skipped: "},
                           {RowStatus::State::kFailed, "failed: "}};

}  // namespace

std::string RowStatus::text() const {
  for (const auto& w : kWords)
    if (w.state == state) return w.prefix + why;
  return "ok";
}

RowStatus RowStatus::from_text(const std::string& text) {
  if (text == "ok") return ok();
  for (const auto& w : kWords) {
    const std::string prefix = w.prefix;
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
