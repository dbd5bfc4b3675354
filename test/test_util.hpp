#pragma once
// Helpers shared by the tests: temporary files and running the built binary.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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

/// What is wrong with the figures of a results document (ptune sweep's JSON): for every row
/// compared with another, the ratio of the two printed samples/s must lie inside the printed
/// vs-prev interval, and its ratio to the first row of its chain inside the vs-base interval,
/// within the rounding of the printed figures; where the previous row is the base, vs prev and
/// vs base must be one figure. Empty when all agree.
inline std::vector<std::string> figure_disagreements(const nlohmann::json& doc) {
  std::vector<std::string> bad;
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array()) return bad;
  const auto& rows = doc["rows"];
  auto num = [](const nlohmann::json& r, const char* k) {
    return r.contains(k) && r[k].is_number() ? r[k].get<double>() : -1.0;
  };
  // Inside [lo, hi] up to the rounding of the rates (0.01) and of the bounds (0.0001).
  auto inside = [&](double a, double b, const nlohmann::json& r, const std::string& key) {
    const double lo = num(r, (key + "_lo").c_str()), hi = num(r, (key + "_hi").c_str());
    if (lo <= 0 || hi <= 0 || a <= 0 || b <= 0) return true;
    const double ratio = a / b, slack = ratio * (0.006 / a + 0.006 / b) + 1e-4;
    return ratio >= lo - slack && ratio <= hi + slack;
  };
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    if (!r.contains("compared_with") || !r["compared_with"].is_number_unsigned()) continue;
    size_t prev = r["compared_with"].get<size_t>(), base = prev;
    if (prev >= rows.size()) continue;
    while (rows[base].contains("compared_with") && rows[base]["compared_with"].is_number_unsigned())
      base = rows[base]["compared_with"].get<size_t>();
    const double sps = num(r, "samples_per_s");
    const std::string where = "row " + std::to_string(k) + " '" + r["name"].get<std::string>() + "': ";
    if (!inside(sps, num(rows[prev], "samples_per_s"), r, "speedup_vs_prev"))
      bad.push_back(where + "its samples/s over row " + std::to_string(prev) + "'s lies outside vs prev");
    if (!inside(sps, num(rows[base], "samples_per_s"), r, "speedup_vs_base"))
      bad.push_back(where + "its samples/s over row " + std::to_string(base) + "'s lies outside vs base");
    if (prev == base)
      for (const char* suffix : {"", "_lo", "_hi", "_interval"})
        if (r["speedup_vs_prev" + std::string(suffix)] != r["speedup_vs_base" + std::string(suffix)])
          bad.push_back(where + "vs prev and vs base differ (speedup" + suffix +
                        ") though the previous row is the base");
    if (prev == base && r["verdict_vs_prev"] != r["verdict_vs_base"])
      bad.push_back(where +
                    "vs prev and vs base have different verdicts though the previous row is the base");
  }
  // A row (in one process) whose own windows ran at a rate clearly outside its printed interval
  // says so in a note, and only such a row: within the rounding of the figures (the bounds to
  // 0.01 samples/s, the windows to six significant digits) and 0.2% besides.
  const int64_t world = doc.contains("environment") && doc["environment"].contains("world_size") &&
                                doc["environment"]["world_size"].is_number_integer()
                            ? doc["environment"]["world_size"].get<int64_t>()
                            : 1;
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    if (!r.contains("repeat_ms_per_step") || !r["repeat_ms_per_step"].is_array() ||
        r["repeat_ms_per_step"].empty() || (r.contains("repeat_process") && r["repeat_process"].is_array()) ||
        !r.contains("batch_size") || !r["batch_size"].is_number_integer())
      continue;
    double logs = 0;
    bool positive = true;
    for (const auto& v : r["repeat_ms_per_step"]) {
      positive = positive && v.is_number() && v.get<double>() > 0;
      if (positive) logs += std::log(v.get<double>());
    }
    const double lo = num(r, "samples_per_s_lo"), hi = num(r, "samples_per_s_hi");
    if (!positive || lo <= 0 || hi <= 0) continue;
    const double ms = std::exp(logs / static_cast<double>(r["repeat_ms_per_step"].size()));
    const double own = 1000.0 * static_cast<double>(r["batch_size"].get<int64_t>() * world) / ms;
    bool noted = false;
    if (r.contains("notes") && r["notes"].is_array())
      for (const auto& n : r["notes"])
        noted = noted || (n.is_string() && n.get<std::string>().rfind("its own windows ran at ", 0) == 0);
    const std::string where = "row " + std::to_string(k) + " '" + r["name"].get<std::string>() + "': ";
    const double outer_lo = (lo - 0.005) / 1.002, outer_hi = (hi + 0.005) * 1.002;
    const double inner_lo = (lo + 0.005) * 1.002, inner_hi = (hi - 0.005) / 1.002;
    if (!noted && (own < outer_lo || own > outer_hi))
      bad.push_back(where +
                    "its own windows ran outside its printed samples/s interval, and no note says so");
    if (noted && own > inner_lo && own < inner_hi)
      bad.push_back(where +
                    "a note says its own windows ran outside its printed samples/s, but they did not");
  }
  return bad;
}

