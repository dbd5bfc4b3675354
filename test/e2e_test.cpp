// End to end: the built ptune binary on tiny configs: output, files and exit codes.
#include <catch2/catch.hpp>

#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "dist/launcher.hpp"
#include "runtime/cuda_support.hpp"
#include "ptune_build_id.hpp"
#include "test_util.hpp"

using ptune::test::run;
using ptune::test::TempDir;
using Json = nlohmann::ordered_json;

namespace {

const char* kTiny = R"({
  "name": "tiny", "device": "cpu", "cpu_threads": 1,
  "data": {"num_samples": 64, "image_size": 32},
  "loader": {"batch_size": 8},
  "measure": {"warmup_steps": 1, "steps": 2, "max_s": 1},
  "train": {"epochs": 1, "max_steps": 3},
  "sweep": [
    {"name": "baseline"},
    {"name": "workers", "set": {"loader.num_workers": 2}},
    {"name": "loader only", "set": {"measure.mode": "data"}},
    {"name": "pinned", "set": {"measure.mode": "train", "loader.pin_memory": true}},
    {"name": "batch 16", "set": {"loader.pin_memory": false, "loader.batch_size": 16}}
  ]
})";

/// Checks the one-line error contract: exit 2, nothing on stdout, one line on stderr.
void expect_usage_error(const ptune::test::RunResult& r, const std::string& message) {
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err == "ptune: error: " + message + "\n");
}

/// Starts ptune with `args` in the background, its stdout and stderr written to the files
/// named ("/dev/null" to drop them), for a test that signals it while it runs. Returns its PID.
pid_t spawn_ptune(const std::vector<std::string>& args, const std::string& stdout_path,
                  const std::string& stderr_path) {
  std::vector<std::string> argv{PTUNE_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;  // built before the fork: the child only calls what is safe there
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen(stdout_path.c_str(), "w", stdout);
    std::freopen(stderr_path.c_str(), "w", stderr);
    ::execv(PTUNE_EXE, c_argv.data());
    std::_Exit(127);
  }
  return pid;
}

}  // namespace

TEST_CASE("ptune --version and --help", "[e2e]") {
  auto v = run(ptune::test::exe() + " --version");
  CHECK(v.code == 0);
  CHECK(v.out == "ptune 0.1.0\n");
  for (std::string cmd :
       {"sweep", "compare", "train", "eval", "check", "schema", "tune", "launch", "report"}) {
    auto h = run(ptune::test::exe() + " " + cmd + " --help");
    CHECK(h.code == 0);
    CHECK(h.out.find("Usage") != std::string::npos);
  }
}

TEST_CASE("a tiny sweep prints the table and writes complete JSON", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --out " + dir.file("r.json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("samples/s") != std::string::npos);
  CHECK(r.out.find("batch 16") != std::string::npos);
  auto j = Json::parse(ptune::test::read_file(dir.file("r.json")));
  CHECK(j["status"] == "complete");
  CHECK(j["ptune_version"] == "0.1.0");
  CHECK(j["environment"]["device_kind"] == "cpu");
  CHECK(j["config"]["loader"]["batch_size"] == 8);
  REQUIRE(j["rows"].size() == 5);
  for (size_t i : {0, 1, 2, 4}) {
    INFO("row " << i);
    CHECK(j["rows"][i]["status"] == "ok");
    CHECK(j["rows"][i]["samples_per_s"].get<double>() > 0);
  }
  CHECK(j["rows"][1]["num_workers"] == 2);
  CHECK(j["rows"][2]["mode"] == "data");
  CHECK(j["rows"][2]["loss"].is_null());
  CHECK(j["rows"][3]["status"].get<std::string>().rfind("skipped: loader.pin_memory needs a CUDA device",
                                                        0) == 0);
  CHECK(j["rows"][4]["batch_size"] == 16);
  bool semantics = false;  // other notes (outlier windows, competing load) may come first
  for (const auto& note : j["rows"][4]["notes"])
    semantics =
        semantics || note.get<std::string>().rfind("loader.batch_size changes training semantics", 0) == 0;
  CHECK(semantics);
  CHECK(!std::filesystem::exists(dir.file("r.json.tmp")));
}

TEST_CASE("sweep formats json, csv, md on stdout and set overrides", "[e2e]") {
  TempDir dir;
  // (One CPU thread and measure.max_s 1: these tests check formats, not verdicts; two threads
  // per test on a machine running two tests oversubscribe its cores, and rows measured while the
  // other tests run would take their whole automatic budget.)
  auto cfg = dir.write("one.json",
                       R"({"device": "cpu", "cpu_threads": 1, "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1, "max_s": 1}})");
  auto j = run(ptune::test::exe() + " sweep " + cfg +
               " --format json --set loader.batch_size=2 --set measure.steps=2");
  REQUIRE(j.code == 0);
  auto doc = Json::parse(j.out);
  CHECK(doc["rows"][0]["batch_size"] == 2);
  CHECK(doc["rows"][0]["steps"] == 2);
  auto csv = run(ptune::test::exe() + " sweep " + cfg + " --format csv");
  CHECK(csv.out.rfind("index,name,", 0) == 0);
  auto md = run(ptune::test::exe() + " sweep " + cfg + " --format md");
  CHECK(md.out.rfind("| # | row |", 0) == 0);
  // The first row is the reference of the semantics notes, whatever it sets (a replayed
  // `ptune tune` result starts with the batch size it tuned).
  auto rows = dir.write("rows.json",
                        R"({"device": "cpu", "cpu_threads": 1, "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1, "max_s": 1},
      "sweep": [{"name": "tuned", "set": {"loader.batch_size": 2}}, {"name": "back", "set": {"loader.batch_size": 4}}]})");
  auto r = run(ptune::test::exe() + " sweep " + rows + " --format json");
  REQUIRE(r.code == 0);
  auto rd = Json::parse(r.out);
  auto semantics_notes = [](const Json& row) {  // other notes (outlier windows, load) may come and go
    int n = 0;
    for (const auto& note : row["notes"])
      n += note.get<std::string>().rfind("loader.batch_size changes training semantics", 0) == 0;
    return n;
  };
  CHECK(semantics_notes(rd["rows"][0]) == 0);
  CHECK(semantics_notes(rd["rows"][1]) == 1);
  // Rows run as many steps as their time allows: the note compares no losses.
  bool exact = false;
  for (const auto& note : rd["rows"][1]["notes"])
    exact = exact || note ==
                         "loader.batch_size changes training semantics: its loss is not the first row's to "
                         "compare (rows run different numbers of steps); measure.convergence_steps trains "
                         "each row's fresh model the same steps and compares the loss curves";
  CHECK(exact);
}

TEST_CASE("a row too short for /proc's CPU time counters: its load is not sampled, '?' and a note say so",
          "[e2e]") {
  // A data-loading row of a few windows lasts milliseconds: /proc's tick counters cannot tell
  // other processes' CPU time over that (one tick read as whole cores of competing load).
  TempDir dir;
  auto cfg = dir.write("data.json",
                       R"({"device": "cpu", "cpu_threads": 1, "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"mode": "data", "warmup_steps": 1, "steps": 1, "repeats": 1,
      "target_ci_pct": 100, "max_s": 0.001}})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --format md --out " + dir.file("r.json"));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("competing load") == std::string::npos);
  const Json row = Json::parse(ptune::test::read_file(dir.file("r.json")))["rows"][0];
  INFO(row.dump(1));
  CHECK(row["under_load"].is_null());
  CHECK(row["other_cpu_cores"].is_null());
  int noted = 0;
  for (const auto& n : row["notes"]) {
    const std::string note = n.get<std::string>();
    if (note.rfind("load not sampled (", 0) != 0) continue;
    ++noted;
    CHECK(note.find(" ms, too short for /proc's CPU time counters: at least ") != std::string::npos);
  }
  CHECK(noted == 1);
  // The markdown row's load cell (the 10th column): "?".
  const auto line = r.out.substr(r.out.find("\n| 0 |") + 1);
  std::vector<std::string> cells;
  std::istringstream in(line.substr(0, line.find('\n')));
  for (std::string c; std::getline(in, c, '|');) cells.push_back(c);
  REQUIRE(cells.size() > 10);
  CHECK(cells[10] == " ? ");
}

TEST_CASE("a shell loop: --label names the rows, --set is noted, --no-header appends CSV rows", "[e2e]") {
  TempDir dir;
  auto one = dir.write("one.json", R"({"device": "cpu", "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1, "repeats": 1, "target_ci_pct": 100}})");
  const std::string exe = ptune::test::exe();
  const std::string csv = dir.file("all.csv");
  // The header once, then rows only: one CSV with a row per run, each named and noted.
  // (In a subshell: run() redirects the command's own stdout.)
  auto first = run("(" + exe + " sweep " + one + " --format csv --label 'batch 4' > " + csv + ")");
  REQUIRE(first.code == 0);
  auto second = run("(" + exe + " sweep " + one + " --set loader.batch_size=2 --format csv --no-header >> " +
                    csv + ")");
  INFO(second.err);
  REQUIRE(second.code == 0);
  const std::string text = ptune::test::read_file(csv);
  INFO(text);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("index,name,", 0) == 0);
  CHECK(lines[1].rfind("0,batch 4,", 0) == 0);
  CHECK(lines[2].rfind("0,config,", 0) == 0);  // a config without sweep rows is one row, "config"
  CHECK(lines[2].find("command line: --set loader.batch_size=2") != std::string::npos);
  // In JSON and --out too; a sweep of several rows keeps each row's name after the label.
  auto rows = dir.write("rows.json", R"({"device": "cpu", "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1, "repeats": 1, "target_ci_pct": 100},
      "sweep": [{"name": "base"}, {"name": "data", "set": {"measure.mode": "data"}}]})");
  auto j = run(exe + " sweep " + rows + " --label run7 --set measure.steps=2 --format json --out " +
               dir.file("r.json"));
  INFO(j.err);
  REQUIRE(j.code == 0);
  for (const auto& doc : {Json::parse(j.out), Json::parse(ptune::test::read_file(dir.file("r.json")))}) {
    CHECK(doc["rows"][0]["name"] == "run7: base");
    CHECK(doc["rows"][1]["name"] == "run7: data");
    CHECK(doc["rows"][1]["notes"].back() == "command line: --set measure.steps=2");
  }
  // Without --set or --label, rows are as the config names them, with no note.
  auto plain = Json::parse(run(exe + " sweep " + rows + " --format json").out);
  CHECK(plain["rows"][0]["name"] == "base");
  for (const auto& note : plain["rows"][0]["notes"])
    CHECK(note.get<std::string>().rfind("command line:", 0) != 0);
  expect_usage_error(run(exe + " sweep " + one + " --no-header"),
                     "--no-header: only with --format csv (got --format table)");
}

TEST_CASE("cmake --install puts a ptune that runs on PATH", "[e2e]") {
  TempDir dir;
  auto r =
      run("cmake --install '" + std::string(PTUNE_BINARY_DIR) + "' --prefix '" + dir.file("prefix") + "'");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  const std::string installed = dir.file("prefix/bin/ptune");
  REQUIRE(std::filesystem::exists(installed));
  // From PATH alone, with no library path: it finds the LibTorch it was built against.
  auto v = run("env -u LD_LIBRARY_PATH PATH='" + dir.file("prefix/bin") + ":/usr/bin:/bin' ptune --version");
  INFO(v.err);
  CHECK(v.code == 0);
  CHECK(v.out.rfind("ptune ", 0) == 0);
  // ... and its training engine in prefix/lib/ptune, with LibTorch.
  CHECK(std::filesystem::exists(dir.file("prefix/lib/ptune/libptune_engine.so")));
  const std::string config = dir.write("tiny.json", kTiny);
  auto t =
      run("cd '" + dir.path.string() + "' && env -u LD_LIBRARY_PATH PATH='" + dir.file("prefix/bin") +
          ":/usr/bin:/bin' ptune train tiny.json --set train.max_steps=1 --set train.checkpoint_dir=ck -q");
  INFO(t.err);
  CHECK(t.code == 0);
  CHECK(t.out.rfind("trained 1 step: ", 0) == 0);
}

