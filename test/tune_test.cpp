// The tuner: the batch-size finder (out-of-memory recovery, memory margin, fastest batch) and
// the greedy search (noise rule, path, budget) on fake measurements and a fake clock; then
// `ptune tune` end to end on a tiny CPU config.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <set>
#include <stdexcept>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "system/process.hpp"
#include "test_util.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

using ptune::config::ExperimentConfig;
using ptune::measure::Measurement;
using Json = nlohmann::ordered_json;

namespace {

ExperimentConfig base_config() {
  ExperimentConfig cfg;
  cfg.device = "cpu";
  cfg.data.num_samples = 100000;
  cfg.loader.batch_size = 32;
  return cfg;
}

/// A measurement with the given median samples/s and spread (% of the median ms/step).
Measurement fake(int64_t batch, double samples_per_s, double spread_pct = 1.0) {
  Measurement m;
  m.batch_size = batch;
  m.steps = 2;
  m.samples_per_s = samples_per_s;
  m.ms_per_step = 1000.0 * static_cast<double>(batch) / samples_per_s;
  m.repeat_ms = {m.ms_per_step * (1 - spread_pct / 200), m.ms_per_step,
                 m.ms_per_step * (1 + spread_pct / 200)};
  m.spread_pct = spread_pct;
  m.split = ptune::measure::Measurement::StepSplit{0, 0, 100};
  m.loss = 2.3;
  return m;
}

[[noreturn]] void throw_oom(const std::string& kind) {
  const std::string msg = "CUDA out of memory. Tried to allocate 2.00 GiB";
  if (kind == "OutOfMemoryError")
    throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg);
  if (kind == "c10::Error") throw c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, msg);
  throw std::runtime_error(msg);
}

std::vector<int64_t> batches_of(const ptune::tune::BatchSearchResult& r) {
  std::vector<int64_t> out;
  for (const auto& t : r.tries) out.push_back(t.batch_size);
  return out;
}

std::vector<std::string> names_of(const ptune::report::Results& r) {
  std::vector<std::string> out;
  for (const auto& row : r.rows) out.push_back(row.name);
  return out;
}

/// Trials with process settings measured alone by `measure` (a fake): judged as in-process ones.
ptune::tune::PairedMeasureFn alone(const ptune::tune::MeasureFn& measure) {
  return [measure](const ExperimentConfig&, const ExperimentConfig& trial) {
    return ptune::tune::PairedTiming{measure(trial), {}, {}};
  };
}

/// Options for a search on a fake machine (the measure hooks): every change may help there,
/// bf16 included, whatever this CPU is.
ptune::tune::TuneOptions fake_machine() {
  ptune::tune::TuneOptions opt;
  opt.cannot_help = [](const ExperimentConfig&, const ExperimentConfig&) { return std::string(); };
  return opt;
}

}  // namespace

TEST_CASE("allocation failures are recognized as out of memory", "[tune]") {
  using ptune::tune::is_out_of_memory;
  const c10::SourceLocation here{__func__, __FILE__, __LINE__};
  CHECK(is_out_of_memory(c10::OutOfMemoryError(here, "CUDA out of memory. Tried to allocate 20.00 MiB")));
  CHECK(is_out_of_memory(c10::Error(here, "CUDA out of memory. Tried to allocate 20.00 MiB")));
  CHECK(
      is_out_of_memory(c10::Error(here, "DefaultCPUAllocator: not enough memory: you tried to allocate 1")));
  CHECK(is_out_of_memory(
      std::runtime_error("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate")));
  CHECK(is_out_of_memory(std::bad_alloc()));
  CHECK(is_out_of_memory(c10::Error(here, "GET was unable to find an engine to execute this computation")));
  CHECK_FALSE(is_out_of_memory(std::runtime_error("CUDA error: an illegal memory access was encountered")));
  CHECK_FALSE(is_out_of_memory(ptune::ConfigError("optim.cuda_graphs needs a CUDA device; none is visible")));
}

TEST_CASE("batch finder: out of memory is caught, the search lands on 96 and reports the fastest", "[tune]") {
  const std::string kind = GENERATE(as<std::string>{}, "OutOfMemoryError", "c10::Error", "runtime_error");
  INFO("thrown as " << kind);
  int ooms = 0, calls = 0;
  ptune::tune::BatchSearchOptions opt;
  opt.max_batch = 1024;
  opt.on_oom = [&] { ++ooms; };
  opt.measure = [&](const ExperimentConfig& c) {
    ++calls;
    CHECK(c.measure.repeats >= 3);
    const int64_t b = c.loader.batch_size;
    if (b > 96) throw_oom(kind);
    // Throughput peaks at 64, then falls: the fastest is not the largest.
    const double sps = b <= 64 ? 10.0 * static_cast<double>(b) : 640.0 - 4.0 * static_cast<double>(b - 64);
    return fake(b, sps);
  };
  auto r = ptune::tune::find_batch_size(base_config(), opt);
  CHECK(batches_of(r) == std::vector<int64_t>{32, 64, 128, 96, 112, 104});
  CHECK(r.largest_fitting == 96);
  CHECK(r.fastest == 64);
  CHECK(ooms == 3);
  CHECK(calls == 6);
  CHECK(r.stop.text() == "searched");
  CHECK(r.best.loader.batch_size == 64);
  REQUIRE(r.table.rows.size() == 6);
  CHECK(r.table.rows[2].status.text() == "failed: out of memory");
  CHECK(r.table.rows[3].status.text() == "ok");
  CHECK(r.table.rows[1].notes.at(0).rfind("fastest", 0) == 0);
  CHECK(r.table.rows[3].notes.at(0).rfind("largest batch that fits", 0) == 0);
  // The table renders as the sweep's does; the winner's sweep compares the start with it.
  const std::string table = ptune::report::render_results(r.table, "table");
  CHECK(table.find("batch 112") != std::string::npos);
  CHECK(table.find("out of memory") != std::string::npos);
  REQUIRE(r.best.sweep.size() == 2);
  auto rows = ptune::config::expand_sweep(r.best);
  CHECK(rows[0].second.loader.batch_size == 32);
  CHECK(rows[1].second.loader.batch_size == 64);
}

