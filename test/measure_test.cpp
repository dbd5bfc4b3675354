// Profiler traces and the GPU-busy arithmetic; a row's time budget (measure.max_s) on real steps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "runtime/compat.hpp"
#include "core/errors.hpp"
#include "bench/child_side.hpp"
#include "tune/sides.hpp"
#include "bench/bench.hpp"
#include "bench/convergence.hpp"
#include "bench/profile.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/schedule.hpp"
#include "measure/side.hpp"
#include "core/ranges.hpp"
#include "engine/trainer.hpp"
#include "bench/trace.hpp"
#include "report/results.hpp"
#include "test_util.hpp"
#include "tune/sweep.hpp"

using namespace ptune::measure;
using namespace ptune::stats;
using namespace ptune::bench;
using Json = nlohmann::json;

namespace {

/// A host range of a trace: name, start and end (us).
struct Span {
  std::string name;
  double begin = 0, end = 0;
  bool inside(const Span& outer) const { return begin >= outer.begin && end <= outer.end; }
};

/// The trace's "user_annotation" ranges (ProfilerStep#N, the loader, forward...), by start.
std::vector<Span> annotations(const Json& trace) {
  std::vector<Span> out;
  for (auto& e : trace["traceEvents"])
    if (e.value("cat", "") == "user_annotation" && e.value("ph", "") == "X")
      out.push_back({e["name"].get<std::string>(), e["ts"].get<double>(),
                     e["ts"].get<double>() + e["dur"].get<double>()});
  std::sort(out.begin(), out.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  return out;
}

/// A tiny CPU row that profile() records: ResNet-18 at 16x16, batch 4, one thread.
ptune::config::ExperimentConfig tiny_row(const std::string& out_dir) {
  ptune::config::ExperimentConfig cfg;
  cfg.name = "trace-test";
  cfg.device = "cpu";
  cfg.cpu_threads = 1;
  cfg.data.num_samples = 32;
  cfg.data.image_size = 16;
  cfg.loader.batch_size = 4;
  cfg.measure.warmup_steps = 1;
  cfg.measure.profile = true;
  cfg.measure.profile_steps = 3;
  cfg.measure.out_dir = out_dir;
  return cfg;
}

/// Profiles `cfg` into `folder` and returns the trace written, checking what every ptune trace
/// holds: its file name, traceName, no ERROR, the "ptune" metadata.
Json profile_and_read(const ptune::config::ExperimentConfig& cfg, const std::string& folder,
                      const std::string& row) {
  const ProfileResult r = profile(cfg, 1.0, {folder, row, {{"x", 1}}});
  REQUIRE(!r.trace_path.empty());
  CHECK(std::filesystem::path(r.trace_path).parent_path() == std::filesystem::path(folder));
  CHECK(std::regex_match(std::filesystem::path(r.trace_path).filename().string(),
                         std::regex(R"([^/]+_[0-9]+\.[0-9]+\.pt\.trace\.json)")));
  Json trace = Json::parse(ptune::test::read_file(r.trace_path));
  CHECK(trace["traceName"] == r.trace_path);
  CHECK(!trace.contains("ERROR"));
  CHECK(!trace.contains("distributedInfo"));  // one process, as torch.profiler
  REQUIRE(trace.contains("ptune"));
  CHECK(trace["ptune"]["version"] == ptune::kVersion);
  CHECK(trace["ptune"]["row"] == row);
  CHECK(trace["ptune"]["experiment"] == cfg.name);
  CHECK(trace["ptune"]["changes"] == Json{{"x", 1}});
  CHECK(trace["ptune"]["profile_steps"] == cfg.measure.profile_steps);
  return trace;
}

}  // namespace

TEST_CASE("busy fraction merges overlapping kernels and clips to the window", "[measure]") {
  CHECK(busy_fraction({}, 0, 100) == 0.0);
  CHECK(busy_fraction({{0, 50}}, 0, 100) == 0.5);
  CHECK(busy_fraction({{10, 30}, {20, 40}, {60, 70}}, 0, 100) == Approx(0.4));  // 10..40 + 60..70
  CHECK(busy_fraction({{-20, 10}, {90, 150}}, 0, 100) == Approx(0.2));
  CHECK(busy_fraction({{0, 100}, {10, 20}}, 0, 100) == 1.0);
  CHECK(busy_fraction({{5, 6}}, 10, 10) == 0.0);
}

TEST_CASE("a CPU trace is a Chrome trace with the recorded operators", "[measure]") {
  ptune::test::TempDir dir;
  const std::string path = dir.file("row/trace.json");
  TraceSummary s;
  {
    TraceRecorder rec(/*cuda=*/false);
    auto a = torch::randn({64, 64});
    for (int i = 0; i < 3; ++i) a = a.mm(a).relu();
    s = rec.finish(path);
  }
  CHECK(!s.gpu_busy_pct);
  CHECK(s.cpu_ops > 0);
  auto trace = nlohmann::json::parse(ptune::test::read_file(path));
  REQUIRE(trace.contains("traceEvents"));
  int mm = 0;
  for (auto& e : trace["traceEvents"])
    if (e.value("name", "") == "aten::mm") ++mm;
  CHECK(mm == 3);
  CHECK(!std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("row names become folder names", "[measure]") {
  CHECK(slug("AMP + batch 1024") == "amp-batch-1024");
  CHECK(slug("  ") == "row");
}

TEST_CASE("a trace's top level: traceName named, ERROR dropped, events untouched", "[measure]") {
  const std::string kineto =
      "\n  {\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [\n  ],\n  \"ptune\": {\"row\": "
      "\"a]b\\\"}\"},\n  \"traceEvents\": [\n  {\"ph\": \"X\", \"name\": \"x{[\", \"ts\": 1.500, \"dur\": "
      "2}\n  ],\n      \"ERROR\": [\"ERROR:1 DeviceProperties.cpp:48] gpuGetDeviceCount failed\"],\n  "
      "\"traceName\": \"/tmp/x/tmp.abc123\"\n}";
  const auto fixed = Json::parse(finalize_trace_text(kineto, "/runs/a \"b\"/h_1.2.pt.trace.json", true));
  CHECK(fixed["traceName"] == "/runs/a \"b\"/h_1.2.pt.trace.json");
  CHECK(!fixed.contains("ERROR"));
  CHECK(fixed["ptune"]["row"] == "a]b\"}");
  CHECK(fixed["traceEvents"][0]["name"] == "x{[");
  CHECK(fixed["schemaVersion"] == 1);
  CHECK(
      Json::parse(finalize_trace_text(kineto, "t", false)).contains("ERROR"));  // a CUDA recording keeps them
  CHECK(Json::parse(finalize_trace_text("{\"traceEvents\": []}", "t", true))["traceName"] == "t");
  CHECK(finalize_trace_text("not json", "t", true) == "not json");
  CHECK(finalize_trace_text("{\"a\": [1, 2}", "t", true) == "{\"a\": [1, 2}");
}

TEST_CASE("trace file names are tensorboard_trace_handler's", "[measure]") {
  const std::string name = trace_file_name();
  CHECK(std::regex_match(name, std::regex(R"([^/]+_[0-9]+\.[0-9]{16,}\.pt\.trace\.json)")));
  CHECK(name.find("_" + std::to_string(::getpid()) + ".") != std::string::npos);
  CHECK(is_trace_file_name(name));
  CHECK(is_trace_file_name("h_1.2.pt.trace.json.gz"));
  CHECK_FALSE(is_trace_file_name("trace.json"));
  CHECK_FALSE(is_trace_file_name(".pt.trace.json"));
  CHECK(distributed_info_json("gloo", 1, 2) == R"({"backend": "gloo", "rank": 1, "world_size": 2})");
}

TEST_CASE("a recorder writes the metadata it is given", "[measure]") {
  ptune::test::TempDir dir;
  const std::string path = dir.file("h_1.2.pt.trace.json");
  {
    TraceRecorder rec(/*cuda=*/false);
    rec.add_metadata_json("distributedInfo", distributed_info_json("gloo", 1, 2));
    rec.add_metadata_json("ptune", R"({"row": "r"})");
    torch::randn({8, 8}).mm(torch::randn({8, 8}));
    rec.finish(path);
  }
  auto trace = Json::parse(ptune::test::read_file(path));
  CHECK(trace["distributedInfo"] == Json{{"backend", "gloo"}, {"rank", 1}, {"world_size", 2}});
  CHECK(trace["ptune"]["row"] == "r");
  CHECK(trace["traceName"] == path);
  CHECK(!trace.contains("ERROR"));
  // The next recording starts without the last one's metadata.
  {
    TraceRecorder rec(/*cuda=*/false);
    torch::randn({8, 8}).mm(torch::randn({8, 8}));
    rec.finish(path);
  }
  trace = Json::parse(ptune::test::read_file(path));
  CHECK(!trace.contains("distributedInfo"));
  CHECK(!trace.contains("ptune"));
}

TEST_CASE(
    "a profiled train row has a ProfilerStep per step with the loader, forward, backward and update in it",
    "[measure]") {
  ptune::test::TempDir dir;
  auto cfg = tiny_row(dir.file("runs"));
  const std::string folder = dir.file("runs/trace-test/00-base");
  std::filesystem::create_directories(folder);
  ptune::test::TempDir::write_to(folder + "/trace.json", "{}");             // an older ptune's
  ptune::test::TempDir::write_to(folder + "/old_1.2.pt.trace.json", "{}");  // an earlier run's
  ptune::test::TempDir::write_to(folder + "/notes.txt", "mine");            // not a trace: kept
  const Json trace = profile_and_read(cfg, folder, "base");
  CHECK(trace["ptune"]["mode"] == "train");
  CHECK(trace["ptune"]["warmup_steps"] == 1);
  size_t traces = 0;
  for (auto& e : std::filesystem::directory_iterator(folder))
    traces += is_trace_file_name(e.path().filename().string());
  CHECK(traces == 1);
  CHECK(!std::filesystem::exists(folder + "/trace.json"));
  CHECK(std::filesystem::exists(folder + "/notes.txt"));

  const auto spans = annotations(trace);
  std::vector<Span> steps;
  for (auto& s : spans)
    if (s.name.rfind("ProfilerStep#", 0) == 0) steps.push_back(s);
  REQUIRE(steps.size() == 3);
  // Numbered from the pipeline's first step: 1 warm-up step, then #1, #2, #3.
  CHECK(steps[0].name == "ProfilerStep#1");
  CHECK(steps[2].name == "ProfilerStep#3");
  for (size_t i = 0; i < steps.size(); ++i) {
    std::map<std::string, int> in;
    for (auto& s : spans)
      if (s.inside(steps[i])) ++in[s.name];
    INFO("step " << steps[i].name);
    CHECK(in[ptune::ranges::kLoaderNext] >= 1);
    CHECK(in[ptune::ranges::kForward] == 1);
    CHECK(in[ptune::ranges::kBackward] == 1);
    CHECK(in["Optimizer.step#SGD.step"] == 1);
    CHECK(in["Optimizer.zero_grad#SGD.zero_grad"] == 1);
    CHECK(in[ptune::ranges::kH2DCopy] == 0);  // CPU: nothing to copy
  }
  // Nothing of the profiled steps outside them, and the steps one after the other.
  for (auto& s : spans) {
    bool covered = false;
    for (auto& st : steps) covered = covered || s.inside(st);
    CHECK(covered);
  }
  for (size_t i = 1; i < steps.size(); ++i) CHECK(steps[i].begin >= steps[i - 1].end);
}

TEST_CASE("profiled input rows show the loader with workers and the uint8 conversion", "[measure]") {
  ptune::test::TempDir dir;
  auto cfg = tiny_row(dir.file("runs"));
  cfg.measure.mode = ptune::config::Mode::kData;
  cfg.loader.num_workers = 1;
  cfg.loader.uint8_transfer = true;
  const Json trace = profile_and_read(cfg, dir.file("runs/data"), "data");
  std::map<std::string, int> count;
  for (auto& s : annotations(trace)) ++count[s.name];
  CHECK(count["ProfilerStep#1"] == 1);  // after the one warm-up step
  CHECK(count["ProfilerStep#3"] == 1);
  CHECK(count[ptune::ranges::kLoaderNextWorkers] >= 3);
  CHECK(count[ptune::ranges::kLoaderNext] == 0);
  CHECK(count[ptune::ranges::kToFloatNormalize] == 3);
  CHECK(count[ptune::ranges::kForward] == 0);
}

TEST_CASE("a profile without a folder writes nothing", "[measure]") {
  ptune::test::TempDir dir;
  auto cfg = tiny_row(dir.file("runs"));
  cfg.measure.profile_steps = 1;
  CHECK(profile(cfg, 1.0).trace_path.empty());
  cfg.measure.profile = false;
  CHECK(profile(cfg, 1.0, {dir.file("runs/x"), "x"}).trace_path.empty());
  CHECK(!std::filesystem::exists(dir.file("runs")));
}

TEST_CASE("a recording leaves no profiler thread running", "[measure]") {
  // Kineto starts a thread (polling for a profiling daemon's requests) when the profiler is
  // first prepared; left running it read Kineto's statics while the exit handlers freed them
  // (a heap corruption at exit of a short run on a busy machine). The recorder stops it when
  // it finishes. (Run alone, as ctest runs each case: in one process with the other cases, an
  // earlier recording has started and stopped it already.)
  auto threads = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                         std::filesystem::directory_iterator{});
  };
  // A joined thread leaves /proc a moment after join() returns.
  auto settled = [&](std::ptrdiff_t n) {
    for (int i = 0; i < 100 && threads() != n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return threads();
  };
  const auto before = threads();
  for (int i = 0; i < 2; ++i) {  // the first recording starts the thread; a second starts nothing
    TraceRecorder rec(/*cuda=*/false);
    // As recorded steps take (no operator here: the first would start LibTorch's own threads).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rec.finish("");
    CHECK(settled(before) == before);
  }
}

TEST_CASE("trace ranges record only while a profiler records", "[measure]") {
  // What makes them free in the timed pass: without a profiler a range is inactive (a check of
  // the thread's callbacks, nothing recorded); under one it is a user_annotation.
  CHECK_FALSE(ptune::runtime::compat::UserScope(ptune::ranges::kForward).active());
  {
    TraceRecorder rec(/*cuda=*/false);
    CHECK(ptune::runtime::compat::UserScope(ptune::ranges::kForward).active());
    rec.finish("");
  }
  CHECK_FALSE(ptune::runtime::compat::UserScope(ptune::ranges::kForward).active());
}

namespace {

/// A CPU row whose steps are slow: ResNet-18 at `image_size` px, batch `batch`, one thread.
ptune::config::ExperimentConfig slow_row(int64_t image_size, int64_t batch, double max_s) {
  ptune::config::ExperimentConfig cfg;
  cfg.name = "slow-row";
  cfg.device = "cpu";
  cfg.cpu_threads = 1;
  cfg.data.num_samples = 4 * batch;
  cfg.data.image_size = image_size;
  cfg.loader.batch_size = batch;
  cfg.measure.warmup_steps = 2;
  cfg.measure.steps = 4;
  cfg.measure.repeats = 3;
  cfg.measure.max_s = max_s;
  return cfg;
}

/// The seconds one training step of slow_row's pipeline at `image_size` and `batch` takes on this
/// CPU, one thread (the faster of two after a first, which pays for allocations): a budget below
/// one step is then below it on any CPU, however fast.
double one_step_s(int64_t image_size, int64_t batch) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  ptune::engine::Trainer trainer(slow_row(image_size, batch, 1.0), c10::Device(c10::kCPU));
  const at::Tensor images = at::randn({batch, 3, image_size, image_size});
  const at::Tensor labels = at::randint(0, 10, {batch});
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    Stopwatch sw;
    trainer.step(images, labels);
    if (i > 0) best = std::min(best, sw.ms() / 1000.0);
  }
  at::set_num_threads(threads);
  return best;
}

/// Whether one of `notes` starts with `start`.
bool has_note(const std::vector<std::string>& notes, const std::string& start) {
  for (const auto& n : notes)
    if (n.rfind(start, 0) == 0) return true;
  return false;
}

/// After its last step a row only sums its figures and frees its pipeline: well under this
/// (tens of ms here, even beside a compiler).
constexpr double kTeardownMs = 300;

}  // namespace

