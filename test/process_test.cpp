// The config's `process` section on the built binary, as a user gets it: each setting is seen in
// the child process that ran the row (the allocator and OpenMP runtime in its memory map, each
// OpenMP thread's CPUs, glibc's tunables), a missing library is one error line and exit 2, a NUMA
// node on a one-node machine does not apply, train starts itself again with the settings, and an
// interrupted sweep keeps its finished rows and leaves no child behind.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "system/process.hpp"
#include "models/flops.hpp"
#include "test_util.hpp"

using Json = nlohmann::json;
using ptune::test::run;
using ptune::test::TempDir;

namespace {

/// A small sweep: ResNet-18 at 32x32, batch 4, short windows, two processes a side (and no more:
/// measure.max_processes), a row done once its interval lies within ±50% (these tests check what
/// ran where, not a verdict), then `rows` (a JSON list).
std::string config(const std::string& rows, const std::string& extra = "") {
  return R"({
  "name": "process", "seed": 0, "device": "cpu", "cpu_threads": 0,
  "model": { "arch": "resnet18", "num_classes": 10 },
  "data": { "kind": "fake_cifar", "num_samples": 256, "image_size": 32 },
  "loader": { "batch_size": 4, "num_workers": 0 },
  "optim": { "kind": "sgd", "lr": 0.01 },
  "measure": { "warmup_steps": 1, "steps": 2, "repeats": 2, "max_s": 12, "processes": 2,
               "max_processes": 2, "target_ci_pct": 50 })" +
         extra + R"(,
  "sweep": )" +
         rows + "\n}";
}

/// The note that starts with `prefix` on `row`, or "".
std::string note(const Json& row, const std::string& prefix) {
  for (const auto& n : row["notes"])
    if (n.get<std::string>().rfind(prefix, 0) == 0) return n.get<std::string>();
  return "";
}

/// `ptune sweep CFG --out OUT` started in the background, its output to /dev/null: its pid.
pid_t start_sweep(const std::string& cfg, const std::string& out) {
  const pid_t ptune = ::fork();
  if (ptune == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(PTUNE_EXE, "ptune", "sweep", cfg.c_str(), "--out", out.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return ptune;
}

/// The folder of the venv's libiomp5.so (PyPI's intel-openmp), or "" when not installed.
std::string iomp_dir() {
  const std::filesystem::path python = PTUNE_PYTHON;
  if (python.empty()) return "";
  const auto lib = python.parent_path().parent_path() / "lib";
  return std::filesystem::exists(lib / "libiomp5.so") ? lib.string() : "";
}

Json sweep(const TempDir& dir, const std::string& cfg_text, const std::string& env = "") {
  const std::string cfg = dir.write("p.json", cfg_text), out = dir.file("p-out.json");
  const auto r = run(env + " " + ptune::test::exe() + " sweep " + cfg + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return Json::parse(ptune::test::read_file(out));
}

}  // namespace

TEST_CASE(
    "process: the allocator a row asks for is the one in its child's memory map, and the baseline runs in a "
    "fresh default child",
    "[process]") {
  TempDir dir;
  const Json res = sweep(dir, config(R"([
    { "name": "default process" },
    { "name": "jemalloc", "set": { "process.allocator": "jemalloc" } },
    { "name": "tcmalloc", "set": { "process.allocator": "tcmalloc" } },
    { "name": "glibc tuned", "set": { "process.allocator": "glibc_tuned", "measure.processes": 3,
                                     "measure.max_processes": 3, "measure.max_s": 25 } }
  ])"));
  const auto& rows = res["rows"];
  REQUIRE(rows.size() == 4);
  INFO(rows.dump(1));
  // Row 0, the baseline, runs in a child process too (the sweep has process-level rows): a fresh
  // default process, as every row it is compared with is a fresh process.
  const std::string base = note(rows[0], "this row's child processes: ");
  CHECK_FALSE(base.empty());
  CHECK(base.find("libjemalloc") == std::string::npos);
  CHECK(base.find("libtcmalloc") == std::string::npos);
  CHECK(base.find("GLIBC_TUNABLES unset") != std::string::npos);
  const std::string jem = note(rows[1], "this row's child processes: ");
  CHECK(jem.find("libjemalloc.so.2") != std::string::npos);
  CHECK(jem.find("libtcmalloc") == std::string::npos);
  // Each row is compared with the previous row's own processes, kept warm since its row; the
  // last asks for three processes a side, so its other side is three fresh ones of the previous
  // row's settings.
  for (size_t i = 1; i < 3; ++i) {
    CHECK_FALSE(note(rows[i],
                     "timed against the 2 processes of the row it is compared with, kept warm since that row")
                    .empty());
    CHECK(note(rows[i], "timed against 2 fresh processes").empty());
  }
  CHECK_FALSE(note(rows[3], "timed against 3 fresh processes of the settings of the row it is compared with")
                  .empty());
  const std::string tc = note(rows[2], "this row's child processes: ");
  CHECK(tc.find("libtcmalloc_minimal.so.4") != std::string::npos);
  CHECK(tc.find("libjemalloc") == std::string::npos);
  const std::string tuned = note(rows[3], "this row's child processes: ");
  CHECK(tuned.find("glibc.malloc.mmap_threshold=33554432") != std::string::npos);
  CHECK(tuned.find("glibc.malloc.mmap_max=0") != std::string::npos);
  for (const auto& r : rows) {
    CHECK(r["status"] == "ok");
    CHECK(r["page_faults_per_step"].is_number());
    CHECK(r["system_time_pct"].is_number());
  }
  // Every row's windows ran in turn in its processes (two, the last three), and so did the
  // previous side's.
  const Json both = Json::array({0, 1}), three = Json::array({0, 1, 2});
  auto processes = [](const Json& list) {
    std::set<int> seen;
    for (const auto& p : list) seen.insert(p.get<int>());
    return Json(std::vector<int>(seen.begin(), seen.end()));
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    REQUIRE(rows[i]["repeat_process"].is_array());
    CHECK(rows[i]["repeat_process"].size() == rows[i]["repeat_ms_per_step"].size());
    CHECK(processes(rows[i]["repeat_process"]) == (i == 3 ? three : both));
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i]["interleaved"] == true);
    CHECK(rows[i]["verdict_vs_prev"].is_string());
    REQUIRE(rows[i]["prev_process"].is_array());
    CHECK(processes(rows[i]["prev_process"]) == (i == 3 ? three : both));
  }
}