TEST_CASE("batch finder: the memory margin bounds the batch, a failing start searches downwards", "[tune]") {
  const int64_t gib = int64_t{1} << 30;
  SECTION("peak memory over (100 - margin)% of the device does not fit") {
    ptune::tune::BatchSearchOptions opt;
    opt.max_batch = 4096;
    opt.device_memory_bytes = 100 * gib;
    opt.margin_pct = 10;  // limit 90 GiB
    opt.on_oom = [] {};
    opt.measure = [&](const ExperimentConfig& c) {
      auto m = fake(c.loader.batch_size, 5.0 * static_cast<double>(c.loader.batch_size));
      m.peak_mem_bytes = c.loader.batch_size * gib;
      return m;
    };
    auto r = ptune::tune::find_batch_size(base_config(), opt);
    CHECK(batches_of(r) == std::vector<int64_t>{32, 64, 128, 96, 80, 88});
    CHECK(r.memory_limit_bytes == 90 * gib);
    CHECK(r.largest_fitting == 88);
    CHECK(r.fastest == 88);
    CHECK(r.tries[2].status_text().rfind("over the memory margin", 0) == 0);
    CHECK(r.table.rows[2].status.text().rfind("failed: over the memory margin", 0) == 0);
  }
  SECTION("a start that runs out of memory halves until one fits") {
    ptune::tune::BatchSearchOptions opt;
    opt.max_batch = 512;
    opt.on_oom = [] {};
    opt.measure = [&](const ExperimentConfig& c) {
      if (c.loader.batch_size > 20) throw_oom("OutOfMemoryError");
      return fake(c.loader.batch_size, 10.0 * static_cast<double>(c.loader.batch_size));
    };
    auto cfg = base_config();
    cfg.loader.batch_size = 64;
    auto r = ptune::tune::find_batch_size(cfg, opt);
    CHECK(batches_of(r) == std::vector<int64_t>{64, 32, 16, 24});
    CHECK(r.largest_fitting == 16);
    CHECK(r.fastest == 16);
  }
  SECTION("nothing fits: a runtime error naming the first failure") {
    ptune::tune::BatchSearchOptions opt;
    opt.on_oom = [] {};
    opt.measure = [&](const ExperimentConfig&) -> Measurement { throw_oom("OutOfMemoryError"); };
    CHECK_THROWS_WITH(ptune::tune::find_batch_size(base_config(), opt),
                      Catch::StartsWith("no batch size fits: batch 32: out of memory"));
  }
  SECTION("a start failing for another reason is the config's error, not the size's") {
    ptune::tune::BatchSearchOptions opt;
    opt.measure = [&](const ExperimentConfig&) -> Measurement {
      throw ptune::ConfigError("optim.cuda_graphs needs a CUDA device; none is visible");
    };
    CHECK_THROWS_AS(ptune::tune::find_batch_size(base_config(), opt), ptune::ConfigError);
  }
  SECTION("on the CPU the default cap is small and said") {
    ptune::tune::BatchSearchOptions opt;
    opt.measure = [&](const ExperimentConfig& c) { return fake(c.loader.batch_size, 100.0); };
    auto r = ptune::tune::find_batch_size(base_config(), opt);
    CHECK(batches_of(r) == std::vector<int64_t>{32, ptune::tune::kDefaultMaxBatchCpu});
    REQUIRE(!r.notes.empty());
    CHECK(r.notes[0].find("no device memory limit") != std::string::npos);
    CHECK(r.fastest == 32);  // equal throughput: the first (smaller) wins
  }
}

TEST_CASE("batch finder: the budget stops new tries", "[tune]") {
  double now = 0;
  ptune::tune::BatchSearchOptions opt;
  opt.max_batch = 4096;
  opt.budget_s = 100;
  opt.clock = [&] { return now; };
  opt.measure = [&](const ExperimentConfig& c) {
    now += 40;
    return fake(c.loader.batch_size, static_cast<double>(c.loader.batch_size));
  };
  auto r = ptune::tune::find_batch_size(base_config(), opt);
  CHECK(batches_of(r) == std::vector<int64_t>{32, 64, 128});  // started at 0, 40, 80; 120 >= 100
  CHECK(r.stop.text() == "budget reached");
  CHECK(r.fastest == 128);
  CHECK(now <= opt.budget_s + 40);
}

