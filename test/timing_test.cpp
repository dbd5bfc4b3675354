// The one timing path (measure/timing.hpp) with a kind of side of the test's own, without LibTorch:
// a new kind of side is this one file (FakeKind), and the timing path, the notes and the
// comparison take it as they take ptune's pipeline or the user's program.

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/stats.hpp"
#include "measure/side_kind.hpp"
#include "measure/timing.hpp"

namespace {

using ptune::config::ExperimentConfig;
using ptune::measure::Deadline;
using ptune::measure::Measurement;
using ptune::measure::Progress;
using ptune::measure::RowSide;

/// What the fake kind's sides did, in order: "start A0", "window B1", "end A0", ...
struct Log {
  std::vector<std::string> events;
  int alive = 0;       // sides alive now
  int most_alive = 0;  // the most alive at once
};

/// One process of a fake side: its windows take `ms` (config name "A" or "B", its process index
/// adding a process effect, a window index a small wobble) without any clock.
class FakeSide : public RowSide {
 public:
  /// `effect`: the process's own speed (a factor on its windows' time) in place of 1% a process
  /// index; `wobble`: each window's own noise (a factor drawn from a fixed pattern).
  FakeSide(const ExperimentConfig& cfg, int process, Log& log, std::optional<double> effect = std::nullopt,
           double wobble = 0.002)
      : name_(cfg.name + std::to_string(process)),
        base_ms_(cfg.name == "B" ? 12.0 : 10.0),
        process_(process),
        effect_(effect ? *effect : 1.0 + 0.01 * process),
        wobble_(wobble),
        log_(log) {
    log_.events.push_back("start " + name_);
    log_.most_alive = std::max(log_.most_alive, ++log_.alive);
  }
  ~FakeSide() override {
    log_.events.push_back("end " + name_);
    --log_.alive;
  }
  double window(const Deadline&) override {
    // A fixed pattern of seven window wobbles (-3 ... +3 sevenths of `wobble_`), started at a
    // place of the process's own.
    const double w = static_cast<double>((windows_.size() + 3 * static_cast<size_t>(process_)) % 7) - 3.0;
    const double ms = base_ms_ * effect_ * (1.0 + wobble_ * w / 3.0);
    windows_.push_back(ms);
    return ms;
  }
  int64_t steps_per_window() const override { return 5; }
  double samples_per_step() const override { return 8; }
  size_t processes() const override { return 1; }
  std::string process_description() const override { return "a fake process"; }
  Measurement result(size_t first, size_t count) override {
    if (first >= windows_.size()) throw std::runtime_error("no window was timed");
    Measurement m;
    m.batch_size = 8;
    const auto begin = windows_.begin() + static_cast<std::ptrdiff_t>(first);
    const auto end = begin + static_cast<std::ptrdiff_t>(std::min(count, windows_.size() - first));
    ptune::measure::set_windows(m, std::vector<double>(begin, end), 1);
    return m;
  }
  void set_progress(const Progress&, int64_t) override {}

