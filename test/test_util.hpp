#pragma once
// Helpers shared by the tests: temporary files and running the built binary.

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace ptune::test {

/// The environment variable `name` when set and not empty, else `fallback`.
inline const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Where the tests find their fixtures, the sources (configs/schema.json), the built ptune,
// Python and the stand-in for NVIDIA's management library (test/fake_nvml.cpp): the paths
// compiled in by test/CMakeLists.txt (*_DEFAULT), each overridable at run time by the
// environment variable of the same name, so that a copy of ptune_tests runs away from its
// build tree (scripts/gpu-bundle).
#define PTUNE_TEST_DATA ::ptune::test::env_or("PTUNE_TEST_DATA", PTUNE_TEST_DATA_DEFAULT)
#define PTUNE_SOURCE_DIR ::ptune::test::env_or("PTUNE_SOURCE_DIR", PTUNE_SOURCE_DIR_DEFAULT)
#define PTUNE_EXE ::ptune::test::env_or("PTUNE_EXE", PTUNE_EXE_DEFAULT)
#define PTUNE_PYTHON ::ptune::test::env_or("PTUNE_PYTHON", PTUNE_PYTHON_DEFAULT)
#define PTUNE_FAKE_NVML ::ptune::test::env_or("PTUNE_FAKE_NVML", PTUNE_FAKE_NVML_DEFAULT)

/// A fresh temporary folder, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptune-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::error_code ec; std::filesystem::remove_all(path, ec); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  /// Writes `text` into the file `path`.
  static void write_to(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
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

/// `err` without the warnings of rows measured under competing load: the tests run side by
/// side, so another test's process may be that load; what a test asserts of stderr is the rest.
inline std::string without_load_warnings(const std::string& err) {
  std::string kept, line;
  std::istringstream in(err);
  while (std::getline(in, line))
    if (line.find("measured under competing load") == std::string::npos) kept += line + "\n";
  return kept;
}

/// The built ptune binary, quoted for the shell.
inline std::string exe() { return std::string("'") + PTUNE_EXE + "'"; }

}  // namespace ptune::test