TEST_CASE("noise rule: kept when faster beyond noise (the rows' statistics) and at least the threshold",
          "[tune]") {
  using ptune::stats::Verdict;
  using ptune::tune::judge;
  const ptune::stats::NoiseRule rule;  // the defaults: 3% target, 1% floor
  CHECK(judge(fake(32, 100, 1), fake(32, 150, 1), rule, 3).kept);
  auto v = judge(fake(32, 100, 1), fake(32, 101, 1), rule, 3);
  CHECK_FALSE(v.kept);
  CHECK(v.verdict == Verdict::kWithinNoise);  // 99% interval about [0.99, 1.03]
  CHECK(v.gain_pct == Approx(1.0).epsilon(1e-6));
  CHECK(v.speedup.lo < 1.0);
  CHECK(v.speedup.hi > 1.01);
  v = judge(fake(32, 100, 0.2), fake(32, 102, 0.2), rule, 3);  // faster beyond noise, under the threshold
  CHECK(v.verdict == Verdict::kFaster);
  CHECK_FALSE(v.kept);
  CHECK(judge(fake(32, 100, 0.2), fake(32, 102, 0.2), rule, 1).kept);
  CHECK(judge(fake(32, 100, 1), fake(32, 106, 1), rule, 3).kept);
  v = judge(fake(32, 100, 8), fake(32, 105, 1), rule, 3);  // the incumbent's windows are too spread to tell
  CHECK(v.verdict == Verdict::kUndecided);
  CHECK_FALSE(v.kept);
  CHECK_FALSE(judge(fake(32, 100, 1), fake(32, 105, 8), rule, 3).kept);
  CHECK(judge(fake(32, 100, 2), fake(32, 110, 2), rule, 3).kept);
  v = judge(fake(32, 100, 1), fake(32, 80, 1), rule, 3);
  CHECK(v.gain_pct == Approx(-20.0));
  CHECK(v.verdict == Verdict::kSlower);
  // Under competing load (either side) the interval is 99.9%: the same 10% is no longer told apart.
  CHECK(judge(fake(32, 100, 4), fake(32, 110, 4), rule, 3).kept);
  Measurement loaded = fake(32, 110, 4);
  loaded.load.under_load = true;
  v = judge(fake(32, 100, 4), loaded, rule, 3);
  CHECK(v.speedup.level == Approx(ptune::stats::kSpeedupLevelUnderLoad));
  CHECK(v.verdict == Verdict::kUndecided);
  CHECK_FALSE(v.kept);
  // Throughput, not time per step: batch 64 at the same samples/s is no gain.
  v = judge(fake(32, 100, 1), fake(64, 100, 1), rule, 3);
  CHECK(v.gain_pct == Approx(0.0).margin(1e-9));
  CHECK(v.verdict == Verdict::kWithinNoise);
}

TEST_CASE("candidates: the optimizations not yet on, in order", "[tune]") {
  auto cfg = base_config();
  std::vector<std::string> names;
  for (const auto& c : ptune::tune::candidates(cfg, 4, false)) names.push_back(c.name);
  // On a CPU also the allocators installed here (glibc_tuned always), and thread binding.
  std::vector<std::string> expected = {"multi-worker loading (4)",
                                       "multi-worker loading (2)",
                                       "pinned memory",
                                       "uint8 transfer",
                                       "batch 64",
                                       "set_to_none",
                                       "AMP bf16",
                                       "channels_last",
                                       "AMP bf16 with channels_last",
                                       "cuDNN benchmark",
                                       "CUDA graphs"};
  if (!ptune::system::find_library("libjemalloc.so.2").empty()) expected.push_back("allocator jemalloc");
  if (!ptune::system::find_library("libtcmalloc_minimal.so.4").empty() ||
      !ptune::system::find_library("libtcmalloc.so.4").empty())
    expected.push_back("allocator tcmalloc");
  expected.push_back("allocator glibc_tuned");
  expected.push_back("threads bound to cores");
  CHECK(names == expected);
  // The pair is one candidate: both keys set by one trial.
  for (const auto& c : ptune::tune::candidates(cfg, 4, false))
    if (c.name == "AMP bf16 with channels_last")
      CHECK(c.set.dump() == R"({"optim.amp":"bf16","model.channels_last":true})");
  cfg.loader.num_workers = 4;
  cfg.loader.pin_memory = true;
  cfg.optim.amp = ptune::config::Amp::kBf16;
  cfg.optim.cuda_graphs = true;
  cfg.data.num_samples = 40;  // batch 64 would not fit the dataset
  names.clear();
  for (const auto& c : ptune::tune::candidates(cfg, 4, true)) names.push_back(c.name);
  CHECK(names == std::vector<std::string>{"multi-worker loading (2)", "uint8 transfer", "resize on the GPU",
                                          "set_to_none", "channels_last", "cuDNN benchmark"});
  cfg.loader.gpu_resize = true;
  names.clear();
  for (const auto& c : ptune::tune::candidates(cfg, 4, true)) names.push_back(c.name);
  CHECK(std::find(names.begin(), names.end(), "resize on the GPU") == names.end());
  cfg.loader.gpu_resize = false;
  cfg.optim.amp = ptune::config::Amp::kOff;
  bool fp16 = false;
  for (const auto& c : ptune::tune::candidates(cfg, 4, true)) fp16 = fp16 || c.name == "AMP fp16";
  CHECK(fp16);
}