 private:
  std::string name_;
  double base_ms_;
  int process_;
  double effect_, wobble_;
  Log& log_;
  std::vector<double> windows_;
};

/// A kind of side of the test's own. `oom_beside` makes a side of "B" fail with an allocation
/// error while another side is alive (two that do not fit in memory at once).
class FakeKind : public ptune::measure::SideKind {
 public:
  explicit FakeKind(Log& log) : log_(log) {}
  bool oom_beside = false;
  /// Where set, each process's own speed: "A"'s n-th process gets effects[n], "B"'s effects[n + 5]
  /// (modulo the size); and each window's noise.
  std::vector<double> effects;
  double wobble = 0.002;
  int oom_from_process = -1;  // a process of this index or later fails to start (out of memory)
  int fit = -1;               // a process fails to start while this many fakes are alive
  std::string name() const override { return "fake"; }
  bool matches(const ExperimentConfig&) const override { return true; }
  std::string arch(const ExperimentConfig&) const override { return "fake"; }
  bool needs_processes(const ExperimentConfig&) const override { return false; }
  std::unique_ptr<RowSide> start_here(const ExperimentConfig& cfg, const Progress&,
                                      const Deadline&) const override {
    if (oom_beside && cfg.name == "B" && log_.alive > 0) throw std::runtime_error("fake: out of memory");
    return std::make_unique<FakeSide>(cfg, 0, log_);
  }
  std::unique_ptr<RowSide> start_process(const ExperimentConfig& cfg, const Progress&,
                                         const Deadline&) const override {
    const int n = processes_[cfg.name]++;
    if ((oom_from_process >= 0 && n >= oom_from_process) || (fit >= 0 && log_.alive >= fit))
      throw std::runtime_error("fake: out of memory");
    if (effects.empty()) return std::make_unique<FakeSide>(cfg, n, log_);
    const size_t at = (static_cast<size_t>(n) + (cfg.name == "B" ? 5 : 0)) % effects.size();
    return std::make_unique<FakeSide>(cfg, n, log_, effects[at], wobble);
  }
  double samples_per_step(const ExperimentConfig&) const override { return 8; }
  int64_t ranks(const ExperimentConfig&) const override { return 1; }
  std::string processes_name() const override { return "this row's fakes"; }
  bool startup_in_auto_budget() const override { return true; }
  bool restarts_processes_when_out_of_memory() const override { return false; }
  std::string restarted_note() const override { return "restarted"; }
  std::string diagnose(const Measurement&, const ExperimentConfig&, const std::vector<ptune::measure::Tried>&,
                       const ptune::system::CpuInfo&) const override {
    return "fake";
  }
  bool wants_profile(const ExperimentConfig&) const override { return false; }
  void profile(Measurement&, const ExperimentConfig&, const ptune::measure::TraceTarget&,
               const Progress&) const override {}