/// A fresh temporary folder, removed when the object dies. Before that, every results file in
/// it (JSON with "ptune_version" and "rows") is checked by figure_disagreements: so every
/// results file the suite writes is checked.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/ptune-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    if (std::uncaught_exceptions() == 0) check_results_files();
    std::filesystem::remove_all(path, ec);
  }
  void check_results_files() const {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec) || it->path().extension() != ".json") continue;
      std::ifstream in(it->path());
      const auto doc = nlohmann::json::parse(in, nullptr, false);
      if (doc.is_discarded() || !doc.is_object() || !doc.contains("ptune_version")) continue;
      for (const auto& problem : figure_disagreements(doc)) FAIL_CHECK(it->path().string() + ": " + problem);
    }
  }
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

/// A shell command line that runs beside the test and answers in lines: the test sends a line
/// to its stdin and receives one from its stdout. For a Python helper that imports torch once
/// (seconds on a small machine) for several requests. Its stderr goes to a file: err().
class Coprocess {
 public:
  explicit Coprocess(const std::string& cmdline) : err_path_(dir_.file("err")) {
    int in[2], out[2];
    REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    const char* err_path = err_path_.c_str();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      const int e = ::open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (e < 0 || ::dup2(in[0], 0) < 0 || ::dup2(out[1], 1) < 0 || ::dup2(e, 2) < 0) ::_exit(126);
      ::execl("/bin/sh", "sh", "-c", cmdline.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = ::fdopen(out[0], "r");
  }
  Coprocess(const Coprocess&) = delete;
  Coprocess& operator=(const Coprocess&) = delete;
  ~Coprocess() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    finish();
  }
  /// Sends `line` and a newline; false when it no longer reads (it has exited).
  bool send(const std::string& line) {
    const std::string text = line + "\n";
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old);  // a write to an exited process: EPIPE, not death
    bool ok = to_ >= 0;
    for (size_t done = 0; ok && done < text.size();) {
      const ssize_t n = ::write(to_, text.data() + done, text.size() - done);
      ok = n > 0;
      done += ok ? static_cast<size_t>(n) : 0;
    }
    ::sigaction(SIGPIPE, &old, nullptr);
    return ok;
  }
  /// Its next line of stdout without the newline; nullopt once its stdout has ended.
  std::optional<std::string> receive() {
    if (!from_) return std::nullopt;
    std::string line;
    for (int c; (c = std::fgetc(from_)) != EOF;) {
      if (c == '\n') return line;
      line += static_cast<char>(c);
    }
    return line.empty() ? std::nullopt : std::optional<std::string>(line);
  }
  /// Closes its stdin and waits for it: its exit status (128 + the signal that ended it).
  int finish() {
    if (to_ >= 0) ::close(to_), to_ = -1;
    if (from_) std::fclose(from_), from_ = nullptr;
    if (pid_ > 0) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pid_ = -1;
    }
    return code_;
  }
  /// What it wrote to stderr so far.
  std::string err() const { return read_file(err_path_); }

 private:
  TempDir dir_;
  std::string err_path_;
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
  int code_ = -1;
};

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