TEST_CASE("greedy search keeps only the changes that beat the noise", "[tune]") {
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 4;
  opt.measure = [&](const ExperimentConfig& c) {
    CHECK(c.measure.repeats >= 3);
    CHECK(c.sweep.empty());
    if (c.optim.cudnn_benchmark)
      throw ptune::ConfigError("optim.cudnn_benchmark needs a CUDA device; none is visible");
    if (c.optim.cuda_graphs)
      throw ptune::ConfigError("optim.cuda_graphs needs a CUDA device; none is visible");
    double sps = 100;
    if (c.loader.num_workers > 0) sps *= 1.5;                  // +50%: kept
    if (c.loader.pin_memory) sps *= 1.01;                      // +1%: noise, rejected
    if (c.optim.amp == ptune::config::Amp::kBf16) sps *= 1.3;  // +30%: kept
    if (c.model.channels_last) sps *= 0.9;                     // slower: rejected
    return fake(c.loader.batch_size, sps);
  };
  auto cfg = base_config();
  cfg.measure.repeats = 1;
  cfg.sweep.push_back({"ignored", Json{{"loader.batch_size", 8}}});
  opt.measure_against = alone(opt.measure);
  auto r = ptune::tune::greedy_tune(cfg, opt);

  CHECK(names_of(r.path) == std::vector<std::string>{"baseline", "multi-worker loading (4)", "AMP bf16"});
  CHECK(r.path.rows[1].speedup_vs_prev == Approx(1.5));
  CHECK(r.path.rows[2].speedup_vs_base == Approx(1.95));
  CHECK(r.path.rows[2].notes.at(0).rfind("optim.amp changes training semantics", 0) == 0);
  CHECK(r.stop.text() == "no change beat the noise");

  // The winner: the input config plus the kept changes, with the user's own repeats.
  CHECK(r.best.loader.num_workers == 4);
  CHECK(r.best.optim.amp == ptune::config::Amp::kBf16);
  CHECK_FALSE(r.best.loader.pin_memory);
  CHECK_FALSE(r.best.model.channels_last);
  CHECK(r.best.loader.batch_size == 32);
  CHECK(r.best.measure.repeats == 1);

  // Every trial is recorded with its verdict; CUDA-only ones are skipped with the reason, once.
  std::map<std::string, std::string> verdict;  // the last verdict of each trial
  int cudnn_trials = 0;
  for (const auto& t : r.trials) {
    verdict[t.name] = ptune::tune::trial_verdict_text(t.verdict);
    if (t.name == "cuDNN benchmark") ++cudnn_trials;
  }
  CHECK(verdict["pinned memory"] == "rejected");
  CHECK(verdict["channels_last"] == "rejected");
  CHECK(verdict["multi-worker loading (2)"] == "rejected");
  CHECK(verdict["cuDNN benchmark"] == "skipped");
  CHECK(verdict["CUDA graphs"] == "skipped");
  CHECK(cudnn_trials == 1);
  for (const auto& t : r.trials)
    if (t.name == "CUDA graphs") CHECK(t.reason == "optim.cuda_graphs needs a CUDA device; none is visible");
  for (const auto& t : r.trials)
    if (t.name == "pinned memory") {
      CHECK(t.gain_pct == Approx(1.0));
      CHECK(t.noise == "within noise");
      CHECK(t.reason.find(": within noise") != std::string::npos);
    }
  // Pass 2 retries only what was tried before the last kept change (AMP bf16): pinned memory
  // and the rest again, channels_last (tried after it, against the same incumbent) not.
  std::map<std::string, int> tries;
  for (const auto& t : r.trials) ++tries[t.name];
  CHECK(tries["pinned memory"] == 2);
  CHECK(tries["multi-worker loading (2)"] == 2);
  CHECK(tries["channels_last"] == 1);
  CHECK(tries["AMP bf16"] == 1);

  const std::string trials = ptune::tune::render_trials(r.trials);
  CHECK(trials.find("pinned memory") != std::string::npos);
  CHECK(trials.find("skipped: optim.cuda_graphs needs a CUDA device") != std::string::npos);

  // The winner's sweep replays the path: row 0 is the original config, the last the winner.
  REQUIRE(r.best.sweep.size() == 3);
  auto rows = ptune::config::expand_sweep(r.best);
  CHECK(rows[0].second.loader.num_workers == 0);
  CHECK(rows[0].second.optim.amp == ptune::config::Amp::kOff);
  CHECK(rows[1].second.loader.num_workers == 4);
  CHECK(rows[1].second.optim.amp == ptune::config::Amp::kOff);
  CHECK(rows[2].second.optim.amp == ptune::config::Amp::kBf16);
  auto doc = ptune::config::to_json(r.best);
  auto reparsed = ptune::config::from_json(doc, "best.json");
  CHECK(ptune::config::to_json(reparsed) == doc);
}