namespace {
/// What a process had mapped while it waited on a FIFO (to read its input, or to write its output).
struct Waiting {
  int code = -1;
  std::string maps;   // /proc/PID/maps
  double rss_mb = 0;  // VmRSS
};

/// Runs `argv`, one of whose arguments is the FIFO `fifo`: while it blocks opening it, takes its
/// /proc/PID/maps and resident memory, then writes `input` into the FIFO (or, without `input`,
/// reads what the process writes into it to the end) and waits for the exit.
Waiting run_waiting(const std::vector<std::string>& argv, const std::string& fifo,
                    const std::optional<std::string>& input) {
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  Waiting w;
  auto snapshot = [&] {
    const std::string proc = "/proc/" + std::to_string(pid);
    w.maps = ptune::test::read_file(proc + "/maps");
    std::istringstream status(ptune::test::read_file(proc + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0) w.rss_mb = std::stod(line.substr(6)) / 1024.0;
  };
  if (input) {
    std::ofstream in(fifo);  // returns once the process has opened the FIFO: it is started and waiting
    snapshot();
    in << *input;
  } else {
    std::ifstream out(fifo, std::ios::binary);  // returns once the process opens it to write
    snapshot();
    std::string drained((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  w.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return w;
}
}  // namespace

TEST_CASE("commands that need no tensors run without LibTorch, and the others name the missing engine",
          "[e2e]") {
  TempDir dir;
  // LibTorch's libraries alone are ~475 MB resident: analyze and check stay without them.
  const std::string trace = std::string(PTUNE_TEST_DATA) + "/traces/gpu_copy_bound.json";
  const std::string config = dir.write("tiny.json", kTiny);
  for (const auto& [argv, input] :
       {std::pair<std::vector<std::string>, std::string>{
            {PTUNE_EXE, "analyze", dir.file("fifo0"), "--format", "json"}, ptune::test::read_file(trace)},
        {{PTUNE_EXE, "check", dir.file("fifo1")}, kTiny}}) {
    const Waiting w = run_waiting(argv, argv[2], input);
    INFO(argv[1] << ": " << w.rss_mb << " MB resident");
    CHECK(w.code == 0);
    CHECK(w.maps.find("libtorch") == std::string::npos);
    CHECK(w.maps.find("libc10") == std::string::npos);
    CHECK(w.maps.find("libptune_engine") == std::string::npos);
    CHECK(w.rss_mb < 64);
  }
  // A training command reads its config before it loads the engine (a config error is as quick
  // as check's), once (the FIFO is read once) ...
  const Waiting c = run_waiting({PTUNE_EXE, "train", dir.file("fifo2"), "--set", "train.max_steps=1", "--set",
                                 "train.checkpoint_dir=" + dir.file("ck"), "-q"},
                                dir.file("fifo2"), std::string(kTiny));
  CHECK(c.code == 0);
  CHECK(c.maps.find("libptune_engine") == std::string::npos);
  CHECK(c.maps.find("libtorch") == std::string::npos);
  // ... and then trains with the engine and LibTorch loaded (seen as it writes its weights).
  const Waiting t =
      run_waiting({PTUNE_EXE, "train", config, "--set", "train.max_steps=1", "--set",
                   "train.checkpoint_dir=" + dir.file("ck2"), "-q", "--save-weights", dir.file("fifo3")},
                  dir.file("fifo3"), std::nullopt);
  CHECK(t.code == 0);
  CHECK(t.maps.find("libptune_engine.so") != std::string::npos);
  CHECK(t.maps.find("libtorch_cpu.so") != std::string::npos);
  // The executable alone (no engine beside it, none in ../lib/ptune): these still work ...
  std::filesystem::create_directories(dir.file("bin"));
  std::filesystem::copy_file(PTUNE_EXE, dir.file("bin/ptune"));
  const std::string alone = "'" + dir.file("bin/ptune") + "'";
  CHECK(run(alone + " schema").code == 0);
  CHECK(run(alone + " check " + config).code == 0);
  CHECK(run(alone + " analyze '" + trace + "'").code == 0);
  // ... and the training commands say what is missing, in one line ...
  for (const std::string cmd : {"train", "sweep", "tune"}) {
    const auto r = run(alone + " " + cmd + " " + config);
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    CHECK(r.err == "ptune: error: cannot load the training engine: " + dir.file("bin/libptune_engine.so") +
                       " not found (nor " + dir.file("lib/ptune/libptune_engine.so") +
                       "); sweep, compare, train, eval, tune and launch need it\n");
  }
  // ... after their usage and config errors, which need no engine.
  const std::string bad = dir.write("bad.json", R"({"loader": {"batch_size": 0}})");
  for (const auto& [args, err] : std::vector<std::pair<std::string, std::string>>{
           {"sweep " + config + " --format bogus",
            "--format: unknown format 'bogus'; allowed: table, json, csv, md"},
           {"sweep " + config + " --out " + dir.file("none/r.json"),
            "--out: folder '" + dir.file("none") + "' does not exist"},
           {"tune " + bad,
            bad + ": loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]"},
           {"eval " + config + " --weights w.pt --format csv",
            "--format: unknown format 'csv'; allowed: table, json"},
           {"train " + bad,
            bad + ": loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]"}}) {
    const auto r = run(alone + " " + args);
    INFO(args);
    CHECK(r.code == 2);
    CHECK(r.err == "ptune: error: " + err + "\n");
  }
  // An engine of another build (the program copied over an older installation) is refused.
  std::filesystem::copy_file(PTUNE_FAKE_ENGINE, dir.file("bin/libptune_engine.so"));
  const auto other = run(alone + " train " + config);
  CHECK(other.code == 1);
  CHECK(other.err ==
        "ptune: error: cannot load the training engine: " + dir.file("bin/libptune_engine.so") +
            " is from another build of ptune (0000000000000000, this program is " PTUNE_BUILD_ID
            "); install the program and its engine together (cmake --install BUILD --prefix PREFIX)\n");
}

TEST_CASE("check prints the resolved config", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("c.json", R"({"loader": {"batch_size": 9}})");
  auto r = run(ptune::test::exe() + " check " + cfg + " --set optim.lr=0.5");
  REQUIRE(r.code == 0);
  auto j = Json::parse(r.out);
  CHECK(j["loader"]["batch_size"] == 9);
  CHECK(j["optim"]["lr"] == 0.5);
  CHECK(j["model"]["arch"] == "resnet18");  // defaults filled in
}

TEST_CASE("bad input: one line, exit code 2", "[e2e]") {
  TempDir dir;
  const std::string exe = ptune::test::exe();
  auto unknown = dir.write("u.json", R"({"loader": {"batch_sise": 3}})");
  expect_usage_error(run(exe + " check " + unknown),
                     unknown + ": unknown key 'loader.batch_sise', did you mean 'loader.batch_size'?");
  auto arch = dir.write("a.json", R"({"model": {"arch": "resnet19"}})");
  expect_usage_error(run(exe + " sweep " + arch),
                     arch +
                         ": model.arch: unknown value 'resnet19', did you mean 'resnet18'? allowed: "
                         "resnet18, resnet34, resnet50, resnet101, resnet152, resnext50_32x4d, "
                         "wide_resnet50_2, mobilenet_v3_large, convnext_tiny, vit_b_16");
  auto batch = dir.write("b.json", R"({"loader": {"batch_size": 0}})");
  expect_usage_error(run(exe + " train " + batch),
                     batch + ": loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]");
  auto lr = dir.write("lr.json", R"({"optim": {"lr": -1}})");
  expect_usage_error(run(exe + " check " + lr),
                     lr + ": optim.lr: -1 is out of range; allowed: a number in (0, 1000]");
  auto workers = dir.write("w.json", R"({"loader": {"num_workers": -2}})");
  expect_usage_error(run(exe + " check " + workers),
                     workers + ": loader.num_workers: -2 is out of range; allowed: an integer in [0, 256]");
  auto type = dir.write("t.json", R"({"loader": {"shuffle": "yes"}})");
  expect_usage_error(run(exe + " check " + type),
                     type + ": loader.shuffle: expected true or false, got \"yes\" (a string)");
  auto malformed = dir.write("m.json", "{\n  \"seed\": 1,,\n}");
  auto r = run(exe + " check " + malformed);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ptune: error: " + malformed + ":2:13: malformed JSON: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  expect_usage_error(run(exe + " check " + dir.file("missing.json")),
                     "cannot open config '" + dir.file("missing.json") + "': No such file or directory");
  auto ok = dir.write("ok.json", "{}");
  expect_usage_error(run(exe + " check " + ok + " --set loader.wokers=2"),
                     "--set: unknown key 'loader.wokers'");
  expect_usage_error(run(exe + " sweep " + ok + " --format yaml"),
                     "--format: unknown format 'yaml'; allowed: table, json, csv, md");
  auto cli = run(exe + " sweep");
  CHECK(cli.code == 2);
  CHECK(cli.err.rfind("ptune: error: ", 0) == 0);
  auto cmd = run(exe + " sweeep " + ok);
  CHECK(cmd.code == 2);
}

TEST_CASE("train with checkpoints and weights, then eval as JSON", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  auto t = run(exe + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") + " --save-weights " +
               dir.file("w.pt"));
  INFO(t.err);
  REQUIRE(t.code == 0);
  CHECK(t.out.rfind("trained 3 steps", 0) == 0);
  CHECK(t.err.find("step 3/3") != std::string::npos);
  // A batch larger than the dataset names the dataset's samples (64), as sweep does.
  const auto big = run(exe + " train " + cfg + " --set loader.batch_size=65");
  CHECK(big.code == 2);
  CHECK(big.err ==
        "ptune: error: loader.batch_size: 65 is larger than the 64 samples of the dataset per epoch with "
        "drop_last; lower it or raise data.num_samples\n");
  CHECK(std::filesystem::exists(dir.file("ck/tiny-step3.pt")));
  auto e = run(exe + " eval " + cfg + " --weights " + dir.file("w.pt") + " --format json");
  INFO(e.err);
  REQUIRE(e.code == 0);
  auto j = Json::parse(e.out);
  CHECK(j["samples"] == 64);
  CHECK(j["top1"].get<double>() >= 0);
  CHECK(j["loss"].get<double>() > 0);
  auto bad = run(exe + " eval " + cfg + " --weights " + cfg);
  CHECK(bad.code == 1);
  CHECK(bad.err.rfind("ptune: error: " + cfg + ": not a torch.save zip archive", 0) == 0);
}

TEST_CASE(
    "Ctrl-C (SIGINT) and SIGTERM stop a sweep cleanly: finished rows kept, status interrupted, exit 130 or "
    "143",
    "[e2e]") {
  const int sig = GENERATE(SIGINT, SIGTERM);
  INFO("signal " << sig);
  TempDir dir;
  auto cfg = dir.write("long.json", R"({"device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 64, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 2},
      "sweep": [{"name": "quick"}, {"name": "slow", "set": {"measure.steps": 100000}}]})");
  const std::string out = dir.file("r.json"), stdout_path = dir.file("stdout");
  const pid_t pid = spawn_ptune({"sweep", cfg, "--out", out}, stdout_path, "/dev/null");
  // Wait until the first row is on disk, then interrupt the second.
  bool first_row = false;
  for (int i = 0; i < 600 && !first_row; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first_row = ptune::test::read_file(out).find("\"quick\"") != std::string::npos;
  }
  REQUIRE(first_row);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + sig);
  auto j = Json::parse(ptune::test::read_file(out));
  CHECK(j["status"] == "interrupted");
  REQUIRE(j["rows"].size() == 1);
  CHECK(j["rows"][0]["status"] == "ok");
  CHECK(ptune::test::read_file(stdout_path).find("quick") != std::string::npos);  // the partial table
}

TEST_CASE("sweep with profiling writes a Chrome trace per row and the JSON names it", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("p.json", R"({"name": "Prof Test", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "profile_steps": 1, "out_dir": ")" +
                                     dir.file("runs") + R"("},
      "sweep": [{"name": "base"}, {"name": "set to none", "set": {"optim.set_to_none": true}}]})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --profile --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(ptune::test::without_load_warnings(r.err).empty());  // no profiler chatter on a machine without a GPU
  auto j = Json::parse(r.out);
  REQUIRE(j["rows"].size() == 2);
  const std::vector<std::string> folders = {dir.file("runs") + "/prof-test/00-base",
                                            dir.file("runs") + "/prof-test/01-set-to-none"};
  for (size_t i = 0; i < folders.size(); ++i) {
    // Named as torch.profiler's tensorboard_trace_handler names them, in the row's folder.
    const std::string path = j["rows"][i]["trace"].get<std::string>();
    INFO(path);
    CHECK(std::filesystem::path(path).parent_path().string() == folders[i]);
    const std::string name = std::filesystem::path(path).filename().string();
    CHECK(name.size() > 14);
    CHECK(name.substr(name.size() - 14) == ".pt.trace.json");
    auto trace = Json::parse(ptune::test::read_file(path));
    CHECK(trace["traceEvents"].size() > 10);
    CHECK(trace["traceName"] == path);
    CHECK(!trace.contains("ERROR"));
    CHECK(trace["ptune"]["row"] == j["rows"][i]["name"]);
  }
}

