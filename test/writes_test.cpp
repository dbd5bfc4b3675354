// Every writer of the built ptune against a failing file system: a file-size limit
// (RLIMIT_FSIZE with SIGXFSZ at its default, as a shell leaves it: ptune ignores it itself; no
// privileges needed), a read-only folder, a full tmpfs
// (where the test can mount one) and the N-th write failing (PTUNE_FAIL_WRITE_AT, ptune's test
// hook). Each time: exit 1 (2 for an output refused before any work), exactly one
// "ptune: error:" line and no LibTorch abort, no temporary file anywhere under the folder, and
// the previous good file still whole.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/state_dict_io.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ptune::test::RunResult;
using ptune::test::TempDir;
using Json = nlohmann::ordered_json;

namespace {

/// How a command runs: a file-size limit, without the power to write where permissions forbid
/// (root's CAP_DAC_OVERRIDE dropped), with the N-th write failing.
struct Limits {
  std::optional<rlim_t> file_size;
  bool no_override = false;
  long fail_write_at = 0;
};

/// Runs `args` (after the ptune binary) in a child process under `limits`: stdout discarded,
/// stderr captured through a pipe (which no file-size limit cuts). Exit code 125: the limits
/// could not be set up.
RunResult run_limited(const std::string& args, const Limits& limits = {}) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    if (null < 0) ::_exit(125);
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    if (limits.fail_write_at > 0)
      ::setenv("PTUNE_FAIL_WRITE_AT", std::to_string(limits.fail_write_at).c_str(), 1);
    if (limits.no_override && ::geteuid() == 0) {
      // Root writes anywhere: without these capabilities (dropped for good, exec included) a
      // folder's permissions apply to it too.
      for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER})
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) ::_exit(125);
    }
    if (limits.file_size) {
      ::signal(SIGXFSZ, SIG_DFL);  // as a shell leaves it: ptune must ignore it (EFBIG) itself
      const struct rlimit r { *limits.file_size, *limits.file_size };
      if (::setrlimit(RLIMIT_FSIZE, &r) != 0) ::_exit(125);
    }
    const std::string cmd = "exec " + ptune::test::exe() + " " + args;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  RunResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    r.err.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

/// The lines of `text` that start with `prefix`.
size_t lines_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

/// The failure contract: `code`, one "ptune: error:" line holding `reason`, no abort.
void expect_one_error(const RunResult& r, const std::string& reason, int code = 1) {
  INFO(r.err);
  CHECK(r.code == code);
  CHECK(lines_starting(r.err, "ptune: error: ") == 1);
  CHECK(r.err.find(reason) != std::string::npos);
  for (const char* abort : {"frame #", "terminate called", "enforce fail", "Traceback", "c10::Error"})
    CHECK(r.err.find(abort) == std::string::npos);
}

/// Temporary files under `dir`, at any depth: hidden names (write_atomically's ".<name>.XXXXXX")
/// and names ending in ".tmp" (Kineto's).
std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind('.', 0) == 0 || (name.size() > 4 && name.substr(name.size() - 4) == ".tmp"))
      found.push_back(it->path().string());
  }
  return found;
}

/// A checkpoint of ptune train that loads; returns its step (-1 when it does not load).
int64_t checkpoint_step(const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    at::Tensor step;
    archive.read("step", step);
    return step.item<int64_t>();
  } catch (const std::exception&) {
    return -1;
  }
}

/// Whether `path` is a whole weights file (--save-weights).
bool weights_load(const std::string& path) {
  try {
    return ptune::models::read_state_dict(path).size() > 100;
  } catch (const std::exception&) {
    return false;
  }
}

/// Whether `path` is a whole JSON document.
bool json_loads(const std::string& path) {
  try {
    (void)Json::parse(ptune::test::read_file(path));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// Every Chrome trace under `dir` (ptune's trace file names) is whole JSON.
void expect_whole_traces(const std::string& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".pt.trace.json") == std::string::npos) continue;
    INFO(it->path().string());
    CHECK(json_loads(it->path().string()));
  }
}