TEST_CASE("greedy search skips a trial that cannot help on this machine, with the reason, untimed",
          "[tune]") {
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 1;
  opt.max_passes = 2;
  int bf16_timed = 0;
  opt.measure = [&](const ExperimentConfig& c) {
    if (c.optim.cudnn_benchmark || c.optim.cuda_graphs) throw ptune::ConfigError("needs a CUDA device");
    bf16_timed += c.optim.amp == ptune::config::Amp::kBf16;
    return fake(c.loader.batch_size, c.optim.amp == ptune::config::Amp::kBf16 ? 300 : 100);
  };
  opt.measure_against = alone(opt.measure);
  // A machine where bf16 is emulated: the rule asked with the incumbent and the trial.
  int asked = 0;
  opt.cannot_help = [&](const ExperimentConfig& before, const ExperimentConfig& after) {
    ++asked;
    CHECK(before.optim.amp == ptune::config::Amp::kOff);
    return after.optim.amp == ptune::config::Amp::kBf16 ? std::string("bf16 is emulated here")
                                                        : std::string();
  };
  auto r = ptune::tune::greedy_tune(base_config(), opt);
  CHECK(bf16_timed == 0);
  CHECK(asked > 0);
  int bf16_trials = 0;
  for (const auto& t : r.trials)
    if (t.name == "AMP bf16") {
      ++bf16_trials;
      CHECK(t.verdict == ptune::tune::TrialVerdict::kSkipped);
      CHECK(t.reason == "bf16 is emulated here");
    }
  CHECK(bf16_trials == 1);  // once, not again in the second pass
  CHECK(r.best.optim.amp == ptune::config::Amp::kOff);
  CHECK(ptune::tune::render_trials(r.trials).find("skipped: bf16 is emulated here") != std::string::npos);
}

TEST_CASE("greedy search: a trial measured under competing load says so in its reason", "[tune]") {
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 1;
  opt.max_passes = 1;
  opt.measure = [&](const ExperimentConfig& c) {
    if (c.optim.cudnn_benchmark || c.optim.cuda_graphs) throw ptune::ConfigError("needs a CUDA device");
    Measurement m = fake(c.loader.batch_size, c.optim.amp == ptune::config::Amp::kBf16 ? 200 : 100);
    m.load.under_load = c.optim.amp == ptune::config::Amp::kBf16;
    return m;
  };
  opt.measure_against = alone(opt.measure);
  auto r = ptune::tune::greedy_tune(base_config(), opt);
  // The bf16 trial was under load, and once kept it is the incumbent every later trial is
  // judged against: those say so too; the trials before it do not.
  bool seen = false;
  for (const auto& t : r.trials) {
    if (t.pass == 0 || t.verdict == ptune::tune::TrialVerdict::kSkipped) continue;
    seen = seen || t.name == "AMP bf16";
    INFO(t.name << ": " << t.reason);
    CHECK((t.reason.find(", measured under competing load (a 99.9% interval)") != std::string::npos) == seen);
  }
  CHECK(seen);
  CHECK(r.trials.back().name != "AMP bf16");  // some trial came after it
}