TEST_CASE("sweep --rows runs the chosen rows with the changes of the rows before them", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --rows 1,3-4 --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto j = Json::parse(r.out);
  REQUIRE(j["rows"].size() == 3);
  CHECK(j["rows"][0]["name"] == "workers");
  CHECK(j["rows"][1]["name"] == "pinned");
  CHECK(j["rows"][1]["status"].get<std::string>().rfind("skipped: loader.pin_memory needs a CUDA device",
                                                        0) == 0);
  CHECK(j["rows"][2]["name"] == "batch 16");
  CHECK(j["rows"][2]["batch_size"] == 16);
  CHECK(j["rows"][2]["num_workers"] == 2);  // row 1's change still applies
  CHECK(j["rows"][2]["mode"] == "train");   // and row 3's
  // Each row keeps its place in the sweep: in the JSON, the CSV's index and the table's #.
  CHECK(j["rows"][0]["index"] == 1);
  CHECK(j["rows"][1]["index"] == 3);
  CHECK(j["rows"][2]["index"] == 4);
  auto csv = run(ptune::test::exe() + " sweep " + cfg + " --rows 1 --format csv --no-header");
  REQUIRE(csv.code == 0);
  CHECK(csv.out.rfind("1,workers,", 0) == 0);
  // Two rows of one name: the HTML page's resolved config is the chosen row's, found by its place.
  const auto twins = dir.write("twins.json", R"({"name": "twins", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "max_s": 1},
      "sweep": [{"name": "x"}, {"name": "x", "set": {"optim.set_to_none": true}}]})");
  const auto page =
      run(ptune::test::exe() + " sweep " + twins + " --rows 1 -q --out " + dir.file("twins.html"));
  REQUIRE(page.code == 0);
  const std::string html = ptune::test::read_file(dir.file("twins.html"));
  CHECK(html.find("<tr><th>optim.set_to_none</th><td>true</td></tr>") != std::string::npos);
  expect_usage_error(run(ptune::test::exe() + " sweep " + cfg + " --rows 2-9"),
                     "--rows: row 9 does not exist; allowed: 0 to 4");
  expect_usage_error(run(ptune::test::exe() + " sweep " + cfg + " --rows 3-1"),
                     "--rows: '3-1' is an empty range (write it low-high)");
  expect_usage_error(run(ptune::test::exe() + " sweep " + cfg + " --rows x"),
                     "--rows: 'x' is not a row index or range (e.g. 7, 0,3 or 5-7)");
}

TEST_CASE("launch refuses more ranks than the machine can run", "[e2e]") {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int limit = ptune::dist::max_ranks_per_node();
  CHECK(limit >= 4 * cores);
  expect_usage_error(
      run(ptune::test::exe() + " launch --nproc-per-node " + std::to_string(limit + 1) + " -- schema"),
      "launch: --nproc-per-node " + std::to_string(limit + 1) +
          " is more ranks than this machine can run; at most " + std::to_string(limit) + " (4 per core on " +
          std::to_string(cores) + " cores, or one per GPU on " +
          std::to_string(ptune::runtime::cuda::device_count()) + " GPUs)");
}

TEST_CASE("resume refuses a checkpoint that does not fit the config, weights and checkpoints are told apart",
          "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  const std::string ck = dir.file("ck/tiny-step3.pt"), w = dir.file("w.pt");
  auto t =
      run(exe + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") + " --save-weights " + w);
  INFO(t.err);
  REQUIRE(t.code == 0);
  auto resume = [&](const std::string& file, const std::string& sets) {
    return run(exe + " train " + cfg + " --resume " + file +
               " --set train.max_steps=4 --set train.checkpoint_dir=" + dir.file("ck2") + sets);
  };
  auto expect_error = [](const ptune::test::RunResult& r, const std::string& message) {
    CHECK(r.code == 1);
    CHECK(r.err == "ptune: error: " + message + "\n");
  };
  expect_error(resume(ck, " --set optim.kind=adamw"),
               ck + ": checkpoint of an sgd optimizer, the config's optim.kind is adamw; resume with the "
                    "same optimizer (its state cannot become another's)");
  expect_error(resume(ck, " --set model.num_classes=7"),
               ck + ": checkpoint of a model with 10 classes, the config's model.num_classes is 7; resume "
                    "with the same number, or start a new run from its weights");
  expect_error(
      resume(w, ""),
      w + ": a weights file (a state_dict), not a ptune checkpoint: start from it with --set model.weights=" +
          w);
  expect_error(resume(dir.file("ck"), ""), "--resume: " + dir.file("ck") + ": is a folder, not a file");
  auto other = resume(ck, " --set loader.batch_size=4 --set optim.amp=bf16");
  INFO(other.err);
  CHECK(other.code == 0);  // allowed, and said
  CHECK(
      other.err.find("resuming with loader.batch_size 4 (the checkpoint's was 8): the step count goes on") !=
      std::string::npos);
  CHECK(other.err.find("resuming with optim.amp bf16 (the checkpoint's was off)") != std::string::npos);
  // A checkpoint given as weights, and weights that do not exist.
  // ... with the exact command that exports its weights, which works: they are the run's own.
  const std::string exported = dir.file("ck/tiny-step3-weights.pt");
  const std::string export_cmd = "ptune train " + cfg + " --resume " + ck +
                                 " --set train.max_steps=3 --set train.checkpoint_dir=" + dir.file("ck") +
                                 " --save-weights " + exported;
  expect_error(run(exe + " eval " + cfg + " --weights " + ck),
               ck +
                   ": this is a ptune checkpoint, not a weights file: continue it with ptune train --resume, "
                   "or export its weights with ptune train --save-weights, exactly: " +
                   export_cmd + " (no further step is trained), then: ptune eval " + cfg + " --weights " +
                   exported);
  auto exp = run(exe + export_cmd.substr(std::string("ptune").size()));
  INFO(exp.err);
  REQUIRE(exp.code == 0);
  // Nothing is trained, and the summary says so (no loss or rate of steps not run); the
  // checkpoint is left as it was.
  CHECK(exp.out ==
        "no step trained: the checkpoint is at step 3, and this run ends at step 3 (train.max_steps, "
        "train.epochs); checkpoint " +
            ck + ", weights " + exported + "\n");
  auto eval_exported = run(exe + " eval " + cfg + " --weights " + exported + " --format json");
  auto eval_saved = run(exe + " eval " + cfg + " --weights " + w + " --format json");
  REQUIRE(eval_exported.code == 0);
  CHECK(eval_exported.out == eval_saved.out);
  expect_usage_error(run(exe + " check " + cfg + " --set model.weights=" + dir.file("none.pt")),
                     cfg + ": model.weights: '" + dir.file("none.pt") + "' does not exist");
}

TEST_CASE("train keeps the newest checkpoints, and a name cannot leave its folders", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  auto t = run(exe + " train " + cfg +
               " --set train.max_steps=5 --set train.checkpoint_every=1 --set train.keep_checkpoints=2 --set "
               "train.checkpoint_dir=" +
               dir.file("ck"));
  INFO(t.err);
  REQUIRE(t.code == 0);
  std::vector<std::string> kept;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("ck")))
    kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  CHECK(kept == std::vector<std::string>{"tiny-step4.pt", "tiny-step5.pt"});
  expect_usage_error(run(exe + " check " + cfg + " --set name=a/b"),
                     cfg +
                         ": name: 'a/b' cannot name files inside a folder; use letters, digits, '-', '_' or "
                         "'.' (no '/', no control character, not '..')");
  expect_usage_error(run(exe + " check " + cfg + " --set name=.."),
                     cfg +
                         ": name: '..' cannot name files inside a folder; use letters, digits, '-', '_' or "
                         "'.' (no '/', no control character, not '..')");
  expect_usage_error(
      run(exe + " check " + cfg + " --set 'name=\"a\\nb\"'"),
      cfg +
          ": name: 'a\\x0ab' cannot name files inside a folder; use letters, digits, '-', '_' or "
          "'.' (no '/', no control character, not '..')");
  // Unwritable outputs are found before training, not after it.
  auto w = run(exe + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck2") + " --save-weights " +
               dir.file("missing/w.pt"));
  CHECK(w.code == 1);
  CHECK(w.err == "ptune: error: --save-weights: folder '" + dir.file("missing") + "' does not exist\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("ck2/tiny-step3.pt")));
}

// ---- ptune report: the HTML report in a real browser, and the CI gate ----------------------

namespace {

/// A results file of rows (name, samples/s or none, spread %, status), as ptune writes them.
Json results_doc(const std::vector<std::tuple<std::string, std::optional<double>, double, std::string>>& rows,
                 const std::string& device = "Test CPU") {
  Json doc = {{"ptune_version", "0.1.0"},
              {"config", {{"name", "report test"}, {"loader", {{"batch_size", 32}}}}},
              {"environment",
               {{"torch", "2.11.0"},
                {"device", device},
                {"device_kind", "cpu"},
                {"cuda", nullptr},
                {"cpu_threads", 2},
                {"world_size", 1}}},
              {"rows", Json::array()},
              {"status", "complete"}};
  for (const auto& [name, sps, spread, status] : rows) {
    Json r = {{"name", name},
              {"changes", Json::object()},
              {"mode", "train"},
              {"num_workers", 0},
              {"status", status}};
    if (sps) {
      r["batch_size"] = 32, r["steps"] = 10, r["ms_per_step"] = 32000.0 / *sps, r["spread_pct"] = spread;
      r["samples_per_s"] = *sps, r["data_wait_pct"] = 10.0, r["h2d_pct"] = 5.0, r["compute_pct"] = 85.0;
      r["loss"] = 2.3, r["diagnosis"] = "compute-bound on fp32: try optim.amp";
    }
    doc["rows"].push_back(r);
  }
  return doc;
}

/// Where the browser tests leave their pages and screenshots for a person to look at.
std::string screenshot_dir() {
  const std::string d = std::string(PTUNE_BINARY_DIR) + "/report-screenshots";
  std::filesystem::create_directories(d);
  return d;
}

/// The Chromium of this machine ($PTUNE_CHROMIUM, else chromium or chromium-browser on PATH),
/// or "" (scripts/setup installs Debian's chromium for the tests).
std::string chromium() {
  if (const char* c = std::getenv("PTUNE_CHROMIUM"); c && *c) return c;
  for (const char* name : {"chromium", "chromium-browser"}) {
    auto r = run(std::string("command -v ") + name);
    if (r.code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  return "";
}

/// What the browser made of a page: the DOM after loading, and every console message.
struct Page {
  int code = -1;
  std::string dom;
  std::vector<std::string> console;  // the browser's CONSOLE log lines: errors, CSP violations, logs
  std::string screenshot;
  std::string log;
};

/// Opens `html` (a file) in headless Chromium once: dumps the DOM, collects console messages,
/// and writes a screenshot `name`.png (the page is copied beside it as `name`.html).
Page open_page(const std::string& browser, const std::string& html, const std::string& name, int height) {
  TempDir profile;
  const std::string dir = screenshot_dir();
  std::filesystem::copy_file(html, dir + "/" + name + ".html",
                             std::filesystem::copy_options::overwrite_existing);
  Page p;
  p.screenshot = dir + "/" + name + ".png";
  std::filesystem::remove(p.screenshot);
  auto r =
      run("timeout 120 '" + browser +
          "' --headless --disable-gpu --no-sandbox --disable-dev-shm-usage --no-first-run --hide-scrollbars "
          "--user-data-dir='" +
          profile.path.string() + "' --enable-logging=stderr --v=0 --window-size=1000," +
          std::to_string(height) + " --screenshot='" + p.screenshot + "' --dump-dom 'file://" + html + "'");
  p.code = r.code;
  p.dom = r.out;
  p.log = r.err;
  std::istringstream lines(r.err);
  std::string line;
  while (std::getline(lines, line))
    if (line.find(":CONSOLE") != std::string::npos) p.console.push_back(line);
  return p;
}

std::string unescape_attr(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&#39;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  }
  return s;
}

std::string attr_of(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return unescape_attr(tag.substr(start, tag.find('"', start) - start));
}

/// The bars of the samples/s charts in a DOM: per chart (one per mode and arch), (run, row, value, width).
struct DomBar {
  int run;
  std::string row;
  double value, width;
};
std::vector<std::vector<DomBar>> dom_bars(const std::string& dom) {
  std::vector<std::vector<DomBar>> charts;
  size_t at = 0;
  while ((at = dom.find("<svg class=\"chart throughput\"", at)) != std::string::npos) {
    const size_t end = dom.find("</svg>", at);
    charts.emplace_back();
    for (size_t b = dom.find("<rect class=\"bar\"", at); b < end;
         b = dom.find("<rect class=\"bar\"", b + 1)) {
      const std::string tag = dom.substr(b, dom.find('>', b) - b);
      charts.back().push_back({std::stoi(attr_of(tag, "data-run")), attr_of(tag, "data-row"),
                               std::stod(attr_of(tag, "data-value")), std::stod(attr_of(tag, "width"))});
    }
    at = end;
  }
  return charts;
}

/// Checks what every report page must be in the browser: loaded, no console message (no
/// script error, no blocked network load), the screenshot written, and the bars of `expected`
/// ((run, row name) -> samples/s): one per measured row, the file's value, one scale per chart.
void check_page(const Page& p, const std::map<std::pair<int, std::string>, double>& expected) {
  INFO(p.log.substr(p.log.size() > 3000 ? p.log.size() - 3000 : 0));
  REQUIRE(p.code == 0);
  CHECK(p.console.empty());
  CHECK(p.dom.find("</html>") != std::string::npos);
  CHECK(p.dom.find("<script") == std::string::npos);
  REQUIRE(std::filesystem::exists(p.screenshot));
  CHECK(std::filesystem::file_size(p.screenshot) > 1000);
  size_t n = 0;
  for (const auto& chart : dom_bars(p.dom)) {
    for (const auto& bar : chart) {
      INFO("run " << bar.run << " row '" << bar.row << "'");
      ++n;
      auto it = expected.find({bar.run, bar.row});
      REQUIRE(it != expected.end());
      CHECK(bar.value == Approx(it->second));
      CHECK(bar.width / bar.value == Approx(chart[0].width / chart[0].value).epsilon(0.001));  // one scale
      CHECK(bar.width > 0);
      CHECK(bar.width <= 410.0);  // the charts' bar area
    }
  }
  CHECK(n == expected.size());
}

#define REQUIRE_BROWSER(var)                                                                            \
  const std::string var = chromium();                                                                   \
  if (var.empty()) {                                                                                    \
    WARN("skipped: no chromium on PATH (scripts/test installs Debian's chromium; set PTUNE_CHROMIUM)"); \
    return;                                                                                             \
  }

}  // namespace

TEST_CASE("the browser check sees a script error (the check itself can fail)", "[e2e][report][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  auto html = dir.write("broken.html",
                        "<!DOCTYPE html><html><head><meta "
                        "charset=\"utf-8\"><title>broken</title></head><body><p>broken</"
                        "p><script>no_such_function();</script></body></html>");
  auto p = open_page(browser, html, "control-broken", 300);
  INFO(p.log);
  REQUIRE(p.code == 0);
  REQUIRE(p.console.size() == 1);
  CHECK(p.console[0].find("no_such_function is not defined") != std::string::npos);
}

TEST_CASE("sweep --out r.html: a 1-row report opens in a browser with its one bar",
          "[e2e][report][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  auto cfg = dir.write("one.json", R"({"name": "one row", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 2, "target_ci_pct": 100}, "sweep": [{"name": "baseline"}]})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --format json --out " + dir.file("one.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto j = Json::parse(r.out);
  auto p = open_page(browser, dir.file("one.html"), "one-row", 900);
  check_page(p, {{{0, "baseline"}, j["rows"][0]["samples_per_s"].get<double>()}});
  CHECK(p.dom.find("<title>ptune report: one row</title>") != std::string::npos);
  // The diagnosis, as the results file has it (a default process may be allocator-bound here).
  const std::string diagnosis = j["rows"][0]["diagnosis"];
  CHECK(p.dom.find(diagnosis.substr(0, diagnosis.find(' '))) != std::string::npos);
}