/// A tmpfs of `size` mounted on `at` for as long as the object lives (root, where mounting is
/// allowed); ok() tells whether it is there.
class Tmpfs {
 public:
  Tmpfs(const std::string& at, const std::string& size) : at_(at) {
    fs::create_directories(at);
    ok_ = ::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
    if (!ok_) why_ = std::strerror(errno);
  }
  ~Tmpfs() {
    if (ok_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  /// Makes it read-only; false when that fails.
  bool read_only() { return ::mount(nullptr, at_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0; }

 private:
  std::string at_, why_;
  bool ok_ = false;
};

/// A one-step training run of ResNet-18 without momentum: a checkpoint and the weights of about
/// 47 MB each.
std::string train_config(const TempDir& dir) {
  return dir.write("t.json", R"({"name": "t", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 8, "image_size": 32}, "loader": {"batch_size": 4},
      "optim": {"momentum": 0}, "train": {"epochs": 1, "max_steps": 1}})");
}

/// A one-row sweep with a one-step profile into `runs`, timed in as few windows as it allows.
std::string sweep_config(const TempDir& dir, const std::string& runs) {
  return dir.write("s.json", R"({"name": "s", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 8, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "repeats": 1, "max_s": 0.001, "target_ci_pct": 100,
                  "profile_steps": 1, "out_dir": ")" +
                                 runs + R"("}})");
}

}  // namespace

TEST_CASE(
    "train: a checkpoint past the file-size limit stops training, names the last good one, leaves no "
    "temporary file",
    "[writes]") {
  TempDir dir;
  const std::string cfg = train_config(dir), ck = dir.file("ck");
  const std::string good = ck + "/t-step1.pt";
  auto first = run_limited("train " + cfg + " --set train.checkpoint_dir=" + ck + " --save-weights " +
                           dir.file("w.pt"));
  INFO(first.err);
  REQUIRE(first.code == 0);
  const std::string good_bytes = ptune::test::read_file(good);
  // Resumed at step 1 for two more steps, a checkpoint at each: the first one fails.
  auto r = run_limited("train " + cfg + " --resume " + good +
                           " --set train.max_steps=3 --set train.checkpoint_every=1 " +
                           "--set train.checkpoint_dir=" + ck,
                       {1 << 20});
  expect_one_error(r, "cannot write train.checkpoint_dir '" + ck +
                          "/t-step2.pt': File too large; the last good checkpoint is " + good +
                          " (continue with --resume " + good + ")");
  CHECK(temporaries(dir.path.string()).empty());
  CHECK(!fs::exists(ck + "/t-step2.pt"));
  CHECK(ptune::test::read_file(good) == good_bytes);
  CHECK(checkpoint_step(good) == 1);
  CHECK(weights_load(dir.file("w.pt")));
}

