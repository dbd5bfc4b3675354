// End to end: the built ptune binary on tiny configs: output, files and exit codes.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/launcher.hpp"
#include "engine/cuda_support.hpp"
#include "test_util.hpp"

using ptune::test::run;
using ptune::test::TempDir;
using Json = nlohmann::ordered_json;

namespace {

const char* kTiny = R"({
  "name": "tiny", "device": "cpu", "cpu_threads": 2,
  "data": {"num_samples": 64, "image_size": 32},
  "loader": {"batch_size": 8},
  "measure": {"warmup_steps": 1, "steps": 2},
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

}  // namespace

TEST_CASE("ptune --version and --help", "[e2e]") {
  auto v = run(ptune::test::exe() + " --version");
  CHECK(v.code == 0);
  CHECK(v.out == "ptune 0.1.0\n");
  for (std::string cmd : {"sweep", "train", "eval", "check", "schema", "tune", "launch"}) {
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
  CHECK(j["rows"][3]["status"].get<std::string>().rfind("skipped: loader.pin_memory needs a CUDA device", 0) == 0);
  CHECK(j["rows"][4]["batch_size"] == 16);
  CHECK(j["rows"][4]["notes"][0].get<std::string>().rfind("loader.batch_size changes training semantics", 0) == 0);
  CHECK(!std::filesystem::exists(dir.file("r.json.tmp")));
}

TEST_CASE("sweep formats json, csv, md on stdout and set overrides", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("one.json", R"({"device": "cpu", "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1}})");
  auto j = run(ptune::test::exe() + " sweep " + cfg + " --format json --set loader.batch_size=2 --set measure.steps=2");
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
  auto rows = dir.write("rows.json", R"({"device": "cpu", "data": {"num_samples": 16, "image_size": 32},
      "loader": {"batch_size": 4}, "measure": {"warmup_steps": 0, "steps": 1},
      "sweep": [{"name": "tuned", "set": {"loader.batch_size": 2}}, {"name": "back", "set": {"loader.batch_size": 4}}]})");
  auto r = run(ptune::test::exe() + " sweep " + rows + " --format json");
  REQUIRE(r.code == 0);
  auto rd = Json::parse(r.out);
  CHECK(rd["rows"][0]["notes"].empty());
  REQUIRE(rd["rows"][1]["notes"].size() == 1);
  CHECK(rd["rows"][1]["notes"][0].get<std::string>().rfind("loader.batch_size changes training semantics", 0) == 0);
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
                     arch + ": model.arch: unknown value 'resnet19', did you mean 'resnet18'? allowed: resnet18, resnet50");
  auto batch = dir.write("b.json", R"({"loader": {"batch_size": 0}})");
  expect_usage_error(run(exe + " train " + batch),
                     batch + ": loader.batch_size: 0 is out of range; allowed: an integer in [1, 1048576]");
  auto lr = dir.write("lr.json", R"({"optim": {"lr": -1}})");
  expect_usage_error(run(exe + " check " + lr), lr + ": optim.lr: -1 is out of range; allowed: a number in (0, 1000]");
  auto workers = dir.write("w.json", R"({"loader": {"num_workers": -2}})");
  expect_usage_error(run(exe + " check " + workers),
                     workers + ": loader.num_workers: -2 is out of range; allowed: an integer in [0, 256]");
  auto type = dir.write("t.json", R"({"loader": {"shuffle": "yes"}})");
  expect_usage_error(run(exe + " check " + type), type + ": loader.shuffle: expected true or false, got \"yes\" (a string)");
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