TEST_CASE("a 30-row report with skipped and failed rows and three modes opens in a browser",
          "[e2e][report][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  std::vector<std::tuple<std::string, std::optional<double>, double, std::string>> rows;
  std::map<std::pair<int, std::string>, double> expected;
  for (int i = 0; i < 30; ++i) {
    const std::string name = "row " + std::to_string(i);
    if (i % 7 == 3)
      rows.emplace_back(name, std::nullopt, 0,
                        "skipped: loader.pin_memory needs a CUDA device; none is visible");
    else if (i % 11 == 5)
      rows.emplace_back(name, std::nullopt, 0, "failed: out of memory");
    else {
      rows.emplace_back(name, 100.0 + 37.5 * i, 1.0, "ok");
      expected[{0, name}] = 100.0 + 37.5 * i;
    }
  }
  auto doc = results_doc(rows);
  doc["rows"][28]["mode"] = "data";
  doc["rows"][29]["mode"] = "synthetic";
  doc["rows"][1]["gpu_busy_pct"] = 64.5;
  doc["rows"][1]["peak_mem_bytes"] = 3221225472LL;
  doc["rows"][2]["loss_curve"] = {2.3, 2.1, 2.0, 1.9};
  doc["rows"][4]["loss_curve"] = {2.3, 2.2, 2.2, 2.1};
  auto file = dir.write("r30.json", doc.dump());
  auto r = run(ptune::test::exe() + " report " + file + " -o " + dir.file("r30.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto p = open_page(browser, dir.file("r30.html"), "thirty-rows", 2400);
  check_page(p, expected);
  CHECK(dom_bars(p.dom).size() == 3);  // train, data, synthetic: a chart each
  CHECK(p.dom.find("skipped: loader.pin_memory needs a CUDA device") != std::string::npos);
  CHECK(p.dom.find("failed: out of memory") != std::string::npos);
  CHECK(p.dom.find("class=\"gpu-busy\"") != std::string::npos);
  CHECK(p.dom.find("peak 3.0 GiB") != std::string::npos);
  CHECK(p.dom.find("class=\"curve\"") != std::string::npos);
}

TEST_CASE("names needing escaping stay text in the browser", "[e2e][report][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  const std::vector<std::string> names = {
      "<script>alert(\"x\")</script>", "a & b",      "a | b",
      "\"double\" 'single'",           "two\nlines", "</svg><b>bold</b><svg>"};
  std::vector<std::tuple<std::string, std::optional<double>, double, std::string>> rows;
  std::map<std::pair<int, std::string>, double> expected;
  for (size_t i = 0; i < names.size(); ++i) {
    rows.emplace_back(names[i], 50.0 * (i + 1), 0.0, "ok");
    expected[{0, names[i]}] = 50.0 * (i + 1);
  }
  auto doc = results_doc(rows, "CPU <&> \"quoted\"");
  doc["rows"][2]["notes"] = {"a note with <tags> & | pipes"};
  auto file = dir.write("names.json", doc.dump());
  auto r = run(ptune::test::exe() + " report " + file + " -o " + dir.file("names.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto p = open_page(browser, dir.file("names.html"), "escaping", 1200);
  check_page(p, expected);
  CHECK(p.dom.find("<b>bold</b>") == std::string::npos);  // no element made from a name
  CHECK(p.dom.find("&lt;/svg&gt;&lt;b&gt;bold&lt;/b&gt;&lt;svg&gt;") != std::string::npos);
  CHECK(p.dom.find("&lt;script&gt;alert(\"x\")&lt;/script&gt;") != std::string::npos);
  CHECK(p.dom.find("CPU &lt;&amp;&gt; \"quoted\"") != std::string::npos);
  CHECK(p.dom.find("a note with &lt;tags&gt; &amp; | pipes") != std::string::npos);
}

TEST_CASE("two runs side by side in the browser: rows matched by name", "[e2e][report][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  auto before = dir.write("before.json", results_doc({{"baseline", 100.0, 1, "ok"},
                                                      {"workers", 150.0, 1, "ok"},
                                                      {"graphs", std::nullopt, 0, "skipped: needs CUDA"},
                                                      {"only before", 80.0, 1, "ok"}},
                                                     "Machine A")
                                             .dump());
  auto after = dir.write("after.json", results_doc({{"baseline", 120.0, 1, "ok"},
                                                    {"workers", 210.0, 1, "ok"},
                                                    {"graphs", 400.0, 1, "ok"},
                                                    {"only after", 90.0, 1, "ok"}},
                                                   "Machine B")
                                           .dump());
  auto r = run(ptune::test::exe() + " report " + before + " " + after + " -o " + dir.file("two.html"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto p = open_page(browser, dir.file("two.html"), "two-runs", 1400);
  check_page(p, {{{0, "baseline"}, 100},
                 {{0, "workers"}, 150},
                 {{0, "only before"}, 80},
                 {{1, "baseline"}, 120},
                 {{1, "workers"}, 210},
                 {{1, "graphs"}, 400},
                 {{1, "only after"}, 90}});
  CHECK(p.dom.find("×1.20 before") != std::string::npos);  // after's baseline against before's
  CHECK(p.dom.find("×1.40 before") != std::string::npos);
  CHECK(p.dom.find("Machine A") != std::string::npos);
  CHECK(p.dom.find("Machine B") != std::string::npos);
  CHECK(p.dom.find("not in this run") != std::string::npos);
}

TEST_CASE("report --against: exit 1 for a regression beyond noise or a missing row, 0 within noise",
          "[e2e][report]") {
  TempDir dir;
  const std::string exe = ptune::test::exe();
  auto old =
      dir.write("old.json", results_doc({{"baseline", 100.0, 1, "ok"}, {"workers", 200.0, 2, "ok"}}).dump());
  // workers 20% slower: beyond 5% and both spreads.
  auto slower = dir.write("slower.json",
                          results_doc({{"baseline", 101.0, 1, "ok"}, {"workers", 160.0, 1, "ok"}}).dump());
  auto r = run(exe + " report " + slower + " --against " + old + " --fail-if-slower 5");
  CHECK(r.code == 1);
  CHECK(r.out.find("workers") != std::string::npos);
  CHECK(r.out.find("slower (regression)") != std::string::npos);
  CHECK(r.out.find("0.800x") != std::string::npos);
  CHECK(r.err ==
        "ptune: error: 1 row(s) regressed against " + old + " (--fail-if-slower 5%): workers (slower)\n");
  // Without --fail-if-slower the comparison is printed and the exit code is 0.
  CHECK(run(exe + " report " + slower + " --against " + old).code == 0);
  // 8% slower, but the old run's spread was 10%: within noise.
  auto noisy_old = dir.write(
      "noisy.json", results_doc({{"baseline", 100.0, 10, "ok"}, {"workers", 200.0, 10, "ok"}}).dump());
  auto within = dir.write("within.json",
                          results_doc({{"baseline", 92.0, 1, "ok"}, {"workers", 199.0, 1, "ok"}}).dump());
  auto w = run(exe + " report " + within + " --against " + noisy_old + " --fail-if-slower 5");
  INFO(w.out << w.err);
  CHECK(w.code == 0);
  CHECK(w.out.find("within noise") != std::string::npos);
  CHECK(w.out.find("no regression") != std::string::npos);
  CHECK(w.err.empty());
  // A row of the old run missing from the new one.
  auto missing = dir.write("missing.json", results_doc({{"baseline", 100.0, 1, "ok"}}).dump());
  auto m = run(exe + " report " + missing + " --against " + old + " --fail-if-slower 5 -o " +
               dir.file("cmp.html"));
  CHECK(m.code == 1);
  CHECK(m.out.find("missing (regression)") != std::string::npos);
  CHECK(m.err.find("workers (missing)") != std::string::npos);
  CHECK(ptune::test::read_file(dir.file("cmp.html")).find("<h3>Side by side (samples/s)</h3>") !=
        std::string::npos);
  // A failed row.
  auto failed = dir.write("failed.json", results_doc({{"baseline", 100.0, 1, "ok"},
                                                      {"workers", std::nullopt, 0, "failed: out of memory"}})
                                             .dump());
  CHECK(run(exe + " report " + failed + " --against " + old + " --fail-if-slower 5").code == 1);
  // Usage errors: exit 2, one line.
  auto no_against = run(exe + " report " + old + " --fail-if-slower 5");
  CHECK(no_against.code == 2);
  CHECK(no_against.err.rfind("ptune: error: --fail-if-slower requires --against", 0) == 0);
  expect_usage_error(run(exe + " report " + old),
                     "report: nothing to do; give -o FILE.html for the HTML report, --against OLD.json for "
                     "the comparison, --format FORMAT for the table again, or any of them");
  const std::string cfg_for_empty = dir.write("empty_w.json", "{}");
  expect_usage_error(run(exe + " report " + old + " --against ''"),
                     "report: --against: an empty path; name the older results file");
  expect_usage_error(run(exe + " report " + old + " -o ''"), "report: -o: an empty path; name a file");
  expect_usage_error(run(exe + " eval " + cfg_for_empty + " --weights ''"),
                     "--weights: an empty path; name a weights file");
  expect_usage_error(
      run(exe + " report " + old + " -o " + dir.file("r.json")),
      "report: -o '" + dir.file("r.json") + "' is not an .html file; ptune report writes HTML");
  expect_usage_error(run(exe + " report " + dir.file("none.json") + " --against " + old),
                     "cannot read results '" + dir.file("none.json") + "': No such file or directory");
  auto cfg = dir.write("cfg.json", R"({"loader": {"batch_size": 4}})");
  expect_usage_error(run(exe + " report " + cfg + " -o " + dir.file("x.html")),
                     cfg +
                         ": not a results file: expected a JSON object with a \"rows\" list (ptune sweep "
                         "--out FILE.json, or scripts/bench/case_study_vs_pytorch.py --json FILE.json)");
}

TEST_CASE("sweep --out FILE.CSV writes CSV (any case) and its companion, JSON rows have one shape",
          "[e2e][report]") {
  TempDir dir;
  auto cfg = dir.write("two.json",
                       R"({"device": "cpu", "cpu_threads": 1, "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1},
      "sweep": [{"name": "base"}, {"name": "pinned", "set": {"loader.pin_memory": true}}]})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --format json --out " + dir.file("r.CSV"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto csv = ptune::test::read_file(dir.file("r.CSV"));
  CHECK(csv.rfind("index,name,changes,mode,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
  auto env = Json::parse(ptune::test::read_file(dir.file("r.env.json")));
  CHECK(env["environment"]["device_kind"] == "cpu");
  CHECK(env["status"] == "complete");
  auto j = Json::parse(r.out);
  REQUIRE(j["rows"].size() == 2);
  std::vector<std::string> k0, k1;
  for (auto it = j["rows"][0].begin(); it != j["rows"][0].end(); ++it) k0.push_back(it.key());
  for (auto it = j["rows"][1].begin(); it != j["rows"][1].end(); ++it) k1.push_back(it.key());
  CHECK(k0 == k1);  // an ok row and a skipped row: the same keys
  CHECK(j["rows"][1]["samples_per_s"].is_null());
  CHECK(j["rows"][1]["diagnosis"].is_null());
}

TEST_CASE("the exit status tells the truth: failed rows, a full stdout, an ignored SIGINT", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("rows.json", R"({"device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "target_ci_pct": 100},
      "sweep": [{"name": "fine"},
                {"name": "no folder", "set": {"data.kind": "image_folder", "data.root": ")" +
                                        dir.file("none") + R"("}},
                {"name": "pinned", "set": {"data.kind": "fake_cifar", "loader.pin_memory": true}}]})");
  const std::string exe = ptune::test::exe();
  auto r = run(exe + " sweep " + cfg + " --format json --out " + dir.file("r.json"));
  CHECK(r.code == 1);
  CHECK(ptune::test::without_load_warnings(r.err) ==
        "ptune: error: sweep: row 'no folder' failed: image_folder: root folder '" + dir.file("none") +
            "' does not exist\n");
  auto j = Json::parse(r.out);  // the table is printed first, and every row is kept
  REQUIRE(j["rows"].size() == 3);
  CHECK(j["rows"][0]["status"] == "ok");
  CHECK(j["rows"][2]["status"].get<std::string>().rfind("skipped: ", 0) == 0);  // skipped is not failed
  CHECK(Json::parse(ptune::test::read_file(dir.file("r.json")))["status"] == "complete");
  // Output that cannot be written is an error.
  auto full = run("sh -c \"" + exe + " check " + cfg + " > /dev/full\"");
  CHECK(full.code == 1);
  CHECK(full.err == "ptune: error: cannot write to stdout: No space left on device\n");
  // A reader that stops reading (`| head -1`, here one that reads nothing) is not a failure: the
  // exit status stays the command's.
  auto closed = run("bash -c '{ sleep 0.3; " + exe + " check " + cfg + "; } | true; exit ${PIPESTATUS[0]}'");
  CHECK(closed.code == 0);
  CHECK(closed.err.empty());
  // A job started with `&` by a script inherits SIGINT ignored, and keeps ignoring it. (One row:
  // 3 windows of 40 steps, the 32x32 images resized to ResNet-18's 224x224, within a budget of
  // 4 s in all, so that it still runs when the signal comes 2 s after the start.)
  auto fine = dir.write("fine.json", R"({"device": "cpu", "cpu_threads": 1, "data": {"num_samples": 16,
      "image_size": 32}, "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 40, "max_s": 4},
      "sweep": [{"name": "fine"}]})");
  auto ignored = run("sh -c 'trap \"\" INT; " + exe + " sweep " + fine +
                     " --format json & p=$!; sleep 2; kill -INT $p; wait $p'");
  CHECK(ignored.code == 0);
  const Json done = Json::parse(ignored.out);
  CHECK(done["status"] == "complete");
  CHECK(done["rows"][0]["status"] == "ok");
  // The signal came while the row was timed: its windows alone took longer than 2 s.
  CHECK(done["rows"][0]["windows"].get<double>() * done["rows"][0]["steps"].get<double>() *
            done["rows"][0]["ms_per_step"].get<double>() >
        2000.0);
}