TEST_CASE("results in every format, the CSV companion, reports and configs past the file-size limit",
          "[writes]") {
  TempDir dir;
  const std::string runs = dir.file("runs"), cfg = sweep_config(dir, runs);
  // The previous good results: a whole sweep's JSON; and a report of it.
  const std::string json = dir.file("r.json");
  auto first = run_limited("sweep " + cfg + " --out " + json);
  INFO(first.err);
  REQUIRE(first.code == 0);
  const std::string good = ptune::test::read_file(json);
  REQUIRE(Json::parse(good)["status"] == "complete");
  auto report = run_limited("report " + json + " -o " + dir.file("old.html"));
  REQUIRE(report.code == 0);
  const std::string good_html = ptune::test::read_file(dir.file("old.html"));

  SECTION("sweep --out, each format, and the CSV's companion") {
    const std::string companion = dir.file("r.env.json");
    TempDir::write_to(companion, "{}\n");
    // 512 B: less than any of these files; `between`: the CSV's one row fits, its companion
    // (the environment and the whole config) does not. Both sizes from an unlimited run.
    auto sized = run_limited("sweep " + cfg + " --out " + dir.file("size.csv"));
    REQUIRE(sized.code == 0);
    const auto csv_size = std::filesystem::file_size(dir.file("size.csv"));
    const auto companion_size = std::filesystem::file_size(dir.file("size.env.json"));
    REQUIRE(companion_size > csv_size + 400);
    const rlim_t between = (csv_size + companion_size) / 2;
    for (const auto& [name, limit] : std::vector<std::pair<std::string, rlim_t>>{
             {"r.json", 512}, {"r.md", 512}, {"r.html", 512}, {"r.csv", 512}, {"r.csv", between}}) {
      INFO(name << " limited to " << limit << " bytes");
      const std::string out = dir.file(name);
      if (name != "r.json" && limit == 512) TempDir::write_to(out, "previous\n");
      const std::string before = ptune::test::read_file(out);
      auto r = run_limited("sweep " + cfg + " --out " + out, {limit});
      const std::string failed = limit == between ? companion : out;
      expect_one_error(r, "cannot write --out '" + failed + "': File too large");
      CHECK(temporaries(dir.path.string()).empty());
      CHECK(ptune::test::read_file(companion) == "{}\n");
      if (limit == 512) CHECK(ptune::test::read_file(out) == before);
    }
    CHECK(ptune::test::read_file(json) == good);
  }
  SECTION("report -o") {
    const std::string out = dir.file("old.html");
    auto r = run_limited("report " + json + " -o " + out, {512});
    expect_one_error(r, "cannot write --out '" + out + "': File too large");
    CHECK(temporaries(dir.path.string()).empty());
    CHECK(ptune::test::read_file(out) == good_html);
  }
  SECTION("tune --out") {
    const std::string out = dir.file("best.json");
    TempDir::write_to(out, "{\"previous\": true}\n");
    // The batch-size search with nothing to search (the largest batch is the first): one trial.
    auto r = run_limited("tune " + cfg + " --batch-size --max-batch 4 --repeats 1 --out " + out, {200});
    expect_one_error(r, "cannot write --out '" + out + "': File too large");
    CHECK(temporaries(dir.path.string()).empty());
    CHECK(ptune::test::read_file(out) == "{\"previous\": true}\n");
  }
}

TEST_CASE("sweep --profile: a trace past the file-size limit fails its row, the sweep goes on, exits 1",
          "[writes]") {
  TempDir dir;
  const std::string runs = dir.file("runs"), cfg = sweep_config(dir, runs), out = dir.file("r.json");
  // 200 kB: the results fit, a trace (about 400 kB for one step of ResNet-18) does not.
  auto r = run_limited("sweep " + cfg + " --profile --out " + out, {200 << 10});
  expect_one_error(r, "sweep: row 'config' failed: cannot write measure.out_dir '" + runs + "/s/00-config/");
  CHECK(r.err.find("': File too large") != std::string::npos);
  CHECK(temporaries(dir.path.string()).empty());
  expect_whole_traces(runs);
  const Json j = Json::parse(ptune::test::read_file(out));
  CHECK(j["status"] == "complete");
  REQUIRE(j["rows"].size() == 1);
  CHECK(j["rows"][0]["status"].get<std::string>().rfind("failed: cannot write measure.out_dir", 0) == 0);
}

TEST_CASE("read-only folders: checkpoints, weights, results and traces refuse with one line", "[writes]") {
  TempDir dir;
  const std::string cfg = train_config(dir), ro = dir.file("ro");
  fs::create_directories(ro + "/ck");
  TempDir::write_to(ro + "/w.pt", "previous");
  ::chmod((ro + "/ck").c_str(), 0555);
  ::chmod(ro.c_str(), 0555);
  ::chmod(dir.path.c_str(), 0755);
  const Limits no_override{std::nullopt, true};
  auto probe = run_limited("--version", no_override);
  if (probe.code == 125) {
    WARN("skipped: cannot drop root's permission override here");
    return;
  }
  auto ck = run_limited("train " + cfg + " --set train.checkpoint_dir=" + ro + "/ck", no_override);
  expect_one_error(ck, "train.checkpoint_dir: cannot write in folder '" + ro + "/ck': Permission denied");
  auto w = run_limited(
      "train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") + " --save-weights " + ro + "/w.pt",
      no_override);
  expect_one_error(w, "--save-weights: cannot write in folder '" + ro + "': Permission denied");
  const std::string scfg = sweep_config(dir, ro + "/runs");
  auto out = run_limited("sweep " + scfg + " --out " + ro + "/r.json", no_override);
  expect_one_error(out, "--out: cannot write in folder '" + ro + "': Permission denied", 2);
  auto trace = run_limited("sweep " + scfg + " --profile --out " + dir.file("r.json"), no_override);
  expect_one_error(trace,
                   "sweep: row 'config' failed: cannot write measure.out_dir '" + ro + "/runs/s/00-config/");
  CHECK(trace.err.find("Permission denied") != std::string::npos);
  ::chmod(ro.c_str(), 0755);
  CHECK(temporaries(dir.path.string()).empty());
  CHECK(ptune::test::read_file(ro + "/w.pt") == "previous");
  // A removed folder: found before any work.
  auto gone = run_limited("sweep " + scfg + " --out " + dir.file("gone") + "/r.json");
  expect_one_error(gone, "--out: folder '" + dir.file("gone") + "' does not exist", 2);
  auto gone_w = run_limited("train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") +
                            " --save-weights " + dir.file("gone") + "/w.pt");
  expect_one_error(gone_w, "--save-weights: folder '" + dir.file("gone") + "' does not exist");
}