TEST_CASE("process: bind_threads pins each OpenMP thread to its own core, cpus restricts them", "[process]") {
  const auto allowed = ptune::system::allowed_cpus();
  if (allowed.size() < 2) {
    WARN("fewer than 2 CPUs: thread binding not checked");
    return;
  }
  TempDir dir;
  const std::string a = std::to_string(allowed[0]), b = std::to_string(allowed[1]);
  const Json res = sweep(dir, config(R"([
    { "name": "default process" },
    { "name": "bound", "set": { "process.bind_threads": true, "cpu_threads": 2, "process.cpus": ")" +
                                     a + "," + b +
                                     R"(" } },
    { "name": "one CPU", "set": { "process.cpus": ")" +
                                     b + R"(", "cpu_threads": 0 } }
  ])"));
  const auto& rows = res["rows"];
  REQUIRE(rows.size() == 3);
  INFO(rows.dump(1));
  // Unbound, each thread may run on every CPU; bound, each on its own core, neighbours together.
  const std::string both = ptune::system::cpu_list_text({allowed[0], allowed[1]});
  CHECK(note(rows[0], "this row's child processes: ")
            .find("OpenMP threads on CPUs {" + ptune::system::cpu_list_text(allowed)) != std::string::npos);
  const std::string bound = note(rows[1], "this row's child processes: ");
  CHECK(bound.find("2 OpenMP threads on CPUs {" + a + "} {" + b + "}") != std::string::npos);
  CHECK(bound.find("; CPUs " + both) != std::string::npos);
  // One CPU: the process runs there, and cpu_threads 0 means one thread.
  const std::string one = note(rows[2], "this row's child processes: ");
  CHECK(one.find("; CPUs " + b + ";") != std::string::npos);
  CHECK(one.find("1 OpenMP thread on CPUs {" + b + "}") != std::string::npos);
}