TEST_CASE("output paths are checked before the work starts", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  expect_usage_error(run(exe + " sweep " + cfg + " --out ''"), "--out: an empty path; name a file");
  expect_usage_error(run(exe + " sweep " + cfg + " --out " + dir.file("no/r.json")),
                     "--out: folder '" + dir.file("no") + "' does not exist");
  expect_usage_error(run(exe + " tune " + cfg + " --out " + dir.path.string()),
                     "--out: '" + dir.path.string() + "' is a folder; name a file");
}

TEST_CASE("SIGTERM during train checkpoints and exits 143, launch forwards it to the ranks", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("long.json", R"({"name": "long", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 64, "image_size": 32}, "loader": {"batch_size": 4},
      "train": {"epochs": 1000, "log_every": 1}})");
  for (const bool launched : {false, true}) {
    INFO((launched ? "under ptune launch" : "train alone"));
    const std::string ck = dir.file(launched ? "ck-launch" : "ck");
    const std::string cmd = ptune::test::exe() + (launched ? " launch --nproc-per-node 2 --" : "") +
                            " train " + cfg + " --set train.checkpoint_dir=" + ck;
    const std::string err = dir.file("err");
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      std::freopen(err.c_str(), "w", stderr);
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    // Wait for training steps, then terminate as Slurm or Kubernetes would.
    bool training = false;
    for (int i = 0; i < 600 && !training; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      training = ptune::test::read_file(err).find("step 2/") != std::string::npos;
    }
    REQUIRE(training);
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    INFO(ptune::test::read_file(err));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 143);
    size_t checkpoints = 0;
    for (const auto& e : std::filesystem::directory_iterator(ck))
      checkpoints += e.path().extension() == ".pt";
    CHECK(checkpoints >= 1);
  }
}

namespace {

// Rows that end after their first few windows (target_ci_pct 100): these tests check what is
// written where, not a figure.
const char* kOneRow = R"({"device": "cpu", "cpu_threads": 1,
    "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
    "measure": {"warmup_steps": 0, "steps": 2, "target_ci_pct": 100},
    "sweep": [{"name": "first"}, {"name": "second", "set": {"loader.batch_size": 8}}]})";

/// The names in `dir` that start with '.' (write_atomically's temporary files).
std::vector<std::string> hidden_files(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;  // files come and go while ptune runs
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind('.', 0) == 0) names.push_back(it->path().string());
  return names;
}

}  // namespace

TEST_CASE("Ctrl-C while the engine loads: exit 130, one line, nothing run or written", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("one.json", kOneRow);
  const std::string out = dir.file("r.json"), err = dir.file("err.txt");
  const pid_t pid = spawn_ptune({"sweep", cfg, "--out", out}, "/dev/null", err);
  // The engine's library is mapped when its loading starts; LibTorch's libraries, mapped and
  // initialized after it, take hundreds of milliseconds more: the signal lands in the load, and
  // the engine's first check (ptune_engine_run, before the command) ends the run. A signal
  // after that check would reach the sweep instead, which warns and writes its results.
  bool loading = false;
  for (int i = 0; i < 120000 && !loading; ++i) {
    loading = ptune::test::read_file("/proc/" + std::to_string(pid) + "/maps").find("libptune_engine") !=
              std::string::npos;
    if (!loading) std::this_thread::sleep_for(std::chrono::microseconds(500));
    if (::waitpid(pid, nullptr, WNOHANG) == pid) FAIL("ptune ended before loading its engine");
  }
  REQUIRE(loading);
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(ptune::test::read_file(err) == "ptune: interrupted\n");  // no row started, no warning
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK(hidden_files(dir.path.string()).empty());
}

TEST_CASE("a second Ctrl-C while the weights are written leaves at once and leaves no temporary file",
          "[e2e]") {
  TempDir dir;
  // ResNet-50's weights (about 94 MB) take long enough to write for the test to land in the write.
  auto cfg = dir.write("big.json", R"({"name": "big", "device": "cpu", "cpu_threads": 2,
      "model": {"arch": "resnet50"}, "data": {"num_samples": 4, "image_size": 32},
      "loader": {"batch_size": 2}, "train": {"epochs": 1, "max_steps": 1}})");
  const std::string out = dir.file("w.pt"), ck = dir.file("ck");
  const std::string ck_arg = "train.checkpoint_dir=" + ck;
  const pid_t pid =
      spawn_ptune({"train", cfg, "--set", ck_arg, "--save-weights", out}, "/dev/null", "/dev/null");
  bool seen = false;  // the weights' temporary file appeared
  for (int i = 0; i < 120000 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    for (const auto& name : hidden_files(dir.path.string()))
      if (std::filesystem::path(name).filename().string().rfind(".w.pt.", 0) == 0) seen = true;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) FAIL("ptune ended before writing its weights");
  }
  REQUIRE(seen);
  ::kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  // The second Ctrl-C leaves at once (130). On a loaded machine the write's last system calls
  // (the sync before the rename) can outlast the 2 ms between the two signals, and the program
  // then ends as it would have (0, the weights whole) before the second one lands: never a
  // temporary file left either way.
  if (WEXITSTATUS(status) == 0) {
    WARN("the write ended before the second Ctrl-C landed");
    CHECK(std::filesystem::exists(out));
  } else {
    CHECK(WEXITSTATUS(status) == 130);
  }
  CHECK(hidden_files(dir.path.string()).empty());
}

TEST_CASE("two sweeps writing one --out at once: every read sees whole JSON, no temporary file is left",
          "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("two.json", kOneRow);
  const std::string out = dir.file("r.json"), exe = ptune::test::exe();
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, broken{0};
  std::thread reader([&] {
    while (!done) {
      const std::string text = ptune::test::read_file(out);
      if (!text.empty()) {
        ++reads;
        if (!Json::accept(text)) ++broken;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto r = run("sh -c '" + exe + " sweep " + cfg + " --out " + out + " & a=$!; " + exe + " sweep " + cfg +
               " --out " + out + " & b=$!; wait $a || exit 1; wait $b'");
  done = true;
  reader.join();
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(reads.load() > 0);
  CHECK(broken.load() == 0);
  auto j = Json::parse(ptune::test::read_file(out));
  CHECK(j["status"] == "complete");
  CHECK(j["rows"].size() == 2);
  CHECK(hidden_files(dir.path.string()).empty());
}

TEST_CASE("sweep --out onto a device (/dev/null) writes into it, the node stays", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("one.json", kOneRow);
  const std::string exe = ptune::test::exe();
  auto is_null_device = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  };
  // First on a node of the test's own (char 1,3, the same device): a bug would replace that one.
  const std::string node = dir.file("null");
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    auto r = run(exe + " sweep " + cfg + " --rows 0 --out " + node);
    INFO(r.err);
    REQUIRE(r.code == 0);
    REQUIRE(is_null_device(node));
  } else {
    WARN("the device-node step is skipped: cannot create one here (" << std::strerror(errno) << ")");
  }
  REQUIRE(is_null_device("/dev/null"));
  auto r = run(exe + " sweep " + cfg + " --rows 0 --out /dev/null");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(is_null_device("/dev/null"));
  CHECK(hidden_files(dir.path.string()).empty());
}

TEST_CASE("ptune analyze -o: the overview page in headless Chromium, one bar per step",
          "[e2e][analyze][browser]") {
  REQUIRE_BROWSER(browser);
  TempDir dir;
  const std::string traces = std::string(PTUNE_TEST_DATA) + "/traces/";
  const std::string html = dir.file("overview.html");
  // Three versions: a single GPU trace with memory samples, another, and a folder of two ranks.
  auto r = run(ptune::test::exe() + " analyze '" + traces + "gpu_memory_shapes.json.gz' '" + traces +
               "gpu_compute_fp32.json.gz' '" + traces +
               "ddp' --label 'amp <b>' --label fp32 --label ddp -o '" + html + "'");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("amp <b> -> fp32:") != std::string::npos);
  const Page p = open_page(browser, html, "analyze-overview", 2400);
  INFO(p.log.substr(p.log.size() > 3000 ? p.log.size() - 3000 : 0));
  REQUIRE(p.code == 0);
  CHECK(p.console.empty());
  CHECK(p.dom.find("<script") == std::string::npos);
  CHECK(p.dom.find("amp &lt;b&gt;") != std::string::npos);  // labels escaped
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = p.dom.find(what); at != std::string::npos; at = p.dom.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count("<g class=\"step-bar\"") == 9);    // 3 steps in each of the 3 versions
  CHECK(count("<rect class=\"speedup\"") == 3);  // one per version
  CHECK(count("<g class=\"rank-bar\"") == 2);    // the folder's two ranks
  CHECK(p.dom.find("peak GPU memory allocated") != std::string::npos);
  CHECK(p.dom.find("Operators that allocated most (GPU memory)") != std::string::npos);
  CHECK(p.dom.find("aten::convolution_backward") != std::string::npos);
  CHECK(p.dom.find("ProfilerStep#3") != std::string::npos);
  REQUIRE(std::filesystem::exists(p.screenshot));
}