TEST_CASE(
    "greedy search: a process-level trial is judged by its pairs with the incumbent, both in child processes",
    "[tune]") {
  using ptune::config::Allocator;
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 1;
  opt.max_passes = 2;
  // ptune's own process: every in-process trial runs at the baseline's 100 samples/s.
  opt.measure = [&](const ExperimentConfig& c) {
    CHECK(ptune::system::default_process(c.process));
    if (c.optim.cudnn_benchmark || c.optim.cuda_graphs) throw ptune::ConfigError("needs a CUDA device");
    return fake(c.loader.batch_size, 100);
  };
  // Child processes: slower than ptune's own (80 samples/s on either side) but, timed against
  // each other, glibc_tuned runs 1.2x the incumbent's; nothing else changes anything.
  std::vector<std::pair<Allocator, Allocator>> asked;  // (incumbent's, trial's) allocator
  opt.measure_against = [&](const ExperimentConfig& incumbent, const ExperimentConfig& trial) {
    CHECK_FALSE(
        (ptune::system::default_process(incumbent.process) && ptune::system::default_process(trial.process)));
    if (trial.optim.cudnn_benchmark || trial.optim.cuda_graphs)
      throw ptune::ConfigError("needs a CUDA device");
    asked.emplace_back(incumbent.process.allocator, trial.process.allocator);
    const bool gain = trial.process.allocator == Allocator::kGlibcTuned &&
                      incumbent.process.allocator != Allocator::kGlibcTuned;
    ptune::tune::PairedTiming p;
    p.m = fake(trial.loader.batch_size, 80, 0.4);
    p.m.repeat_process = {0, 1, 2};
    p.prev_process = {0, 1, 2};
    const Measurement a = fake(incumbent.loader.batch_size, gain ? 80 / 1.2 : 80, 0.4);
    for (size_t i = 0; i < a.repeat_ms.size(); ++i)
      p.prev_ms.push_back(a.repeat_ms[i] * (i % 2 ? 1.001 : 0.999));
    return p;
  };
  auto r = ptune::tune::greedy_tune(base_config(), opt);

  CHECK(r.best.process.allocator == Allocator::kGlibcTuned);
  REQUIRE(names_of(r.path) == std::vector<std::string>{"baseline", "allocator glibc_tuned"});
  CHECK(r.path.rows[1].speedup_vs_prev == Approx(1.2).epsilon(0.01));
  CHECK(r.path.rows[1].prev_ms.size() == 3);
  for (const auto& t : r.trials) {
    if (t.pass == 0 || t.verdict == ptune::tune::TrialVerdict::kSkipped) continue;
    INFO(t.name << ": " << t.reason);
    const bool in_children = !t.prev_ms.empty();
    CHECK((t.reason.find(", timed against the best so far in alternating windows, both in child processes") !=
           std::string::npos) == in_children);
    // Every trial once glibc_tuned is kept runs in child processes too, against it.
    if (t.name != "allocator glibc_tuned" && t.set.begin().key().rfind("process.", 0) == 0)
      CHECK(in_children);
    if (t.name == "allocator glibc_tuned") {
      CHECK(t.verdict == ptune::tune::TrialVerdict::kKept);
      CHECK(t.gain_pct == Approx(20).margin(0.5));
    }
  }
  // Pass 2 times the in-process candidates against the kept allocator, in child processes.
  bool after = false;
  for (const auto& [inc, trial] : asked) after = after || (inc == Allocator::kGlibcTuned && trial == inc);
  CHECK(after);
}

TEST_CASE("greedy search: a failing trial is recorded and the search goes on", "[tune]") {
  int ooms = 0;
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 1;
  opt.on_oom = [&] { ++ooms; };
  opt.measure = [&](const ExperimentConfig& c) {
    if (c.loader.batch_size > 32) throw_oom("OutOfMemoryError");
    if (c.optim.set_to_none) throw std::runtime_error("CUDA error: something else\nmore lines");
    return fake(c.loader.batch_size, c.optim.amp == ptune::config::Amp::kBf16 ? 200.0 : 100.0);
  };
  opt.measure_against = alone(opt.measure);
  auto r = ptune::tune::greedy_tune(base_config(), opt);
  CHECK(ooms == 2);  // batch 64 is retried in pass 2, after AMP was kept (it might fit then)
  CHECK(r.best.optim.amp == ptune::config::Amp::kBf16);
  bool saw_oom = false, saw_failed = false;
  for (const auto& t : r.trials) {
    saw_oom = saw_oom || (t.verdict == ptune::tune::TrialVerdict::kFailed && t.out_of_memory &&
                          t.reason == "out of memory");
    saw_failed = saw_failed || (t.verdict == ptune::tune::TrialVerdict::kFailed && !t.out_of_memory &&
                                t.reason == "CUDA error: something else");
  }
  CHECK(saw_oom);
  CHECK(saw_failed);
}

TEST_CASE("greedy search respects the budget", "[tune]") {
  double now = 1000;
  int calls = 0;
  ptune::tune::TuneOptions opt = fake_machine();
  opt.cpu_cores = 4;
  opt.clock = [&] { return now; };
  opt.measure = [&](const ExperimentConfig& c) {
    ++calls;
    now += 60;  // every trial takes a minute
    return fake(c.loader.batch_size, 100.0 + c.loader.num_workers);
  };
  opt.measure_against = alone(opt.measure);
  SECTION("stops when the budget is used up") {
    opt.budget_s = 180;
    auto r = ptune::tune::greedy_tune(base_config(), opt);
    CHECK(calls == 3);  // baseline at 0, trials at 60 and 120; none starts at 180
    CHECK(r.stop.text() == "budget of 3 min reached");
    CHECK(r.elapsed_s == Approx(180));
  }
  SECTION("never more than one trial beyond it") {
    opt.budget_s = 150;
    auto r = ptune::tune::greedy_tune(base_config(), opt);
    CHECK(calls == 3);
    CHECK(r.elapsed_s <= opt.budget_s + 60);
    CHECK(r.stop.text().find("budget") != std::string::npos);
  }
  SECTION("interruption stops before the next trial and keeps the path") {
    std::atomic<bool> stop{false};
    opt.interrupted = &stop;
    opt.measure = [&](const ExperimentConfig& c) {
      if (++calls == 2) stop = true;
      return fake(c.loader.batch_size, c.loader.num_workers > 0 ? 200.0 : 100.0);
    };
    auto r = ptune::tune::greedy_tune(base_config(), opt);
    CHECK(calls == 2);
    CHECK(r.stop.text() == "interrupted");
    CHECK(r.path.status == ptune::report::RunStatus::kInterrupted);
    CHECK(r.best.loader.num_workers == 4);
  }
}