TEST_CASE("a row whose one step outlasts measure.max_s ends after that step, within its budget plus one step",
          "[measure][budget]") {
  // ResNet-18 at 192 px, batch 8, one thread, and a budget of 40% of one step on this CPU (a
  // second and more on a slow core, a few hundred ms on a fast one; the first CHECK verifies it).
  const auto cfg = slow_row(192, 8, 0.4 * one_step_s(192, 8));
  Stopwatch wall;
  const Measurement m = ptune::tune::measure_row(cfg);
  const double ms = wall.ms();
  INFO("row " << ms << " ms, steps " << m.ms_per_step << " ms");
  REQUIRE(m.repeat_ms.size() == 1);
  CHECK(m.ms_per_step > 1000 * cfg.measure.max_s);
  CHECK(ms <= 1000 * cfg.measure.max_s + m.ms_per_step + kTeardownMs);
  CHECK(has_note(m.notes, "one step alone took "));
  CHECK_FALSE(has_note(m.notes, "warm-up: the first"));
}

TEST_CASE("a row of slow steps stops between steps at measure.max_s and says it ran out of time",
          "[measure][budget]") {
  // ResNet-18 at 96 px, batch 4, one thread: steps of a few hundred ms, windows of four, a
  // budget of 2 s: the warm-up and a window or two, the last cut short between steps.
  const auto cfg = slow_row(96, 4, 2.0);
  Stopwatch wall;
  const Measurement m = ptune::tune::measure_row(cfg);
  const double ms = wall.ms();
  INFO("row " << ms << " ms, windows of " << m.repeat_ms.size());
  for (const auto& n : m.notes) INFO(n);
  REQUIRE_FALSE(m.repeat_ms.empty());
  const double slowest = *std::max_element(m.repeat_ms.begin(), m.repeat_ms.end());
  CHECK(ms <= 1000 * cfg.measure.max_s + slowest + kTeardownMs);
  // Fewer windows than measure.repeats asks for: noted, and so is a window cut short.
  if (static_cast<int64_t>(m.repeat_ms.size()) < cfg.measure.repeats)
    CHECK(has_note(
        m.notes, "ran out of time: the row's budget (measure.max_s, 2 s, warm-up included) ended it after "));
}