// ptune analyze: comparisons with their noise.

namespace {

/// A CPU trace of steps of the given lengths (ms), one operator each; `ptune_load`: ptune's
/// metadata saying it was recorded under load.
std::string steps_trace_file(const TempDir& dir, const std::string& name, const std::vector<double>& ms,
                             bool ptune_load = false) {
  Json ev = Json::array();
  double t = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    for (const auto& [cat, op, at, dur] : std::vector<std::tuple<std::string, std::string, double, double>>{
             {"user_annotation", "ProfilerStep#" + std::to_string(i + 1), t, ms[i] * 1000},
             {"cpu_op", "aten::mm", t + 1, ms[i] * 1000 - 2}})
      ev.push_back(
          Json{{"ph", "X"}, {"cat", cat}, {"name", op}, {"pid", 1}, {"tid", 1}, {"ts", at}, {"dur", dur}});
    t += ms[i] * 1000 + 1;
  }
  Json doc{{"traceEvents", ev}};
  if (ptune_load) doc["ptune"] = Json{{"load", {{"under_load", true}, {"summary", "load average 7.1"}}}};
  return dir.write(name + ".json", doc.dump());
}

}  // namespace

TEST_CASE(
    "ptune analyze A B: the speedup's interval and verdict in every format, few steps or load: undecided",
    "[e2e][analyze]") {
  TempDir dir;
  const std::string exe = ptune::test::exe();
  const std::string a = steps_trace_file(dir, "a", {10.0, 10.3, 9.8, 10.1}),
                    b = steps_trace_file(dir, "b", {5.0, 5.2, 4.9, 5.1});
  auto r = run(exe + " analyze '" + a + "' '" + b + "' --format json -o '" + dir.file("page.html") + "'");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.out);
  const Json& s = j["versions"][1]["vs_prev"];
  INFO(s.dump());
  CHECK(s["verdict"] == "faster");
  CHECK(s["level"] == 0.99);
  CHECK(s["lo"].get<double>() > 1.8);
  CHECK(s["hi"].get<double>() < 2.2);
  CHECK(s["lo"].get<double>() < s["speedup"].get<double>());
  CHECK(s["speedup"].get<double>() < s["hi"].get<double>());
  CHECK(j["versions"][1]["speedup_vs_prev"].get<double>() ==
        Approx(s["speedup"].get<double>()).margin(0.005));
  const std::string text = s["text"];  // "x2.00 ±6.4% faster": symmetric, so ±
  CHECK(text.rfind("x", 0) == 0);
  CHECK(text.find(" ±") != std::string::npos);
  CHECK(text.substr(text.size() - 7) == " faster");
  // The same text in the table, Markdown (its brackets escaped), CSV and the page.
  std::string md_text;
  for (char c : text) md_text += c == '[' || c == ']' ? std::string("\\") + c : std::string(1, c);
  for (const std::string format : {"table", "md", "csv"}) {
    r = run(exe + " analyze '" + a + "' '" + b + "' --format " + format);
    INFO(format << "\n" << r.out);
    REQUIRE(r.code == 0);
    CHECK(r.out.find(format == "md" ? md_text : text) != std::string::npos);
  }
  CHECK(ptune::test::read_file(dir.file("page.html")).find(text) != std::string::npos);
  // Two steps per trace: undecided, and why.
  r = run(exe + " analyze '" + steps_trace_file(dir, "two_a", {10.0, 10.1}) + "' '" +
          steps_trace_file(dir, "two_b", {5.0, 5.05}) + "'");
  REQUIRE(r.code == 0);
  INFO(r.out);
  CHECK(r.out.find("undecided: 2 steps in `two_a`, 2 steps in `two_b`: 3 or more per trace are needed\n") !=
        std::string::npos);
  // A trace whose metadata says it was recorded under load: undecided, and the load named.
  r = run(exe + " analyze '" + a + "' '" + steps_trace_file(dir, "loaded", {5.0, 5.2, 4.9, 5.1}, true) +
          "' --format json");
  REQUIRE(r.code == 0);
  const Json loaded = Json::parse(r.out);
  CHECK(loaded["versions"][1]["under_load"] == true);
  CHECK(loaded["versions"][1]["vs_prev"]["verdict"] == "undecided");
  CHECK(loaded["versions"][1]["vs_prev"]["reason"] == "`loaded` was recorded under load (load average 7.1)");
}

// ---- Faults from a hostile probe: a FIFO as --out, eval and signals, damaged records, and the
// minor messages (unknown command, a folder or '-' or a NUL byte as the config, a skipped
// sweep, runs of other models compared) ----

namespace {

/// Zeroes 4 KB in the middle of the data of `path`'s largest zip record, as a bad disk or copy
/// would, and returns the record's name as Python's zipfile.testzip() reports it (its CRC-32
/// check fails). "" when Python is not configured.
std::string damage_record(const std::string& path) {
  const std::string script = R"(
import struct, sys, zipfile
p = sys.argv[1]
info = max(zipfile.ZipFile(p).infolist(), key=lambda i: i.file_size)
with open(p, 'r+b') as f:
    f.seek(info.header_offset)
    n, e = struct.unpack('<HH', f.read(30)[26:30])
    f.seek(info.header_offset + 30 + n + e + info.file_size // 2)
    f.write(bytes(4096))
print(zipfile.ZipFile(p).testzip())
)";
  const std::string python = PTUNE_PYTHON;
  if (python.empty()) return "";
  TempDir d;
  const std::string py = d.write("damage.py", script);
  auto r = run("'" + python + "' " + py + " '" + path + "'");
  REQUIRE(r.code == 0);
  std::string name = r.out;
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

/// Waits (up to 60 s) until `pid`'s main thread sleeps in open(2) on a FIFO with no reader.
bool waits_in_fifo_open(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  for (int i = 0; i < 6000; ++i) {
    const std::string wchan = ptune::test::read_file(proc + "/wchan");  // the kernel's name of the wait
    if (wchan == "wait_for_partner" || wchan == "fifo_open") return true;
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

/// Sends `sig` to `pid` and waits for it to end: its wait status and the seconds it took.
std::pair<int, double> signal_and_wait(pid_t pid, int sig) {
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {status, std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count()};
}

/// The lines of `text` that start with "ptune: error: ".
size_t error_lines(const std::string& text) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.rfind("ptune: error: ", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE(
    "sweep --out onto a FIFO: opened once, the final document, and SIGTERM while it waits for a reader: 143",
    "[e2e][faults]") {
  TempDir dir;
  auto cfg = dir.write("two.json", kOneRow);  // two rows: the results are rewritten three times
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  SECTION("a reader takes the one document") {
    std::string got;
    std::thread reader([&] { got = ptune::test::read_file(fifo); });  // to the end of file
    auto r = run(ptune::test::exe() + " sweep " + cfg + " --out " + fifo);
    reader.join();
    INFO(r.err);
    CHECK(r.code == 0);
    const Json j = Json::parse(got);  // one whole document, not three
    CHECK(j["status"] == "complete");
    CHECK(j["rows"].size() == 2);
  }
  SECTION("no reader: the open waits until SIGTERM") {
    const std::string err = dir.file("err");
    const pid_t pid = spawn_ptune({"sweep", cfg, "--out", fifo}, "/dev/null", err);
    REQUIRE(waits_in_fifo_open(pid));
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    INFO(ptune::test::read_file(err));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 143);
    CHECK(error_lines(ptune::test::read_file(err)) == 0);
    CHECK(ptune::test::read_file(err).find("Interrupted system call") == std::string::npos);
    CHECK(hidden_files(dir.path.string()).empty());
  }
}

TEST_CASE(
    "eval stops between batches on SIGINT and SIGTERM (130, 143, SIGHUP as SIGTERM), alone and under launch",
    "[e2e][faults]") {
  TempDir dir;
  auto train_cfg = dir.write("t.json", R"({"name": "t", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 8, "image_size": 32}, "loader": {"batch_size": 4},
      "train": {"epochs": 1, "max_steps": 1}})");
  const std::string weights = dir.file("w.pt");
  auto t = run(ptune::test::exe() + " train " + train_cfg + " --set train.checkpoint_dir=" + dir.file("ck") +
               " --save-weights " + weights);
  REQUIRE(t.code == 0);
  // 5,000 samples: tens of seconds of evaluation on one thread.
  auto eval_cfg = dir.write("e.json", R"({"name": "e", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 5000, "image_size": 32}, "loader": {"batch_size": 8}})");
  for (const auto& [sig, launched] : std::vector<std::pair<int, bool>>{
           {SIGINT, false}, {SIGTERM, false}, {SIGHUP, false}, {SIGINT, true}}) {
    INFO("signal " << sig << (launched ? " under ptune launch" : ""));
    const std::string err = dir.file("err");
    std::vector<std::string> args = {"eval", eval_cfg, "--weights", weights};
    if (launched) args.insert(args.begin(), {"launch", "--nproc-per-node", "2", "--"});
    const pid_t pid = spawn_ptune(args, "/dev/null", err);
    std::this_thread::sleep_for(std::chrono::seconds(2));  // as the probe: 2 s in
    REQUIRE(::waitpid(pid, nullptr, WNOHANG) == 0);
    const auto [status, took] = signal_and_wait(pid, sig);
    const std::string text = ptune::test::read_file(err);
    INFO(text);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == (sig == SIGINT ? 130 : 143));
    CHECK(error_lines(text) == 0);
    const std::string last = sig == SIGINT ? "ptune: interrupted\n" : "ptune: terminated\n";
    CHECK(text.size() >= last.size());
    CHECK(text.compare(text.size() - std::min(text.size(), last.size()), last.size(), last) == 0);
    // A batch of 8 takes milliseconds; the whole evaluation, tens of seconds.
    CHECK(took < 10.0);
  }
}

TEST_CASE(
    "a rank stopped at the rendezvous while its peer never comes ends at once, as the store's server and as "
    "a "
    "client",
    "[e2e][faults]") {
  // One of two ranks alone (the other stopped before it joined, or never started), with
  // dist.timeout_s 120: SIGINT must end it at once, not after the timeout. Before, rank 0 waited
  // out the timeout inside LibTorch's store (for workers) and rank 1 inside its connect.
  TempDir dir;
  auto cfg = dir.write("d.json", R"({"name": "d", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 8, "image_size": 32}, "loader": {"batch_size": 4},
      "train": {"epochs": 1, "max_steps": 1}, "dist": {"timeout_s": 120}})");
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  for (const char* rank : {"0", "1"}) {
    INFO("rank " << rank << " alone");
    const std::vector<std::pair<std::string, std::string>> vars = {{"MASTER_ADDR", "127.0.0.1"},
                                                                   {"MASTER_PORT", std::to_string(port)},
                                                                   {"RANK", rank},
                                                                   {"WORLD_SIZE", "2"},
                                                                   {"LOCAL_RANK", rank},
                                                                   {"LOCAL_WORLD_SIZE", "2"}};
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
    const std::string err = dir.file(std::string("err") + rank), ck = dir.file(std::string("ck") + rank);
    const pid_t pid = spawn_ptune({"train", cfg, "--set", "train.checkpoint_dir=" + ck}, "/dev/null", err);
    for (const auto& [k, v] : vars) ::unsetenv(k.c_str());
    // Until it has loaded LibTorch (the rendezvous follows within milliseconds), then 3 s on:
    // well inside the rendezvous, which lasts until dist.timeout_s.
    const std::string maps = "/proc/" + std::to_string(pid) + "/maps";
    for (int i = 0; i < 600 && ptune::test::read_file(maps).find("libtorch_cpu") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::this_thread::sleep_for(std::chrono::seconds(3));
    REQUIRE(::waitpid(pid, nullptr, WNOHANG) == 0);
    const auto [status, took] = signal_and_wait(pid, SIGINT);
    const std::string text = ptune::test::read_file(err);
    INFO(text);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 130);
    CHECK(error_lines(text) == 0);
    // Nothing trained: no checkpoint, and no word of one.
    CHECK(text.find("checkpoint written") == std::string::npos);
    CHECK((!std::filesystem::exists(ck) || std::filesystem::is_empty(ck)));
    CHECK(text.size() >= 19);
    CHECK(text.compare(text.size() - std::min<size_t>(text.size(), 19), 19, "ptune: interrupted\n") == 0);
    CHECK(took < 10.0);  // a connect attempt lasts at most a second; dist.timeout_s is 120
  }
}

TEST_CASE("a checkpoint or weights with a damaged record are refused, naming the file and the record",
          "[e2e][faults]") {
  TempDir dir;
  auto cfg = dir.write("p.json", R"({"name": "p", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 16, "image_size": 32}, "loader": {"batch_size": 4},
      "train": {"epochs": 1, "max_steps": 4}})");
  const std::string ck = dir.file("ck"), weights = dir.file("w.pt");
  auto t = run(ptune::test::exe() + " train " + cfg + " --set train.checkpoint_dir=" + ck +
               " --save-weights " + weights);
  INFO(t.err);
  REQUIRE(t.code == 0);
  const std::string checkpoint = ck + "/p-step4.pt";
  // Whole files pass the check: resumed (nothing left to train) and evaluated.
  auto whole = run(ptune::test::exe() + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck2") +
                   " --resume " + checkpoint);
  CHECK(whole.code == 0);
  CHECK(run(ptune::test::exe() + " eval " + cfg + " --weights " + weights).code == 0);