namespace {

const char* kTinyTune = R"({
  "name": "tiny-tune", "device": "cpu", "cpu_threads": 1,
  "data": {"num_samples": 64, "image_size": 16},
  "loader": {"batch_size": 4},
  "measure": {"warmup_steps": 1, "steps": 2, "repeats": 1, "max_s": 3}
})";

}  // namespace

TEST_CASE("ptune tune on the CPU writes a config that check, sweep and train accept", "[tune][e2e]") {
  ptune::test::TempDir dir;
  const std::string cfg = dir.write("tiny.json", kTinyTune);
  const std::string best = dir.file("best.json");
  // Trials of at most 3 s (measure.max_s): the first pass reaches the CUDA-only candidates within
  // the half-minute budget, under load too.
  auto r = ptune::test::run(ptune::test::exe() + " tune " + cfg + " --budget 0.5 --repeats 2 --out " + best);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("samples/s") != std::string::npos);
  CHECK(r.out.find("baseline") != std::string::npos);
  CHECK(r.out.find("skipped: optim.cuda_graphs needs a CUDA device") != std::string::npos);
  auto doc = Json::parse(ptune::test::read_file(best));
  CHECK(doc["measure"]["repeats"] == 1);
  CHECK(doc["data"]["image_size"] == 16);
  CHECK(doc["sweep"].is_array());

  auto check = ptune::test::run(ptune::test::exe() + " check " + best);
  INFO(check.err);
  CHECK(check.code == 0);
  // Its first two rows (one where the search kept nothing, as on a loaded machine): the sweep's
  // own tests time the rest (rows in child processes included).
  const std::string rows = doc["sweep"].empty() ? "0" : "0-1";
  auto sweep = ptune::test::run(ptune::test::exe() + " sweep " + best + " --rows " + rows + " --format json");
  INFO(sweep.err);
  CHECK(sweep.code == 0);
  CHECK(Json::parse(sweep.out)["status"] == "complete");
  auto train = ptune::test::run(ptune::test::exe() + " train " + best +
                                " --set train.max_steps=1 --set train.checkpoint_dir=" + dir.file("ckpt"));
  INFO(train.err);
  CHECK(train.code == 0);
}

TEST_CASE("ptune tune --batch-size on the CPU tries doublings up to --max-batch", "[tune][e2e]") {
  ptune::test::TempDir dir;
  const std::string cfg = dir.write("tiny.json", kTinyTune);
  const std::string best = dir.file("best.json");
  auto r = ptune::test::run(ptune::test::exe() + " tune " + cfg +
                            " --batch-size --max-batch 16 --repeats 1 --out " + best);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("batch 4") != std::string::npos);
  CHECK(r.out.find("batch 16") != std::string::npos);
  CHECK(r.out.find("fastest") != std::string::npos);
  auto doc = Json::parse(ptune::test::read_file(best));
  const int64_t b = doc["loader"]["batch_size"];
  CHECK((b == 4 || b == 8 || b == 16));
  CHECK(ptune::test::run(ptune::test::exe() + " check " + best).code == 0);
}

TEST_CASE("ptune tune --format json: the table's rows, the search and the winning config", "[tune][e2e]") {
  ptune::test::TempDir dir;
  const std::string cfg = dir.write("tiny.json", kTinyTune);
  auto b = ptune::test::run(ptune::test::exe() + " tune " + cfg +
                            " --batch-size --max-batch 8 --repeats 1 --format json");
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  auto doc = Json::parse(b.out);
  CHECK(doc["search"]["kind"] == "batch-size");
  CHECK(doc["search"]["stop_reason"] == "searched");
  CHECK(doc["rows"].size() == 2);  // batch 4, batch 8
  CHECK(doc["best"]["loader"]["batch_size"] == doc["search"]["fastest"]);
  CHECK(doc["search"]["largest_fitting"] == 8);

  auto g =
      ptune::test::run(ptune::test::exe() + " tune " + cfg + " --budget 0.001 --repeats 1 --format json");
  INFO(g.out << g.err);
  REQUIRE(g.code == 0);
  auto gd = Json::parse(g.out);
  CHECK(gd["search"]["kind"] == "greedy");
  CHECK(gd["search"]["stop_reason"] == "budget of 0.001 min reached");
  REQUIRE(gd["search"]["trials"].size() >= 1);
  CHECK(gd["search"]["trials"][0]["verdict"] == "baseline");
  CHECK(gd["rows"][0]["name"] == "baseline");
  CHECK(gd["best"]["data"]["image_size"] == 16);

  auto csv = ptune::test::run(ptune::test::exe() + " tune " + cfg +
                              " --batch-size --max-batch 4 --repeats 1 --format csv");
  REQUIRE(csv.code == 0);
  CHECK(csv.out.rfind("index,name,", 0) == 0);
}