TEST_CASE("Ctrl-C stops a sweep cleanly: finished rows kept, status interrupted, exit 130", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("long.json", R"({"device": "cpu", "cpu_threads": 1,
      "data": {"num_samples": 64, "image_size": 32}, "loader": {"batch_size": 4},
      "measure": {"warmup_steps": 0, "steps": 2},
      "sweep": [{"name": "quick"}, {"name": "slow", "set": {"measure.steps": 100000}}]})");
  const std::string out = dir.file("r.json"), stdout_path = dir.file("stdout");
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::freopen(stdout_path.c_str(), "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execl(PTUNE_EXE, PTUNE_EXE, "sweep", cfg.c_str(), "--out", out.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  // Wait until the first row is on disk, then interrupt the second.
  bool first_row = false;
  for (int i = 0; i < 600 && !first_row; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first_row = ptune::test::read_file(out).find("\"quick\"") != std::string::npos;
  }
  REQUIRE(first_row);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
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
      "measure": {"warmup_steps": 0, "steps": 1, "profile_steps": 1, "out_dir": ")" + dir.file("runs") + R"("},
      "sweep": [{"name": "base"}, {"name": "set to none", "set": {"optim.set_to_none": true}}]})");
  auto r = run(ptune::test::exe() + " sweep " + cfg + " --profile --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());  // no profiler chatter on a machine without a GPU
  auto j = Json::parse(r.out);
  REQUIRE(j["rows"].size() == 2);
  CHECK(j["rows"][0]["trace"] == dir.file("runs") + "/prof-test/00-base/trace.json");
  CHECK(j["rows"][1]["trace"] == dir.file("runs") + "/prof-test/01-set-to-none/trace.json");
  for (auto& row : j["rows"]) {
    auto trace = Json::parse(ptune::test::read_file(row["trace"].get<std::string>()));
    CHECK(trace["traceEvents"].size() > 10);
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
  CHECK(j["rows"][1]["status"].get<std::string>().rfind("skipped: loader.pin_memory needs a CUDA device", 0) == 0);
  CHECK(j["rows"][2]["name"] == "batch 16");
  CHECK(j["rows"][2]["batch_size"] == 16);
  CHECK(j["rows"][2]["num_workers"] == 2);  // row 1's change still applies
  CHECK(j["rows"][2]["mode"] == "train");   // and row 3's
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
  expect_usage_error(run(ptune::test::exe() + " launch --nproc-per-node " + std::to_string(limit + 1) + " -- schema"),
                     "launch: --nproc-per-node " + std::to_string(limit + 1) +
                         " is more ranks than this machine can run; at most " + std::to_string(limit) + " (4 per core on " +
                         std::to_string(cores) + " cores, or one per GPU on " +
                         std::to_string(ptune::engine::cuda::device_count()) + " GPUs)");
}

TEST_CASE("resume refuses a checkpoint that does not fit the config, weights and checkpoints are told apart", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  const std::string ck = dir.file("ck/tiny-step3.pt"), w = dir.file("w.pt");
  auto t = run(exe + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck") + " --save-weights " + w);
  INFO(t.err);
  REQUIRE(t.code == 0);
  auto resume = [&](const std::string& file, const std::string& sets) {
    return run(exe + " train " + cfg + " --resume " + file + " --set train.max_steps=4 --set train.checkpoint_dir=" +
               dir.file("ck2") + sets);
  };
  auto expect_error = [](const ptune::test::RunResult& r, const std::string& message) {
    CHECK(r.code == 1);
    CHECK(r.err == "ptune: error: " + message + "\n");
  };
  expect_error(resume(ck, " --set optim.kind=adamw"),
               ck + ": checkpoint of an sgd optimizer, the config's optim.kind is adamw; resume with the same "
                    "optimizer (its state cannot become another's)");
  expect_error(resume(ck, " --set model.num_classes=7"),
               ck + ": checkpoint of a model with 10 classes, the config's model.num_classes is 7; resume with the "
                    "same number, or start a new run from its weights");
  expect_error(resume(w, ""), w + ": a weights file (a state_dict), not a ptune checkpoint: start from it with "
                                  "--set model.weights=" + w);
  expect_error(resume(dir.file("ck"), ""), "--resume: " + dir.file("ck") + ": is a folder, not a file");
  auto other = resume(ck, " --set loader.batch_size=4 --set optim.amp=bf16");
  INFO(other.err);
  CHECK(other.code == 0);  // allowed, and said
  CHECK(other.err.find("resuming with loader.batch_size 4 (the checkpoint's was 8): the step count goes on") !=
        std::string::npos);
  CHECK(other.err.find("resuming with optim.amp bf16 (the checkpoint's was off)") != std::string::npos);
  // A checkpoint given as weights, and weights that do not exist.
  expect_error(run(exe + " eval " + cfg + " --weights " + ck),
               ck + ": this is a ptune checkpoint, not a weights file: continue it with ptune train --resume, or "
                    "export its weights with ptune train --save-weights");
  expect_usage_error(run(exe + " check " + cfg + " --set model.weights=" + dir.file("none.pt")),
                     cfg + ": model.weights: '" + dir.file("none.pt") + "' does not exist");
}

TEST_CASE("train keeps the newest checkpoints, and a name cannot leave its folders", "[e2e]") {
  TempDir dir;
  auto cfg = dir.write("tiny.json", kTiny);
  const std::string exe = ptune::test::exe();
  auto t = run(exe + " train " + cfg + " --set train.max_steps=5 --set train.checkpoint_every=1 "
               "--set train.keep_checkpoints=2 --set train.checkpoint_dir=" + dir.file("ck"));
  INFO(t.err);
  REQUIRE(t.code == 0);
  std::vector<std::string> kept;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("ck"))) kept.push_back(e.path().filename().string());
  std::sort(kept.begin(), kept.end());
  CHECK(kept == std::vector<std::string>{"tiny-step4.pt", "tiny-step5.pt"});
  expect_usage_error(run(exe + " check " + cfg + " --set name=a/b"),
                     cfg + ": name: 'a/b' cannot name files inside a folder; use letters, digits, '-', '_' or '.' "
                           "(no '/', not '..')");
  expect_usage_error(run(exe + " check " + cfg + " --set name=.."),
                     cfg + ": name: '..' cannot name files inside a folder; use letters, digits, '-', '_' or '.' "
                           "(no '/', not '..')");
  // Unwritable outputs are found before training, not after it.
  auto w = run(exe + " train " + cfg + " --set train.checkpoint_dir=" + dir.file("ck2") + " --save-weights " +
               dir.file("missing/w.pt"));
  CHECK(w.code == 1);
  CHECK(w.err == "ptune: error: --save-weights: folder '" + dir.file("missing") + "' does not exist\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("ck2/tiny-step3.pt")));
}