TEST_CASE(
    "a sweep row of slow steps compared with a fast one keeps its budget, the previous row's windows "
    "included",
    "[measure][budget]") {
  // Row 0 fast (32 px), row 1 at 192 px: its step alone is longer than its budget (40% of one
  // step on this CPU). Row 1 is timed against row 0 (interleaved): its one pair, a step of each
  // side, ends within its budget plus a step of each.
  auto cfg = slow_row(32, 8, 0.4 * one_step_s(192, 8));
  cfg.sweep = {{"fast", nlohmann::json::object()},
               {"slow", nlohmann::ordered_json::object({{"data.image_size", 192}})}};
  ptune::report::Results out;
  ptune::tune::SweepOptions opt;
  std::vector<double> ends;
  Stopwatch wall;
  opt.on_row = [&](const ptune::report::Results& r) {
    if (ends.size() < r.rows.size()) ends.push_back(wall.ms());
  };
  ptune::tune::run_sweep(cfg, opt, out);
  REQUIRE(out.rows.size() == 2);
  REQUIRE(ends.size() >= 2);
  const auto& slow = out.rows[1];
  REQUIRE(slow.m);
  INFO("row 1: " << ends[1] - ends[0] << " ms; ms/step " << slow.m->ms_per_step);
  for (const auto& n : slow.notes) INFO(n);
  CHECK(slow.m->repeat_ms.size() == 1);
  CHECK(slow.prev_ms.size() == 1);
  CHECK(has_note(slow.notes, "one step alone took "));
  CHECK(ends[1] - ends[0] <= 1000 * cfg.measure.max_s + slow.m->ms_per_step + slow.prev_ms[0] + kTeardownMs);
}