TEST_CASE("ptune tune usage errors exit 2", "[tune][e2e]") {
  ptune::test::TempDir dir;
  const std::string cfg = dir.write("tiny.json", kTinyTune);
  auto r = ptune::test::run(ptune::test::exe() + " tune " + cfg + " --margin 5");
  CHECK(r.code == 2);
  CHECK(r.err.rfind("ptune: error: ", 0) == 0);
  auto m = ptune::test::run(ptune::test::exe() + " tune " + cfg + " --batch-size --margin 100");
  CHECK(m.code == 2);
  CHECK(m.err.rfind("ptune: error: ", 0) == 0);
  auto f = ptune::test::run(ptune::test::exe() + " tune " + cfg + " --format jsno");
  CHECK(f.code == 2);
  CHECK(
      f.err ==
      "ptune: error: --format: unknown format 'jsno', did you mean 'json'? allowed: table, json, csv, md\n");
}

namespace {

/// A kind of side of the test's own, registered for one sweep: its sides' steps take
/// 10 ms / (1 + loader.num_workers), with no clock and no pipeline.
class WorkersKind : public ptune::measure::SideKind {
 public:
  struct Side : ptune::measure::RowSide {
    Side(const ptune::config::ExperimentConfig& cfg, std::vector<std::string>& log)
        : ms(10.0 / static_cast<double>(1 + cfg.loader.num_workers)) {
      log.push_back("start " + std::to_string(cfg.loader.num_workers));
    }
    double window(const ptune::measure::Deadline&) override {
      windows.push_back(ms * (1.0 + 0.001 * static_cast<double>(windows.size() % 3)));
      return windows.back();
    }
    int64_t steps_per_window() const override { return 5; }
    double samples_per_step() const override { return 32; }
    ptune::measure::Measurement result(size_t first, size_t count) override {
      ptune::measure::Measurement m;
      m.batch_size = 32;
      const auto begin = windows.begin() + static_cast<std::ptrdiff_t>(first);
      const auto end = begin + static_cast<std::ptrdiff_t>(std::min(count, windows.size() - first));
      ptune::measure::set_windows(m, std::vector<double>(begin, end), 1);
      return m;
    }
    void set_progress(const ptune::measure::Progress&, int64_t) override {}
    double ms;
    std::vector<double> windows;
  };
  mutable std::vector<std::string> log;
  std::string name() const override { return "workers"; }
  bool matches(const ptune::config::ExperimentConfig& cfg) const override {
    return cfg.name == "a-kind-of-its-own";
  }
  std::string arch(const ptune::config::ExperimentConfig&) const override { return "workers"; }
  bool needs_processes(const ptune::config::ExperimentConfig&) const override { return false; }
  std::unique_ptr<ptune::measure::RowSide> start_here(const ptune::config::ExperimentConfig& cfg,
                                                      const ptune::measure::Progress&,
                                                      const ptune::measure::Deadline&) const override {
    return std::make_unique<Side>(cfg, log);
  }
  std::unique_ptr<ptune::measure::RowSide> start_process(const ptune::config::ExperimentConfig& cfg,
                                                         const ptune::measure::Progress& p,
                                                         const ptune::measure::Deadline& d) const override {
    return start_here(cfg, p, d);
  }
  double samples_per_step(const ptune::config::ExperimentConfig&) const override { return 32; }
  int64_t ranks(const ptune::config::ExperimentConfig&) const override { return 1; }
  std::string processes_name() const override { return "this row's sides"; }
  bool startup_in_auto_budget() const override { return true; }
  bool restarts_processes_when_out_of_memory() const override { return false; }
  std::string restarted_note() const override { return ""; }
  std::string diagnose(const ptune::measure::Measurement&, const ptune::config::ExperimentConfig& cfg,
                       const std::vector<ptune::measure::Tried>&,
                       const ptune::system::CpuInfo&) const override {
    return "workers-bound: " + std::to_string(cfg.loader.num_workers) + " workers";
  }
  bool wants_profile(const ptune::config::ExperimentConfig&) const override { return false; }
  void profile(ptune::measure::Measurement&, const ptune::config::ExperimentConfig&,
               const ptune::measure::TraceTarget&, const ptune::measure::Progress&) const override {}
};

}  // namespace

TEST_CASE("a kind of side added in one file: the sweep times, compares and diagnoses its rows", "[tune]") {
  WorkersKind kind;
  const ptune::tune::ExtraSideKind registered(kind);
  ExperimentConfig cfg;
  cfg.name = "a-kind-of-its-own";
  cfg.device = "cpu";
  cfg.measure.repeats = 3;
  cfg.measure.max_s = 10;
  cfg.sweep = {{"baseline", nlohmann::ordered_json::object()},
               {"one worker", nlohmann::ordered_json{{"loader.num_workers", 1}}}};
  CHECK(&ptune::tune::side_kind(cfg) == &kind);
  ptune::report::Results out;
  ptune::tune::run_sweep(cfg, {}, out);
  REQUIRE(out.rows.size() == 2);
  CHECK(out.rows[0].arch == "workers");
  CHECK(out.rows[1].speedup_vs_prev == Approx(2.0).epsilon(0.01));
  CHECK(out.rows[1].verdict_prev == "faster");
  CHECK(out.rows[1].diagnosis == "workers-bound: 1 workers");
  // The first row's side was kept warm and compared with the second: one start each.
  CHECK(kind.log == std::vector<std::string>{"start 0", "start 1"});
}