TEST_CASE("process: Intel's OpenMP runtime, preloaded from the Python environment", "[process]") {
  const std::string lib = iomp_dir();
  if (lib.empty()) {
    WARN("intel-openmp is not installed in the test venv: not checked");
    return;
  }
  TempDir dir;
  const Json res = sweep(dir, config(R"([
    { "name": "default process" },
    { "name": "Intel OpenMP", "set": { "process.openmp": "intel" } }
  ])"),
                         "PTUNE_LIBRARY_PATH='" + lib + "'");
  const auto& rows = res["rows"];
  INFO(rows.dump(1));
  CHECK(note(rows[1], "this row's child processes: ").find("libiomp5.so") != std::string::npos);
  CHECK(rows[1]["status"] == "ok");
}

TEST_CASE("process: a library that is not installed is one error line and exit 2, naming the package",
          "[process]") {
  TempDir dir;
  const std::string cfg = dir.write("p.json", config(R"([
    { "name": "default process" },
    { "name": "Intel OpenMP", "set": { "process.openmp": "intel" } }
  ])"));
  // PTUNE_LIBRARY_PATH names the only folders to look in: there, libiomp5.so is not found.
  const std::string only = "PTUNE_LIBRARY_PATH=" + dir.file("none") + " ";
  const std::string missing =
      "process.openmp: 'intel' needs libiomp5.so, which is not installed here (looked in "
      "PTUNE_LIBRARY_PATH: " +
      dir.file("none") +
      "); it comes with PyPI's intel-openmp (pip install intel-openmp, in the active Python environment)\n";
  for (const char* command : {" sweep ", " check "}) {
    const auto r = run(only + ptune::test::exe() + command + cfg);
    INFO(command << r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "ptune: error: " + cfg + ": sweep[1] 'Intel OpenMP': " + missing);
  }
  const std::string tcfg = dir.write("t.json", config("[]"));
  const auto tuned = run(only + ptune::test::exe() + " tune " + tcfg + " --set process.openmp=intel");
  CHECK(tuned.code == 2);
  CHECK(tuned.err == "ptune: error: " + tcfg + ": " + missing);
  const auto trained =
      run(only + ptune::test::exe() + " train " + tcfg + " --set process.allocator=jemalloc");
  CHECK(trained.code == 2);
  CHECK(trained.err == "ptune: error: " + tcfg +
                           ": process.allocator: 'jemalloc' needs libjemalloc.so.2, which is not installed "
                           "here (looked in PTUNE_LIBRARY_PATH: " +
                           dir.file("none") +
                           "); it comes with Debian's libjemalloc2 (apt-get install libjemalloc2)\n");
  // A CPU that is not there, a node that does not exist, a malformed list.
  const auto bad_cpu = run(ptune::test::exe() + " check " + cfg + " --set process.cpus=1000");
  CHECK(bad_cpu.code == 2);
  CHECK(bad_cpu.err.rfind("ptune: error: " + cfg +
                              ": sweep[0] 'default process': process.cpus: CPU 1000 in '1000' is not one "
                              "this process may run on; allowed: ",
                          0) == 0);
  const auto bad_list = run(ptune::test::exe() + " check " + cfg + " --set process.cpus=0-x");
  CHECK(bad_list.err == "ptune: error: " + cfg +
                            ": sweep[0] 'default process': process.cpus: '0-x' is not a CPU list; allowed: "
                            "CPU numbers and ranges, e.g. \"0-3,8\"\n");
  const auto bad_node = run(ptune::test::exe() + " check " + cfg + " --set process.numa_node=4000");
  CHECK(bad_node.code == 2);
  CHECK(bad_node.err.find("process.numa_node: node 4000 does not exist here; allowed: -1 (no binding) or ") !=
        std::string::npos);
  const auto bad_value = run(ptune::test::exe() + " check " + cfg + " --set process.allocator=mimalloc");
  CHECK(bad_value.code == 2);
  CHECK(bad_value.err.find("glibc, glibc_tuned, jemalloc, tcmalloc") != std::string::npos);
}

