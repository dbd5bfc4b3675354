#pragma once
/// ptune's error types. main() catches them once and prints one line: "ptune: error: <what()>".

#include <stdexcept>
#include <string>

namespace ptune {

/// A bad experiment: a config file, a --set override or a sweep row. The message names the
/// JSON path, the value and what is allowed. Exit code 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad command line (unknown flag, missing argument). Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad data file: names the file and the cause. Exit code 1.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A file that could not be written (a full disk, a quota, a read-only file system, a file-size
/// limit, a permission): "cannot write <what> '<path>': <reason>". Exit code 1.
class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown when the user interrupts (SIGINT); exit code 130.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

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
