#pragma once
// Helpers shared by the tests: temporary files and running the built binary.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace ptune::test {

/// A fresh temporary folder, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptune-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::error_code ec; std::filesystem::remove_all(path, ec); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// Writes `text` into `name` and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct RunResult {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

/// Runs a shell command line, capturing stdout and stderr and the exit code.
inline RunResult run(const std::string& cmdline) {
  TempDir d;
  const std::string out = d.file("out"), err = d.file("err");
  int status = std::system((cmdline + " >" + out + " 2>" + err + " </dev/null").c_str());
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

/// The built ptune binary, quoted for the shell.
inline std::string exe() { return std::string("'") + PTUNE_EXE + "'"; }

}  // namespace ptune::test