 private:
  Log& log_;
  mutable std::map<std::string, int> processes_;
};

/// One process, no GPU, an allocation error told by its message.
class FakeContext : public ptune::measure::RowContext {
 public:
  std::function<double(double)> rank_max(const ExperimentConfig&) const override { return {}; }
  int gpu(const ExperimentConfig&) const override { return -1; }
  std::string gpu_uuid(int) const override { return ""; }
  ptune::system::LoadReport agreed_load(ptune::system::LoadSampler& load, int gpu,
                                        const ExperimentConfig&) const override {
    return load.stop(gpu);
  }
  bool is_out_of_memory(const std::exception& e) const override {
    return std::string(e.what()).find("out of memory") != std::string::npos;
  }
  void free_device_memory() const override {}
};

ExperimentConfig config(const std::string& name) {
  ExperimentConfig cfg;
  cfg.name = name;
  cfg.measure.steps = 5;
  cfg.measure.repeats = 3;
  cfg.measure.max_s = 5;
  cfg.measure.processes = 2;
  cfg.measure.max_processes = 2;  // as they start (spread_row lets them grow)
  return cfg;
}

/// A timing of `row` by `kind`, against `prev` (null: alone) and its side `kept` (null: none kept).
ptune::measure::RowTiming timing(const ExperimentConfig& row, const FakeKind& kind,
                                 const ExperimentConfig* prev = nullptr, RowSide* kept = nullptr,
                                 bool in_processes = false) {
  ptune::measure::RowTiming t;
  t.row = {&row, &kind};
  if (prev) t.prev = {prev, &kind};
  t.kept = kept;
  t.in_processes = in_processes;
  return t;
}

bool has_note(const Measurement& m, const std::string& start) {
  for (const auto& n : m.notes)
    if (n.rfind(start, 0) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("timing path: a row alone, in this process", "[timing]") {
  Log log;
  FakeKind kind(log);
  const ExperimentConfig a = config("A");
  ptune::measure::TimedRow r = ptune::measure::time_row(timing(a, kind), FakeContext());
  REQUIRE(r.m);
  CHECK(r.m->ms_per_step == Approx(10.0).epsilon(0.01));
  CHECK(r.prev_ms.empty());
  CHECK_FALSE(r.restarted);
  REQUIRE(r.side);  // kept for the next row
  CHECK(log.events.front() == "start A0");
  CHECK(log.alive == 1);
}

TEST_CASE("timing path: a trial against fresh processes, started in turn", "[timing]") {
  Log log;
  FakeKind kind(log);
  const ExperimentConfig a = config("A"), b = config("B");
  ptune::measure::TimedRow r = ptune::measure::time_row(timing(b, kind, &a, nullptr, true), FakeContext());
  REQUIRE(r.m);
  // A B, then B A: neither side has the earlier starts.
  const std::vector<std::string> starts(log.events.begin(), log.events.begin() + 4);
  CHECK(starts == std::vector<std::string>{"start A0", "start B0", "start B1", "start A1"});
  CHECK(r.prev_ms.size() == r.m->repeat_ms.size());
  CHECK(r.prev_process.size() == r.prev_ms.size());
  CHECK(has_note(*r.m,
                 "this row's fakes: 2 processes started alike, timed in turn; the first: a fake process"));
  CHECK(has_note(*r.m, "timed against 2 fresh processes of the settings of the row it is compared with"));
  // The speedup of B over A (12 ms against 10): slower.
  CHECK(r.m->ms_per_step / ptune::stats::median(r.prev_ms) == Approx(1.2).epsilon(0.02));
  // prev's fresh processes are ended with the timing; the row's are kept.
  CHECK(log.alive == 2);
}

TEST_CASE("timing path: a row against the previous row's processes, kept warm", "[timing]") {
  Log log;
  FakeKind kind(log);
  const ExperimentConfig a = config("A"), b = config("B");
  ptune::measure::TimedRow ra =
      ptune::measure::time_row(timing(a, kind, nullptr, nullptr, true), FakeContext());
  REQUIRE(ra.side);
  const size_t started = log.events.size();
  ptune::measure::TimedRow r =
      ptune::measure::time_row(timing(b, kind, &a, ra.side.get(), true), FakeContext());
  REQUIRE(r.m);
  // Only the row's own processes started: A's were kept.
  const std::vector<std::string> starts(log.events.begin() + static_cast<std::ptrdiff_t>(started),
                                        log.events.begin() + static_cast<std::ptrdiff_t>(started) + 2);
  CHECK(starts == std::vector<std::string>{"start B0", "start B1"});
  CHECK(log.events.size() == started + 2);
  CHECK(has_note(*r.m,
                 "timed against the 2 processes of the row it is compared with, kept warm since that row"));
}

TEST_CASE("timing path: two sides that do not fit in memory together are started afresh every window",
          "[timing]") {
  Log log;
  FakeKind kind(log);
  kind.oom_beside = true;
  const ExperimentConfig a = config("A"), b = config("B");
  ptune::measure::TimedRow ra = ptune::measure::time_row(timing(a, kind), FakeContext());
  ptune::measure::RowTiming t = timing(b, kind, &a, ra.side.get());
  bool released = false;
  t.release = [&] {
    released = true;
    ra.side.reset();
  };
  ptune::measure::TimedRow r = ptune::measure::time_row(t, FakeContext());
  REQUIRE(r.m);
  CHECK(released);
  CHECK(r.restarted);
  CHECK_FALSE(r.side);
  CHECK(log.most_alive == 1);  // the row never started beside the previous side: one at a time
  CHECK(r.prev_ms.size() == r.m->repeat_ms.size());
  CHECK(r.m->ms_per_step / ptune::stats::median(r.prev_ms) == Approx(1.2).epsilon(0.02));
}

namespace {

/// A comparison of B (20% more time a step) against A in processes whose own speeds differ by
/// about 2.5% (one standard deviation) and whose windows by 0.3%: with two processes a side the
/// interval's t factor (one or two degrees of freedom) leaves it undecided however many windows it
/// times; `max_processes` bounds how far the row may grow.
ptune::measure::TimedRow spread_row(Log& log, FakeKind& kind, int64_t max_processes, ExperimentConfig& a,
                                    ExperimentConfig& b) {
  kind.effects = {1.03, 0.98, 1.01, 0.97, 1.02, 1.0, 0.99, 1.025, 0.975, 1.015, 0.985, 1.005};
  kind.wobble = 0.003;
  for (ExperimentConfig* c : {&a, &b}) {
    c->measure.processes = 2;
    c->measure.max_processes = max_processes;
    c->measure.max_s = 20;
  }
  return ptune::measure::time_row(timing(b, kind, &a, nullptr, true), FakeContext());
}

/// Windows timed by each process, by its id.
std::map<int, int> windows_by_process(const std::vector<int>& process) {
  std::map<int, int> n;
  for (int p : process) ++n[p];
  return n;
}

ptune::stats::Interval speedup(const ptune::measure::TimedRow& r) {
  return ptune::stats::speedup_interval(r.prev_ms, r.prev_process, r.m->repeat_ms, r.m->repeat_process, true,
                                        ptune::stats::kSpeedupLevel);
}

}  // namespace

TEST_CASE("timing path: a row whose processes differ more than its windows adds processes until it decides",
          "[timing]") {
  ExperimentConfig a = config("A"), b = config("B");
  {
    // Held at two processes a side: more windows do not narrow it enough.
    Log log;
    FakeKind kind(log);
    const ptune::measure::TimedRow r = spread_row(log, kind, 2, a, b);
    REQUIRE(r.m);
    CHECK(ptune::stats::verdict_of(speedup(r), {}) == ptune::stats::Verdict::kUndecided);
    CHECK_FALSE(has_note(*r.m, "processes added while timing"));
    // What deciding would need, from the spread it measured.
    bool predicted = false;
    for (const auto& n : r.m->notes)
      predicted = predicted || (n.rfind("undecided in its time: a change this small (", 0) == 0 &&
                                n.find("%) needs about ") != std::string::npos &&
                                n.find(" (measure.max_processes ") != std::string::npos);
    CHECK(predicted);
  }
  Log log;
  FakeKind kind(log);
  const ptune::measure::TimedRow r = spread_row(log, kind, 12, a, b);
  REQUIRE(r.m);
  const ptune::stats::Interval i = speedup(r);
  CHECK(ptune::stats::verdict_of(i, {}) == ptune::stats::Verdict::kSlower);
  CHECK(i.lo < 1 / 1.2);
  CHECK(i.hi > 1 / 1.2);
  // Grown on both sides alike, and said so.
  const std::map<int, int> a_windows = windows_by_process(r.prev_process),
                           b_windows = windows_by_process(r.m->repeat_process);
  CHECK(a_windows.size() > 2);
  CHECK(b_windows.size() > 2);
  CHECK(std::max(a_windows.size(), b_windows.size()) <= 12);
  bool noted = false;
  for (const auto& n : r.m->notes)
    noted = noted || (n.rfind("processes added while timing: 2 a side at the start, ", 0) == 0 &&
                      n.find(" at the end (measure.max_processes 12); one process's own speed varied by ") !=
                          std::string::npos &&
                      n.find("no more could start") == std::string::npos &&
                      n.find("fit in memory") == std::string::npos);
  CHECK(noted);
}

TEST_CASE("timing path: a process that cannot start for memory ends the growth, not the row", "[timing]") {
  ExperimentConfig a = config("A"), b = config("B");
  Log log;
  FakeKind kind(log);
  kind.oom_from_process = 3;
  const ptune::measure::TimedRow r = spread_row(log, kind, 12, a, b);
  REQUIRE(r.m);
  const std::map<int, int> b_windows = windows_by_process(r.m->repeat_process);
  CHECK(b_windows.size() == 3);
  bool noted = false;
  for (const auto& n : r.m->notes)
    noted = noted || (n.rfind("processes added while timing: 2 a side at the start, 3 at the end", 0) == 0 &&
                      n.find("; no more could start: fake: out of memory") != std::string::npos);
  CHECK(noted);
}

TEST_CASE("timing path: where no more processes fit in memory, a fresh one takes the oldest's place",
          "[timing]") {
  // Four fakes fit at once, two a side: the fifth fails to start. From then on the oldest of
  // each side ends as a fresh one starts: the processes a side grow past two, never more than
  // four alive, and every window timed counts (an ended process's too).
  ExperimentConfig a = config("A"), b = config("B");
  Log log;
  FakeKind kind(log);
  kind.fit = 4;
  const ptune::measure::TimedRow r = spread_row(log, kind, 12, a, b);
  REQUIRE(r.m);
  CHECK(log.most_alive == 4);
  const std::map<int, int> b_windows = windows_by_process(r.m->repeat_process);
  CHECK(b_windows.size() > 2);
  CHECK(r.m->repeat_ms.size() == r.prev_ms.size());
  CHECK(r.prev_process.size() == r.prev_ms.size());
  const auto n = std::to_string(b_windows.size());
  bool noted = false;
  for (const auto& note : r.m->notes)
    noted =
        noted ||
        (note.rfind("processes added while timing: 2 a side at the start, " + n + " at the end", 0) == 0 &&
         note.find("; at most 2 a side fit in memory at once (fake: out of memory), so the oldest "
                   "process of each side ended as each of the last " +
                   std::to_string(b_windows.size() - 2) + " started, what it measured kept") !=
             std::string::npos);
  CHECK(noted);
  // Its interval counts every process timed: as wide as a row of that many processes alike.
  CHECK(speedup(r).valid());
}