TEST_CASE("a child's Measurement keeps its count of windows cut short, and the note says it in one text",
          "[measure]") {
  // A row in child processes sends its Measurement back as JSON; the parent's group adds up the
  // processes' counts of windows the budget ended early and prints one note for them all, so the
  // count travels as a number and the note is made in one place.
  Measurement m;
  m.batch_size = 2;
  m.steps = 12;
  m.repeat_ms = {10, 11, 12};
  m.short_windows = 2;
  m.notes = {short_windows_note(2, 3, 12)};
  CHECK(m.notes[0] ==
        "2 of its 3 windows ran fewer than measure.steps (12) steps: the row's budget (measure.max_s) "
        "shortened "
        "them so that the windows measure.repeats asks for fit in it, or ended them between steps; each is "
        "kept, "
        "its ms/step over the steps it ran");
  m.repeat_process = {0, 1, 0};
  m.samples_per_s_ci = {5.5, 5.0, 6.0, 3, 0.95, {}};
  m.split = Measurement::StepSplit{12.5, 2.5, 85};
  m.loss = 2.25;
  m.peak_mem_bytes = int64_t{1} << 40;
  m.cpu_cores_busy = 1.5;
  m.trace_verdict = "input-bound";
  const Measurement back = measurement_from_json(measurement_json(m));
  CHECK(back.short_windows == 2);
  CHECK(back.steps == 12);
  CHECK(back.notes == m.notes);
  // The rest of it travels whole too, the optional members absent or present as they were.
  CHECK(back.repeat_ms == m.repeat_ms);
  CHECK(back.repeat_process == m.repeat_process);
  CHECK(back.samples_per_s_ci.lo == 5.0);
  CHECK(back.samples_per_s_ci.hi == 6.0);
  CHECK(back.samples_per_s_ci.n == 3);
  REQUIRE(back.split);
  CHECK(back.split->data_wait_pct == 12.5);
  CHECK(back.split->compute_pct == 85);
  CHECK(back.loss == m.loss);
  CHECK(back.peak_mem_bytes == m.peak_mem_bytes);
  CHECK(!back.device_mem_bytes);
  CHECK(!back.gpu_busy_pct);
  CHECK(back.cpu_cores_busy == 1.5);
  CHECK(back.trace_verdict == "input-bound");
  CHECK(!measurement_from_json(measurement_json(Measurement{})).split);
  auto j = measurement_json(m);
  j.erase("steps");
  CHECK_THROWS_WITH(measurement_from_json(j), "a measurement without \"steps\"");
}