  const std::string bad_ck = damage_record(checkpoint);
  if (bad_ck.empty()) FAIL("PTUNE_PYTHON not configured: cannot damage a zip record as zipfile sees it");
  const std::string bad_w = damage_record(weights);
  auto expect_refused = [&](const ptune::test::RunResult& r, const std::string& file,
                            const std::string& record) {
    INFO(r.err);
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    CHECK(r.err == "ptune: error: " + file + ": damaged: record '" + record + "' fails its CRC-32 check" +
                       r.err.substr(std::min(r.err.size(), r.err.find(" check") + 6)));
    CHECK(error_lines(r.err) == 1);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  };
  SECTION("train --resume") {
    auto r = run(ptune::test::exe() + " train " + cfg +
                 " --set train.max_steps=6 --set train.checkpoint_dir=" + ck + " --resume " + checkpoint);
    expect_refused(r, checkpoint, bad_ck);
    CHECK(!std::filesystem::exists(ck + "/p-step6.pt"));
    CHECK(hidden_files(dir.path.string()).empty());
  }
  SECTION("eval --weights") {
    expect_refused(run(ptune::test::exe() + " eval " + cfg + " --weights " + weights), weights, bad_w);
  }
  SECTION("model.weights") {
    expect_refused(run(ptune::test::exe() + " train " + cfg + " --set model.weights=" + weights +
                       " --set train.checkpoint_dir=" + dir.file("ck3")),
                   weights, bad_w);
    CHECK(!std::filesystem::exists(dir.file("ck3") + "/p-step4.pt"));
  }
}

TEST_CASE("minor faults: an unknown command, a folder, '-' or a NUL byte as the config, a huge --max-batch",
          "[e2e][faults]") {
  TempDir dir;
  auto r = run(ptune::test::exe() + " frobnicate");
  expect_usage_error(r,
                     "unknown command 'frobnicate'; the commands are sweep, compare, report, train, eval, "
                     "check, tune, launch, analyze, schema (see ptune --help)");
  r = run(ptune::test::exe() + " -q swep x.json");
  expect_usage_error(
      r,
      "unknown command 'swep' (did you mean 'sweep'?); the commands are sweep, compare, report, "
      "train, eval, check, tune, launch, analyze, schema (see ptune --help)");
  expect_usage_error(
      run(ptune::test::exe() + " --bogus sweep x.json"),
      "unknown option '--bogus' before the command; ptune's own are -v, -q, --help and --version, "
      "a command's follow its name (ptune sweep exp.json --rows 0) (see ptune --help)");
  expect_usage_error(run(ptune::test::exe() + " -q check x.json -v"),
                     "-q and -v: only errors, or more detail; give one");
  r = run(ptune::test::exe() + " check " + dir.path.string());
  expect_usage_error(r, "config '" + dir.path.string() + "' is a folder; name a JSON file");
  r = run(ptune::test::exe() + " train -");
  expect_usage_error(
      r, "config '-': a config is not read from stdin; name a JSON file (a pipe can be given as /dev/stdin)");
  const std::string nul = dir.file("nul.json");
  {
    std::ofstream out(nul, std::ios::binary);
    out << std::string("{\"name\": \"x\"}\n\0{\"device\": \"nonsense\"}\n", 38);
  }
  r = run(ptune::test::exe() + " check " + nul);
  expect_usage_error(r, nul + ": a NUL byte at offset 14 (line 2); a config is JSON text, which has none");
  // Range errors quote the value as given (not a double's limit in 309 digits).
  r = run(ptune::test::exe() + " tune " + nul + " --batch-size --max-batch 1e309");
  expect_usage_error(
      r, "--max-batch: '1e309' is not a whole number from 1 to 1099511627776 (see ptune tune --help)");
  r = run(ptune::test::exe() + " tune " + nul + " --budget 1e309");
  expect_usage_error(r, "--budget: '1e309' is not a finite number of at least 0 (see ptune tune --help)");
}

TEST_CASE(
    "more faults: an endless device as the config, deep results, NaN options, an output that is an input, a "
    "NUL in a value, integral floats, rank 1's stdout",
    "[e2e][faults]") {
  TempDir dir;
  const std::string exe = ptune::test::exe();
  // An endless device is read up to the limit, not until memory runs out.
  auto r = run(exe + " check /dev/zero");
  expect_usage_error(r, "config '/dev/zero': larger than 16 MiB; a config is a small JSON file");
  // A results file nested 100,000 levels deep: refused, not a crash in the recursion.
  const std::string deep =
      dir.write("deep.json", "{\"rows\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  r = run(exe + " report " + deep + " -o " + dir.file("x.html"));
  expect_usage_error(r, deep + ": nesting deeper than 64 levels; a results file is a few levels deep");
  CHECK(!std::filesystem::exists(dir.file("x.html")));
  // NaN passes no range.
  const std::string cfg = dir.write("c.json", R"({"device": "cpu", "cpu_threads": 1, "name": "c"})");
  expect_usage_error(run(exe + " tune " + cfg + " --threshold nan"),
                     "--threshold: 'nan' is not a finite number from 0 to 1000 (see ptune tune --help)");
  expect_usage_error(
      run(exe + " report " + deep + " --against " + deep + " --fail-if-slower nan"),
      "--fail-if-slower: 'nan' is not a finite number from 0 to 100 (see ptune report --help)");
  expect_usage_error(run(exe + " launch --nproc-per-node 1 --grace nan -- check " + cfg),
                     "--grace: 'nan' is not a finite number from 0 to 3600 (see ptune launch --help)");
  // Whole numbers quote the value too (not CLI11's "Value abc not in range 1 to 4096").
  expect_usage_error(
      run(exe + " launch --nproc-per-node abc -- check " + cfg),
      "--nproc-per-node: 'abc' is not a whole number from 1 to 4096 (see ptune launch --help)");
  expect_usage_error(run(exe + " analyze " + cfg + " --events-mb nan"),
                     "--events-mb: 'nan' is not a finite number from 0 to 1e+06 (see ptune analyze --help)");
  // An output that is one of the inputs, under another name too: refused before any work.
  const std::string before = ptune::test::read_file(cfg);
  expect_usage_error(
      run("cd " + dir.path.string() + " && " + exe + " sweep c.json --out ./c.json"),
      "--out './c.json' is the config 'c.json'; writing it would destroy it: name another file");
  r = run(exe + " train " + cfg + " --save-weights " + cfg);
  CHECK(r.code == 1);
  CHECK(r.err == "ptune: error: --save-weights '" + cfg + "' is the config '" + cfg +
                     "'; writing it would destroy it: name another file\n");
  CHECK(ptune::test::read_file(cfg) == before);
  // The model.weights file that training starts from is an input too.
  const std::string init = dir.write("init.pt", "not read");
  r = run(exe + " train " + cfg + " --set model.weights=" + init + " --save-weights " + init);
  CHECK(r.code == 1);
  CHECK(r.err == "ptune: error: --save-weights '" + init + "' is the model.weights file '" + init +
                     "'; writing it would destroy it: name another file\n");
  CHECK(ptune::test::read_file(init) == "not read");
  // A sweep row's name is printed: no control character.
  const std::string esc = dir.write("esc.json", R"({"sweep": [{"name": "a\u001b[2J"}]})");
  expect_usage_error(
      run(exe + " check " + esc),
      esc + ": sweep[0].name: \"a\\u001b[2J\" has a control character; a row's name is printed");
  // A row cannot set the sweep (and no key is suggested as itself).
  const std::string nested = dir.write("nested.json", R"({"sweep": [{"name": "a", "set": {"sweep": []}}]})");
  expect_usage_error(
      run(exe + " check " + nested),
      nested + ": sweep[0].set: 'sweep' cannot be set here; the sweep's rows are the config's own");
  // analyze --html into a folder of traces, named as a trace: it would be read as one.
  std::filesystem::create_directories(dir.file("tb"));
  const std::string trace =
      dir.write("tb/host.pt.trace.json", R"({"traceEvents": [{"ph": "X", "cat": "cpu_op",
      "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10}]})");
  expect_usage_error(run(exe + " analyze " + dir.file("tb") + " --html " + dir.file("tb/page.json")),
                     "--html '" + dir.file("tb/page.json") + "' is in the trace folder '" + dir.file("tb") +
                         "', named as a trace (it would be read as one): name another file");
  // A folder that access() calls writable but where no file can be created (root in /sys): found
  // before the sweep, not at its end.
  r = run(exe + " sweep " + cfg + " --out /sys/r.json");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ptune: error: --out: cannot write in folder '/sys': ", 0) == 0);
  // The CSV's companion is checked before the sweep too.
  std::filesystem::create_directories(dir.file("r.env.json"));
  expect_usage_error(run(exe + " sweep " + cfg + " --out " + dir.file("r.csv")),
                     "--out's CSV companion: '" + dir.file("r.env.json") + "' is a folder; name a file");
  // A NUL inside a string value is shown escaped, and the line goes on.
  const std::string nul = dir.write("nul.json", R"({"model": {"arch": "res\u0000net"}})");
  r = run(exe + " check " + nul);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ptune: error: " + nul + ": model.arch: unknown value 'res\\x00net'; allowed: resnet18, ",
                    0) == 0);
  // 32.0 is an integer, as the schema has it; 32.5 is not.
  r = run(exe + " check " + cfg + " --set loader.batch_size=32.0");
  CHECK(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["loader"]["batch_size"] == 32);
  r = run(exe + " check " + cfg + " --set loader.batch_size=32.5");
  CHECK(r.code == 2);
  // Under launch, the commands that only read and print do so on rank 0 alone.
  r = run(exe + " launch --nproc-per-node 2 --prefix-stdout -- check " + cfg);
  CHECK(r.code == 0);
  CHECK(r.out.find("[rank 0] {") != std::string::npos);
  CHECK(r.out.find("[rank 1]") == std::string::npos);
}

TEST_CASE(
    "a sweep whose only row is skipped exits 2 and says why, and runs of other models compared are told",
    "[e2e][faults]") {
  TempDir dir;
  auto cfg = dir.write("one.json", R"({"device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 1, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "max_s": 1}})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --out " + dir.file("r.json"));
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(error_lines(r.err) == 1);
  CHECK(r.err.rfind("ptune: error: sweep: row 'config' skipped: ", 0) == 0);
  CHECK(r.err.find("; no row of the sweep was measured\n") != std::string::npos);
  CHECK(Json::parse(ptune::test::read_file(dir.file("r.json")))["rows"][0]["status"].get<std::string>().rfind(
            "skipped: ", 0) == 0);

  // A resnet18 run against the same run edited to say resnet50.
  auto one = dir.write("ok.json", R"({"device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 8, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 1, "max_s": 1}})");
  REQUIRE(run(ptune::test::exe() + " sweep " + one + " --out " + dir.file("18.json")).code == 0);
  Json j = Json::parse(ptune::test::read_file(dir.file("18.json")));
  for (auto& row : j["rows"]) row["arch"] = "resnet50";
  j["config"]["model"]["arch"] = "resnet50";
  dir.write("50.json", j.dump(2));
  auto cmp = run(ptune::test::exe() + " report " + dir.file("50.json") + " --against " + dir.file("18.json"));
  INFO(cmp.out << cmp.err);
  CHECK(cmp.code == 0);
  CHECK(cmp.out.find("warning: the runs measured other models: 18 resnet18, 50 resnet50; their speeds are "
                     "not comparable\n") != std::string::npos);
}

