#pragma once
/// LibTorch's errors as ptune reports them: one line.

#include <string>

#include <c10/util/Exception.h>

namespace ptune::runtime {

/// A c10::Error's message as ptune's one error line: its first line, without LibTorch's
/// backtrace and without the advice lines some messages add under it (CUDA's "might be
/// asynchronously reported", "consider passing ..."); where lines were dropped, " (--verbose
/// for LibTorch's whole message)" says where the rest is. Throws what std::string throws.
inline std::string torch_error_line(const c10::Error& e) {
  std::string message = e.what_without_backtrace();
  const size_t end = message.find('\n');
  if (end != std::string::npos) {
    const bool more = message.find_first_not_of(" \t\r\n", end) != std::string::npos;
    message.erase(end);
    if (more) message += " (--verbose for LibTorch's whole message)";
  }
  return message;
}

}  // namespace ptune::runtime
