#pragma once
/// ptune's error types. main() catches them once and prints one line: "ptune: error: <what()>".

#include <csignal>
#include <stdexcept>
#include <algorithm>
#include <string>

namespace ptune {

/// ptune's exit codes (docs/cli.md): 0 ok; 1 a runtime failure (a failed sweep row, a write
/// that failed); 2 a usage or config error; 128 + the signal after a stop signal.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

/// The exit code after the first stop signal `sig`, as a shell reports a process it stopped:
/// 143 after SIGTERM, 130 after SIGINT (and when none is known: a rank stopped with another).
inline constexpr int stopped_exit_code(int sig) { return 128 + (sig == SIGTERM ? SIGTERM : SIGINT); }

/// Whether `code` is one that stopped_exit_code() gives.
inline constexpr bool is_stopped_exit_code(int code) {
  return code == stopped_exit_code(SIGINT) || code == stopped_exit_code(SIGTERM);
}

/// How a command ended: its exit code and, when not 0, the one line the executable prints on
/// stderr ("ptune: error: MESSAGE"; after a stop signal "ptune: MESSAGE").
struct Outcome {
  int exit_code = kExitOk;
  std::string message;
};

/// Whether `ch` is a control character: C0 (below 0x20) or DEL. Throws nothing.
inline bool is_control(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return c < 0x20 || c == 0x7f;
}

/// `message` with its control characters written as escapes ("\x00", "\x0a", "\x1b"): a NUL
/// from a config's string would end the message at what() (and the printed line there), a
/// newline would split the one line of an error, an escape sequence would reach the terminal.
/// Throws std::bad_alloc only.
inline std::string escape_controls(const std::string& message) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    if (is_control(ch)) {
      const auto c = static_cast<unsigned char>(ch);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

/// Whether `text` holds a control character (what escape_controls() escapes). Throws nothing.
inline bool has_control_characters(const std::string& text) {
  return std::any_of(text.begin(), text.end(), is_control);
}

/// A bad experiment: a config file, a --set override or a sweep row. The message names the
/// JSON path, the value and what is allowed. Exit code 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& m) : std::runtime_error(escape_controls(m)) {}
};

/// A bad command line (unknown flag, missing argument). Exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& m) : std::runtime_error(escape_controls(m)) {}
};

/// A bad data file: names the file and the cause. Exit code 1.
class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& m) : std::runtime_error(escape_controls(m)) {}
};

/// A file that could not be written (a full disk, a quota, a read-only file system, a file-size
/// limit, a permission): "cannot write <what> '<path>': <reason>". Exit code 1.
class WriteError : public std::runtime_error {
 public:
  explicit WriteError(const std::string& m) : std::runtime_error(escape_controls(m)) {}
};

/// Thrown when the user interrupts (SIGINT); exit code 130.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

/// Interrupted before the command's work began (a data-parallel rendezvous given up): nothing
/// was written. Exit code 130, as Interrupted.
class InterruptedAtStart : public Interrupted {};

/// The first line of an exception's message: without LibTorch's backtrace, which a c10::Error
/// appends after its message's first line. (No LibTorch header here: the commands that need no
/// tensors are built without it.)
inline std::string message_of(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

/// The version printed by `ptune --version` and written into results files.
inline constexpr const char* kVersion = "0.1.0";

}  // namespace ptune