TEST_CASE("launch: Ctrl-C ends a data-parallel train within about a step, not at its next log point",
          "[e2e][faults]") {
  TempDir dir;
  // 157 steps of about 0.3 s per rank and no log point before the end: the ranks used to agree
  // on a stop only there.
  auto cfg = dir.write("l.json", R"({"name": "l", "device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 5000, "image_size": 64}, "loader": {"batch_size": 16},
      "train": {"epochs": 1, "log_every": 1000}})");
  const std::string err = dir.file("err"), ck = dir.file("ck");
  const pid_t pid = spawn_ptune(
      {"launch", "--nproc-per-node", "2", "--", "train", cfg, "--set", "train.checkpoint_dir=" + ck},
      "/dev/null", err);
  std::this_thread::sleep_for(std::chrono::seconds(8));  // the ranks are training by then
  REQUIRE(::waitpid(pid, nullptr, WNOHANG) == 0);
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  INFO(ptune::test::read_file(err));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(took < 10.0);
  size_t checkpoints = 0;
  for (const auto& e : std::filesystem::directory_iterator(ck)) checkpoints += e.path().extension() == ".pt";
  CHECK(checkpoints == 1);
  CHECK(hidden_files(dir.path.string()).empty());
}

// The CPU as LibTorch uses it, capped and uncapped: the environment block, the line under the
// table and the verdict's advice on bf16.

#include <ATen/Version.h>

TEST_CASE("the environment block and the advice follow the CPU's caps", "[e2e][cpu]") {
  // Depends on the CPU: capped at AVX2 it runs on any x86-64 CPU with AVX2 (the suite's
  // requirement); without the cap it checks whatever this CPU is against LibTorch's own answer.
  // glibc's malloc keeping freed memory (process.allocator glibc_tuned, the row in a child process
  // that inherits the caps): with its default the row may be called allocator-bound instead.
  TempDir dir;
  const std::string cfg = dir.write("exp.json", R"({"name": "cpu", "cpu_threads": 1,
      "process": {"allocator": "glibc_tuned"},
      "data": {"num_samples": 64, "image_size": 32}, "loader": {"batch_size": 8},
      "measure": {"warmup_steps": 1, "steps": 3, "repeats": 1, "max_s": 0.2}})");
  auto sweep = [&](const std::string& env) {
    auto r = run(env + ptune::test::exe() + " sweep '" + cfg + "' --out '" + dir.file("r.json") + "'");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return std::make_pair(r.out, Json::parse(ptune::test::read_file(dir.file("r.json"))));
  };
  const auto [capped_out, capped] = sweep("env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ");
  const Json& c = capped["environment"]["cpu"];
  INFO(c.dump());
  CHECK(c["aten_isa"] == "AVX2");
  CHECK(c["onednn_isa"] == "avx2");
  CHECK(c["bf16_native"] == false);
  CHECK(c["amx"] == false);
  CHECK(c["caps"] == Json::array({"ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2"}));
  CHECK(c["logical_cores"].get<int64_t>() >= c["physical_cores"].get<int64_t>());
  CHECK(capped_out.find("; CPU: ATen AVX2, oneDNN avx2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2), "
                        "bf16 not native") != std::string::npos);
  const std::string diagnosis = capped["rows"][0]["diagnosis"];
  CHECK(diagnosis.find("optim.amp bf16") == std::string::npos);
  CHECK(diagnosis.find("so optim.amp is not advised") != std::string::npos);

  const auto [out, plain] = sweep("env -u ATEN_CPU_CAPABILITY -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA ");
  const Json& u = plain["environment"]["cpu"];
  INFO(u.dump());
  CHECK(u["caps"].empty());
  // ATen's answer on this CPU, uncapped: what this process sees where the suite runs uncapped.
  if (std::getenv("ATEN_CPU_CAPABILITY") == nullptr) CHECK(u["aten_isa"] == at::get_cpu_capability());
  const std::string d = plain["rows"][0]["diagnosis"];
  if (u["bf16_native"].get<bool>()) {
    CHECK(d.find("optim.amp bf16 with model.channels_last (this CPU's ") != std::string::npos);
    CHECK(out.find(", bf16 native (") != std::string::npos);
  } else {
    CHECK(d.find("so optim.amp is not advised") != std::string::npos);
    CHECK(out.find(", bf16 not native") != std::string::npos);
  }
}

TEST_CASE("a bf16 row is left out where bf16 is not native, and the rows after it run without it",
          "[e2e][cpu]") {
  // Capped at AVX2, bf16 is emulated on any CPU: the bf16 row cannot help, so the sweep leaves it
  // out with its reason, and the next rows are timed in fp32 (their peak is the fp32 one), against
  // the last row that ran. Its --rows selection alone leaves it out too.
  TempDir dir;
  const std::string cfg = dir.write("exp.json", R"({"name": "emulated", "cpu_threads": 1,
      "data": {"num_samples": 64, "image_size": 32}, "loader": {"batch_size": 8},
      "measure": {"warmup_steps": 1, "steps": 2, "repeats": 2, "max_s": 0.5},
      "sweep": [{"name": "base"}, {"name": "bf16", "set": {"optim.amp": "bf16"}},
                {"name": "batch 4", "set": {"loader.batch_size": 4}},
                {"name": "alone", "set": {"measure.mode": "synthetic"}}]})");
  auto sweep = [&](const std::string& rows) {
    auto r = run("env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 " + ptune::test::exe() + " sweep '" +
                 cfg + "' " + rows + " --out '" + dir.file("r.json") + "'");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return Json::parse(ptune::test::read_file(dir.file("r.json")));
  };
  const Json all = sweep("");
  const Json& rows = all["rows"];
  REQUIRE(rows.size() == 4);
  const std::string status = rows[1]["status"];
  INFO(status);
  CHECK(status.rfind("skipped: optim.amp bf16 cannot help on this CPU: ", 0) == 0);
  CHECK(status.find(", so autocast would run bf16 emulated, many times slower than fp32") !=
        std::string::npos);
  const std::string tail = "; left out, and the rows after it run without its changes";
  CHECK(status.size() > tail.size());
  CHECK(status.substr(status.size() - tail.size()) == tail);
  CHECK(rows[1]["samples_per_s"].is_null());
  for (int k : {0, 2, 3}) {
    INFO("row " << k);
    CHECK(rows[k]["status"] == "ok");
    CHECK(rows[k]["peak_precision"] == "fp32");
  }
  CHECK(rows[2]["compared_with"] == 0);  // against the last row that ran
  const Json picked = sweep("--rows 2");
  REQUIRE(picked["rows"].size() == 1);
  CHECK(picked["rows"][0]["peak_precision"] == "fp32");
}

namespace {

/// Runs ptune with `args` as they are (no shell between), its output in `dir`.
ptune::test::RunResult run_args(const std::vector<std::string>& args, const TempDir& dir) {
  const pid_t pid = spawn_ptune(args, dir.file("stdout.txt"), dir.file("stderr.txt"));
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
          ptune::test::read_file(dir.file("stdout.txt")), ptune::test::read_file(dir.file("stderr.txt"))};
}

/// The rows of a results document: each one's name, status and changes.
std::vector<std::string> row_outcomes(const Json& results) {
  std::vector<std::string> out;
  for (const auto& row : results["rows"])
    out.push_back(row["name"].get<std::string>() + ": " + row["status"].get<std::string>() + ", " +
                  row["changes"].dump());
  return out;
}

/// Whether a row was called faster than the row before it, or alike (within noise): never, for a
/// program whose steps take twice as long (undecided can be, where the machine is loaded).
bool called_faster_or_alike(const Json& row) {
  return row["verdict_vs_prev"] == "faster" || row["verdict_vs_prev"] == "within noise";
}

}  // namespace

TEST_CASE("compare: each command a row, the first the baseline, its --save-config runs to the same rows",
          "[e2e]") {
  TempDir dir;
  // A program that prints "WORD N" for its steps, WORD from its environment: a step of 10 ms, or
  // of 20 ms with the argument `slow`.
  const std::string program =
      "python3 -c 'import itertools, os, sys, time\n"
      "for i in itertools.count():\n"
      "    print(os.environ[\"WORD\"], i, flush=True); time.sleep(0.02 if sys.argv[1:] == [\"slow\"] else "
      "0.01)'";
  std::vector<std::string> args{"compare",          program,         program + " slow", "--out",
                                dir.file("r.json"), "--save-config", dir.file("c.json")};
  // Two names, a variable for both rows and one for the second with its own pattern, a small budget.
  for (const char* option : {"--name=fast", "--name=slow", "--env=WORD=step", "--env=1:WORD=iteration",
                             "--step-pattern=1:^iteration (?<step>\\d+)$", "--samples-per-step=4",
                             "--set=measure.warmup_steps=2", "--set=measure.steps=5",
                             "--set=measure.repeats=2", "--set=measure.processes=2", "--set=measure.max_s=8"})
    args.push_back(option);
  const auto r = run_args(args, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("ptune: info: wrote the comparison's config to " + dir.file("c.json") + " (ptune sweep " +
                   dir.file("c.json") + " runs it)\n") != std::string::npos);
  CHECK(r.out.find("\n0  fast ") != std::string::npos);
  CHECK(r.out.find("\n1  slow ") != std::string::npos);
  const Json results = Json::parse(ptune::test::read_file(dir.file("r.json")));
  REQUIRE(results["rows"].size() == 2);
  CHECK(results["rows"][0]["name"] == "fast");
  CHECK(results["rows"][1]["name"] == "slow");
  CHECK(results["rows"][0]["status"] == "ok");
  CHECK(results["rows"][1]["status"] == "ok");
  CHECK(!called_faster_or_alike(results["rows"][1]));
  CHECK(results["rows"][1]["batch_size"] == 4);
  // The config: the first command, and a row of what the second changes.
  const Json config = Json::parse(ptune::test::read_file(dir.file("c.json")));
  CHECK(config["name"] == "compare");
  CHECK(
      config["program"]["command"] ==
      Json{"python3", "-c",
           "import itertools, os, sys, time\nfor i in itertools.count():\n    print(os.environ[\"WORD\"], i, "
           "flush=True); time.sleep(0.02 if sys.argv[1:] == [\"slow\"] else 0.01)"});
  CHECK(config["program"]["env"] == Json{{"WORD", "step"}});
  CHECK(config["program"]["samples_per_step"] == 4);
  CHECK(config["measure"]["steps"] == 5);
  const Json changes = Json::parse(R"({"program.args": ["slow"], "program.env": {"WORD": "iteration"},
                                       "program.step_pattern": "^iteration (?<step>\\d+)$"})");
  CHECK(config["sweep"] ==
        Json{{{"name", "fast"}, {"set", Json::object()}}, {{"name", "slow"}, {"set", changes}}});
  CHECK(results["rows"][1]["changes"] == changes);
  // ptune sweep runs it to the same rows, with the same config.
  const auto again = run_args({"sweep", dir.file("c.json"), "--out", dir.file("r2.json")}, dir);
  INFO(again.err);
  REQUIRE(again.code == 0);
  const Json results2 = Json::parse(ptune::test::read_file(dir.file("r2.json")));
  CHECK(row_outcomes(results2) == row_outcomes(results));
  CHECK(!called_faster_or_alike(results2["rows"][1]));
  CHECK(results2["config"] == results["config"]);
}

TEST_CASE("compare's usage errors: one line, exit 2, before anything runs", "[e2e]") {
  TempDir dir;
  const std::string exe = ptune::test::exe() + " compare";
  expect_usage_error(run(exe),
                     "compare: no commands; give each command as one argument, the baseline first: ptune "
                     "compare 'python3 train.py' 'python3 train.py --workers 4'");
  expect_usage_error(run(exe + " true ''"),
                     "row 1 '': an empty command; name a program and its arguments, e.g. 'python3 train.py'");
  expect_usage_error(
      run(exe + " 'true | cat'"),
      "row 0 'true | cat': '|' is a shell operator, and ptune runs the command without a shell: "
      "put it in single quotes, or name a shell (sh -c '...')");
  expect_usage_error(run(exe + " true --env FOO"),
                     "--env 'FOO': expected NAME=VALUE for every row, or ROW:NAME=VALUE for row ROW");
  expect_usage_error(
      run(exe + " true false --samples-per-step 2:8"),
      "--samples-per-step '2:8': there is no row 2; the rows are 0 to 1, one per command in order "
      "(--samples-per-step VALUE applies to every row)");
  expect_usage_error(run(exe + " true --step-pattern '1:step (\\d+)'"),
                     "--step-pattern '1:step (\\d+)': there is no row 1; the one command is row 0 "
                     "(--step-pattern VALUE applies to every row)");
  expect_usage_error(run(exe + " true --name a --name b"),
                     "--name 'b': more names (2) than commands (1); --name names the commands in order");
  expect_usage_error(run(exe + " true --save-config " + dir.file("x.json") + " --out " + dir.file("x.json")),
                     "--save-config '" + dir.file("x.json") + "' is also --out; name two files");
  expect_usage_error(run(exe + " true --save-config " + dir.file("no/c.json")),
                     "--save-config: folder '" + dir.file("no") + "' does not exist");
  CHECK(!std::filesystem::exists(dir.file("x.json")));
}