TEST_CASE(
    "a full tmpfs: checkpoints, weights, traces and results fail with one line and leave nothing behind",
    "[writes]") {
  TempDir dir;
  const std::string cfg = train_config(dir), small = dir.file("small");
  Tmpfs fs20(small, "20m");
  if (!fs20.ok()) {
    WARN("skipped: cannot mount a tmpfs here (" << fs20.why()
                                                << "); the file-size limit cases cover the same writers");
    return;
  }
  // A checkpoint (about 47 MB) into 20 MB.
  auto ck = run_limited("train " + cfg + " --set train.checkpoint_dir=" + small + "/ck");
  expect_one_error(ck, "cannot write train.checkpoint_dir '" + small +
                           "/ck/t-step1.pt': No space left on device; no checkpoint of this run was written");
  CHECK(ck.err.find("ptune: warning: train.checkpoint_dir '" + small + "/ck' has ") != std::string::npos);
  CHECK(temporaries(small).empty());
  // The checkpoint elsewhere, the weights into 20 MB.
  auto w = run_limited("train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") + " --save-weights " +
                       small + "/w.pt");
  expect_one_error(w, "cannot write --save-weights '" + small +
                          "/w.pt': No space left on device; training finished, its last checkpoint is " +
                          dir.file("ck") + "/t-step1.pt");
  CHECK(w.err.find("ptune: warning: --save-weights '" + small + "/w.pt': its file system has ") !=
        std::string::npos);
  CHECK(temporaries(small).empty());
  CHECK(checkpoint_step(dir.file("ck") + "/t-step1.pt") == 1);
  // Traces and results on a filled file system.
  const std::string scfg = sweep_config(dir, small + "/runs");
  TempDir::write_to(small + "/r.json", "{\"previous\": true}\n");
  {
    std::string fill(1 << 20, 'x');
    std::ofstream filler(small + "/filler", std::ios::binary);
    for (int i = 0; i < 40 && filler; ++i)
      filler.write(fill.data(), static_cast<std::streamsize>(fill.size()));
  }
  auto s = run_limited("sweep " + scfg + " --profile --out " + dir.file("r.json"));
  expect_one_error(
      s, "sweep: row 'config' failed: cannot write measure.out_dir '" + small + "/runs/s/00-config/");
  CHECK(s.err.find("No space left on device") != std::string::npos);
  auto out = run_limited("sweep " + scfg + " --out " + small + "/r.json");
  expect_one_error(out, "cannot write --out '" + small + "/r.json': No space left on device");
  CHECK(temporaries(small).empty());
  expect_whole_traces(small);
  CHECK(ptune::test::read_file(small + "/r.json") == "{\"previous\": true}\n");

  // The same file system read-only.
  fs::remove(small + "/filler");
  if (!fs20.read_only()) {
    WARN("skipped the read-only mount: cannot remount the tmpfs read-only here");
    return;
  }
  auto ro_out = run_limited("sweep " + scfg + " --out " + small + "/r.json");
  expect_one_error(ro_out, "--out: cannot write in folder '" + small + "': Read-only file system", 2);
  auto ro_w = run_limited("train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") +
                          " --save-weights " + small + "/w.pt");
  expect_one_error(ro_w, "--save-weights: cannot write in folder '" + small + "': Read-only file system");
  auto ro_trace = run_limited("sweep " + scfg + " --profile --out " + dir.file("r.json"));
  expect_one_error(
      ro_trace, "sweep: row 'config' failed: cannot write measure.out_dir '" + small + "/runs/s/00-config/");
  CHECK(ro_trace.err.find("': Read-only file system") != std::string::npos);
  CHECK(ptune::test::read_file(small + "/r.json") == "{\"previous\": true}\n");
}