TEST_CASE("process: a NUMA node on a machine with one cannot help: the row is left out, and says so",
          "[process]") {
  if (ptune::system::numa_nodes().size() != 1) {
    WARN("more than one NUMA node here: the one-node case is not checked");
    return;
  }
  TempDir dir;
  const std::string cfg = dir.write("p.json", config(R"([
    { "name": "default process" },
    { "name": "node 0", "set": { "process.numa_node": 0 } },
    { "name": "batch 8", "set": { "loader.batch_size": 8 } }
  ])"));
  const auto r = run(ptune::test::exe() + " sweep " + cfg + " --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json res = Json::parse(r.out);
  const auto& rows = res["rows"];
  const std::string why =
      "process.numa_node 0 cannot help on this machine: it has one NUMA node, so binding to it changes "
      "nothing; left out, and the rows after it run without its changes";
  CHECK(rows[1]["status"] == "skipped: " + why);
  CHECK(r.err.find("row 'node 0' skipped: " + why) != std::string::npos);
  // The next row runs without the key: a default process, in ptune's own, with no note about it.
  CHECK(rows[2]["status"] == "ok");
  CHECK(note(rows[2], "this row's child process").empty());
  CHECK(note(rows[2], "process.numa_node").empty());
  // A row that changes more than the node is not left out: its other changes are measured.
  const std::string both = dir.write("b.json", config(R"([
    { "name": "default process" },
    { "name": "node 0 and batch 8", "set": { "process.numa_node": 0, "loader.batch_size": 8 } }
  ])"));
  const auto b = run(ptune::test::exe() + " sweep " + both + " --format json");
  INFO(b.err);
  REQUIRE(b.code == 0);
  CHECK(Json::parse(b.out)["rows"][1]["status"] == "ok");
}

TEST_CASE("process: train starts itself again with the settings, as under LD_PRELOAD", "[process]") {
  TempDir dir;
  const std::string cfg = dir.write("t.json", config("[]", R"(,
  "train": { "max_steps": 2, "log_every": 1, "checkpoint_dir": ")" +
                                                               dir.file("ck") + R"(" },
  "process": { "allocator": "jemalloc", "bind_threads": true })"));
  const auto r = run(ptune::test::exe() + " train " + cfg);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("process settings: libraries: libgomp") != std::string::npos);
  CHECK(r.err.find("libjemalloc.so.2") != std::string::npos);
  CHECK(r.out.find("trained 2 steps") != std::string::npos);
  // From stdin ptune cannot start itself again with the config: one line, exit 2.
  const auto piped = run("sh -c \"cat " + cfg + " | " + ptune::test::exe() + " train /dev/stdin\"");
  CHECK(piped.code == 2);
  CHECK(piped.err ==
        "ptune: error: process: settings that take effect when a process starts need the config in a file, "
        "not on a pipe (ptune starts itself again with them and reads it again)\n");
}

TEST_CASE(
    "process: Ctrl-C during a row in child processes keeps the finished rows and leaves no child running",
    "[process]") {
  TempDir dir;
  const std::string cfg = dir.write("p.json", config(R"([
    { "name": "default process" },
    { "name": "jemalloc", "set": { "process.allocator": "jemalloc", "measure.max_s": 60, "measure.repeats": 50,
                                  "measure.target_ci_pct": 3 } }
  ])"));
  const std::string out = dir.file("int.json");
  const pid_t ptune = start_sweep(cfg, out);
  // Wait until row 1's four children run (two a side: row 0's two, kept as its other side, and
  // its own two), then interrupt ptune.
  std::vector<pid_t> children;
  for (int i = 0; i < 600 && children.size() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    children.clear();
    std::istringstream list(run("pgrep -P " + std::to_string(ptune) + " -f '[r]ow-side'").out);
    for (pid_t c; list >> c;) children.push_back(c);
  }
  REQUIRE(children.size() == 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(ptune, SIGINT);
  int status = 0;
  ::waitpid(ptune, &status, 0);
  CHECK(WEXITSTATUS(status) == 130);
  // No child left: all were ended and reaped.
  for (pid_t c : children) CHECK_FALSE(std::filesystem::exists("/proc/" + std::to_string(c)));
  const Json res = Json::parse(ptune::test::read_file(out));
  CHECK(res["status"] == "interrupted");
  CHECK(res["rows"].size() == 1);
}

TEST_CASE(
    "process: a kept process that dies fails the row it was the other side of, and the next row starts fresh "
    "ones",
    "[process]") {
  TempDir dir;
  const std::string cfg = dir.write("p.json", config(R"([
    { "name": "default process" },
    { "name": "tcmalloc", "set": { "process.allocator": "tcmalloc", "measure.max_s": 30, "measure.repeats": 50,
                                  "measure.target_ci_pct": 1 } },
    { "name": "glibc tuned", "set": { "process.allocator": "glibc_tuned", "measure.max_s": 15,
                                     "measure.repeats": 2, "measure.target_ci_pct": 50 } }
  ])"));
  const std::string out = dir.file("dead.json");
  const pid_t ptune = start_sweep(cfg, out);
  auto children = [&] {
    std::vector<pid_t> list;
    std::istringstream in(run("pgrep -P " + std::to_string(ptune) + " -f '[r]ow-side'").out);
    for (pid_t c; in >> c;) list.push_back(c);
    return list;
  };
  // Row 0's two processes, then row 1's two beside them (row 0's kept as row 1's other side):
  // one of row 0's is killed while row 1 is timed.
  std::vector<pid_t> first, now;
  for (int i = 0; i < 600 && first.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first = children();
  }
  REQUIRE(first.size() == 2);
  for (int i = 0; i < 600 && now.size() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    now = children();
  }
  REQUIRE(now.size() == 4);
  REQUIRE(std::find(now.begin(), now.end(), first[0]) != now.end());
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::kill(first[0], SIGKILL);
  int status = 0;
  ::waitpid(ptune, &status, 0);
  CHECK(WEXITSTATUS(status) == 1);  // a failed row
  const Json res = Json::parse(ptune::test::read_file(out));
  INFO(res["rows"].dump(1));
  REQUIRE(res["rows"].size() == 3);
  CHECK(res["rows"][0]["status"] == "ok");
  // Its error names the side whose process died.
  CHECK(res["rows"][1]["status"].get<std::string>().rfind("failed: the previous row's child process", 0) ==
        0);
  // Row 2 is compared with row 0, the last ok row of its mode, in fresh processes of its settings.
  const auto& last = res["rows"][2];
  CHECK(last["status"] == "ok");
  CHECK(last["compared_with"] == 0);
  CHECK_FALSE(
      note(last, "timed against 2 fresh processes of the settings of the row it is compared with").empty());
  for (pid_t c : now) CHECK_FALSE(std::filesystem::exists("/proc/" + std::to_string(c)));
}

TEST_CASE(
    "process: a default row's child faults pages in as a default Python process running the same step does",
    "[process][python]") {
  // Under glibc's default malloc, how often a step faults its pages in depends on what the heap
  // held before: a block above the mmap threshold is mapped afresh (and faulted in page by page)
  // unless the heap has a free block that large. A default process holds only its pipeline, and
  // its parent counts the model's FLOPs: a child that built a model of its own for counting kept
  // its freed weights in the heap and faulted about 400 to 2,800 pages a step on this step, where
  // Python faulted 21,000. Both processes make the same requests, so a default child lies within a
  // factor of 2 of Python either way (17,600 and 21,000 on a 2-core AMD EPYC under AVX2).
  const std::string p = PTUNE_PYTHON;
  if (p.empty()) FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot run PyTorch's step");
  TempDir dir;
  const Json res = sweep(dir, R"({
  "name": "faults", "seed": 0, "device": "cpu", "cpu_threads": 0,
  "model": { "arch": "convnext_tiny", "num_classes": 10 },
  "data": { "kind": "fake_cifar", "num_samples": 32, "image_size": 64 },
  "loader": { "batch_size": 8, "num_workers": 0 },
  "optim": { "kind": "sgd", "lr": 0.01, "momentum": 0.9, "set_to_none": true },
  "measure": { "mode": "synthetic", "warmup_steps": 2, "steps": 2, "repeats": 2, "max_s": 8, "processes": 2,
               "target_ci_pct": 100 },
  "sweep": [ { "name": "default process" }, { "name": "glibc tuned", "set": { "process.allocator": "glibc_tuned" } } ]
})");
  const auto& row = res["rows"][0];
  INFO(row.dump(1));
  REQUIRE(row["page_faults_per_step"].is_number());
  const double ours = row["page_faults_per_step"].get<double>();
  // The count the child was handed is the model's, to the last bit.
  CHECK(row["model_flops_per_sample"].get<double>() ==
        ptune::models::count_flops("convnext_tiny", 10, 64).train());
  const auto py =
      run("'" + p + "' '" + std::string(PTUNE_TEST_DATA) + "/step_faults.py' convnext_tiny 64 8 4");
  INFO(py.err);
  REQUIRE(py.code == 0);
  const double theirs = std::stod(py.out);
  INFO("ptune's default child " << ours << " faults a step, Python " << theirs);
  CHECK(ours > theirs / 2);
  CHECK(ours < theirs * 2);
}