TEST_CASE("the N-th write fails, for every N, over a whole train --save-weights", "[writes]") {
  TempDir dir;
  const std::string cfg = train_config(dir), ck = dir.file("ck"), w = dir.file("w.pt");
  const std::string args = "train " + cfg + " --set train.checkpoint_dir=" + ck + " --save-weights " + w;
  auto first = run_limited(args);
  INFO(first.err);
  REQUIRE(first.code == 0);
  int failures = 0;
  for (long n = 1; n < 100; ++n) {
    INFO("failing write " << n);
    auto r = run_limited(args, {std::nullopt, false, n});
    if (r.code == 0) break;  // past the last write
    ++failures;
    expect_one_error(r, "': No space left on device");
    CHECK(temporaries(dir.path.string()).empty());
    // The previous version or the new one, each whole.
    CHECK(checkpoint_step(ck + "/t-step1.pt") == 1);
    CHECK(weights_load(w));
  }
  CHECK(failures >= 8);  // each file: create, writes, fsync, close, rename
}

TEST_CASE("the N-th write fails, for every N, over a whole sweep --profile --out r.html", "[writes]") {
  TempDir dir;
  const std::string runs = dir.file("runs"), cfg = sweep_config(dir, runs), out = dir.file("r.html");
  const std::string args = "sweep " + cfg + " --profile --out " + out;
  auto first = run_limited(args);
  INFO(first.err);
  REQUIRE(first.code == 0);
  int failures = 0;
  for (long n = 1; n < 100; ++n) {
    INFO("failing write " << n);
    auto r = run_limited(args, {std::nullopt, false, n});
    if (r.code == 0) break;
    ++failures;
    expect_one_error(r, "': No space left on device");
    CHECK(temporaries(dir.path.string()).empty());
    const std::string html = ptune::test::read_file(out);
    CHECK(html.find("</html>") != std::string::npos);
    expect_whole_traces(runs);
  }
  CHECK(failures >= 8);  // the report after the row, the trace (checked, then written), the report twice more
}

TEST_CASE(
    "under the shell's ulimit -f, --out and a checkpoint past the limit: File too large, exit 1, no "
    "temporary file",
    "[writes]") {
  // As a user's shell runs it: bash's ulimit (1024-byte blocks), SIGXFSZ not ignored, which
  // used to end ptune (status 153) and leave .fs.json.XXXXXX and ck/.p-step4.pt.XXXXXX.
  TempDir dir;
  ::signal(SIGXFSZ,
           SIG_DFL);  // what the shell below inherits (the default, unless this was started ignoring it)
  auto ulimited = [&](int blocks, const std::string& args) {
    const std::string cmd =
        "ulimit -f " + std::to_string(blocks) + "; exec " + ptune::test::exe() + " " + args;
    return ptune::test::run("bash -c \"" + cmd + "\"");
  };
  SECTION("sweep --out") {
    const std::string runs = dir.file("runs"), cfg = sweep_config(dir, runs), out = dir.file("fs.json");
    auto r = ulimited(1, "sweep " + cfg + " --out " + out);
    expect_one_error(r, "cannot write --out '" + out + "': File too large");
    CHECK(temporaries(dir.path.string()).empty());
    CHECK(!fs::exists(out));
  }
  SECTION("a checkpoint") {
    const std::string cfg = dir.write("p.json", R"({"name": "p", "device": "cpu", "cpu_threads": 1,
        "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
        "optim": {"momentum": 0}, "train": {"epochs": 1, "max_steps": 4}})");
    const std::string ck = dir.file("ck");
    auto r = ulimited(1024, "train " + cfg + " --set train.checkpoint_dir=" + ck);
    expect_one_error(r, "cannot write train.checkpoint_dir '" + ck + "/p-step4.pt': File too large");
    CHECK(temporaries(dir.path.string()).empty());
    CHECK(!fs::exists(ck + "/p-step4.pt"));
  }
}
