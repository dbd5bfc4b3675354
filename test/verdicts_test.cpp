// Verdicts on the built binary, as a user gets them: an A/A row (its override leaves the
// configuration as it was) is not faster or slower, and within noise unless the machine was
// too noisy to tell in its time (then undecided): its 99% interval misses about one A/A row in
// 100 by design, so a miss is measured again and the second must not (aa_rows); batch 32
// against batch 2 is faster every time; two runs never call a row faster in one and slower in
// the other; with a competing busy process the rows are flagged as measured under load, and the
// A/A row is still neither faster nor slower. These tests time real training steps, so ctest
// runs them alone (RUN_SERIAL): another test beside them would be competing load.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <boost/math/distributions/students_t.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using Json = nlohmann::json;
using ptune::test::run;
using ptune::test::TempDir;

namespace {

// Five pairs before the first verdict, in 10 s a row (measure.max_s: its whole time, warm-up
// included; batch 32's pairs take about 2.5 s here beside a compiler, so that row may end at its
// budget with fewer, still far beyond 1.5x): "within noise" needs the A/A interval inside
// 1.00x +-3% (an equivalence test), which a few noisy windows cannot give (scripts/bench/verdict-sim:
// with 3 pairs and 2% noise per window, half the A/A rows end undecided; with 5 and more time, few
// do), so the A/A row may end undecided, which this test allows.
const char* kConfig = R"({
  "name": "verdicts",
  "seed": 0,
  "device": "cpu",
  "model": { "arch": "resnet18", "num_classes": 10 },
  "data": { "kind": "fake_cifar", "num_samples": 512, "image_size": 32 },
  "loader": { "batch_size": 2, "num_workers": 0 },
  "optim": { "kind": "sgd", "lr": 0.01 },
  "measure": { "warmup_steps": 2, "steps": 6, "repeats": 5, "max_s": 10 },
  "sweep": [
    { "name": "baseline" },
    { "name": "same again", "set": { "loader.batch_size": 2 } },
    { "name": "batch 32", "set": { "loader.batch_size": 32 } }
  ]
})";

/// Runs the sweep and returns its results document.
Json sweep(const TempDir& dir, const std::string& tag) {
  const std::string cfg = dir.write("verdicts.json", kConfig), out = dir.file(tag + ".json");
  const auto r = run(ptune::test::exe() + " sweep " + cfg + " --out " + out);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  return Json::parse(ptune::test::read_file(out));
}

/// A process that spins on one core until killed.
struct Busy {
  pid_t pid = -1;
  Busy() {
    pid = ::fork();
    if (pid == 0) {
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
  }
  ~Busy() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

/// One sweep of the A/A pair (see aa_rows), `max_s` seconds a row.
Json aa_sweep(const TempDir& dir, const std::string& first, const std::string& second, int max_s) {
  const std::string cfg = dir.write("aa.json", R"({
    "name": "aa", "seed": 0, "device": "cpu", "cpu_threads": 1,
    "model": { "arch": "resnet18", "num_classes": 10 },
    "data": { "kind": "fake_cifar", "num_samples": 256, "image_size": 32 },
    "loader": { "batch_size": 2, "num_workers": 0 },
    "measure": { "warmup_steps": 2, "steps": 12, "repeats": 5, "max_s": )" +
                                                   std::to_string(max_s) + R"( },
    "sweep": [ )" + first + ", " + second + R"( ]
  })");
  const auto r = run(ptune::test::exe() + " sweep " + cfg + " --format json");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const Json doc = Json::parse(r.out);
  const Json rows = doc["rows"];
  REQUIRE(rows.size() == 2);
  INFO(rows.dump(1));
  // Every figure on a row agrees with the others, and a row whose own windows ran off its printed
  // rate says so.
  for (const auto& problem : ptune::test::figure_disagreements(doc)) FAIL_CHECK(problem);
  REQUIRE(rows[1]["interleaved"] == true);
  return rows;
}

/// Whether an A/A row (two identical configurations) was called what it is not: faster or slower,
/// or undecided with 1.00x outside its 99% interval.
bool aa_missed(const Json& row) {
  const std::string verdict = row["verdict_vs_prev"].get<std::string>();
  if (verdict == "faster" || verdict == "slower") return true;
  if (!row["speedup_vs_prev_lo"].is_number()) return false;
  return row["speedup_vs_prev_lo"].get<double>() > 1.0 || row["speedup_vs_prev_hi"].get<double>() < 1.0;
}

/// Checks that the first row's windows (`first_ms`, ms/step) did not run clearly faster than the
/// same pipeline's in the next row's pairs (`pairs_ms`), a minute later: Welch's t-interval of the
/// difference of their mean logs at 99.9% reaches above 1.00x -10%. Not the verdict rule's +-1%:
/// the machine itself drifts between two periods (a noisy first minute, a quiet second: one quiet
/// run in 14 gave 1.094x [1.031, 1.161]), and the windows of one period do not measure that. What
/// this guards against is a first row timed with no neighbour, in a state no later row runs in:
/// its windows ran 1.45x to 1.73x faster (docs/statistics.md, "The first row beside a
/// companion"). The other way is no fault of the first row: the process can move to a faster,
/// fault-free state when the next row's pipeline is built (one run: 1.56x [1.39, 1.76] slower
/// first), and then the next row says so in a note, which figure_disagreements holds to its
/// windows; that case is printed (WARN).
void check_first_not_faster(const Json& first_ms, const Json& pairs_ms) {
  auto stats = [](const Json& ms) {
    std::vector<double> x;
    for (const auto& v : ms) x.push_back(std::log(v.get<double>()));
    const double mean = std::accumulate(x.begin(), x.end(), 0.0) / x.size();
    double ss = 0;
    for (double v : x) ss += (v - mean) * (v - mean);
    return std::make_tuple(mean, ss / (x.size() - 1) / x.size(), x.size() - 1.0);
  };
  REQUIRE(first_ms.size() >= 2);
  REQUIRE(pairs_ms.size() >= 2);
  const auto [ma, va, dfa] = stats(first_ms);
  const auto [mb, vb, dfb] = stats(pairs_ms);
  const double df = (va + vb) * (va + vb) / (va * va / dfa + vb * vb / dfb);
  const double h =
      boost::math::quantile(boost::math::students_t_distribution<double>(df), 0.9995) * std::sqrt(va + vb);
  const double d = ma - mb;
  std::ostringstream what;
  what << "the same pipeline's windows, ms a step: " << first_ms << " in its own row against " << pairs_ms
       << " in the next row's pairs: ratio " << std::exp(d) << " [" << std::exp(d - h) << ", "
       << std::exp(d + h) << "]";
  INFO(what.str());
  CHECK(d + h >= -std::log(1.1));
  if (d - h > std::log(1.1)) WARN("the process ran faster after the first row: " << what.str());
}

/// The A/A pair of ResNet-18 rows (32 px, batch 2, one thread; windows of 12 steps, about 0.9 s,
/// `max_s` seconds a row), its rows `first` and `second` given as sweep rows (JSON): the results' rows, after
/// the checks every A/A row passes (interleaved; never faster or slower, 1.00x inside).
///
/// An interval at 99% leaves 1.00x out of about 1 A/A row in 100 by design, and the verdict rule
/// calls 0.4-1.1% of A/A rows faster or slower (docs/statistics.md, "How often a verdict is
/// wrong"): a test that failed on one such row would fail a correct ptune about once in 100 runs
/// a row. So a row that misses is measured again, in a fresh sweep, and that one must not: a
/// correct ptune fails this about once in 10,000, while a bias larger than the noise misses both
/// times. The first miss is printed (WARN).
Json aa_rows(const TempDir& dir, const std::string& first, const std::string& second, int max_s) {
  for (int attempt = 0;; ++attempt) {
    Json rows = aa_sweep(dir, first, second, max_s);
    if (!aa_missed(rows[1]) || attempt == 1) {
      INFO(rows.dump(1));
      const std::string verdict = rows[1]["verdict_vs_prev"].get<std::string>();
      CHECK(verdict != "faster");
      CHECK(verdict != "slower");
      return rows;
    }
    WARN("the A/A row missed once (measured again): "
         << rows[1]["speedup_vs_prev"] << " [" << rows[1]["speedup_vs_prev_lo"] << ", "
         << rows[1]["speedup_vs_prev_hi"] << "] " << rows[1]["verdict_vs_prev"]);
  }
}

}  // namespace

TEST_CASE("A/A is not called faster or slower in two runs, a large change is faster, two runs agree",
          "[verdicts]") {
  TempDir dir;
  std::vector<Json> runs;
  for (int k = 0; k < 2; ++k) runs.push_back(sweep(dir, "run" + std::to_string(k)));
  int missed = 0;
  for (const auto& res : runs) {
    const auto& rows = res["rows"];
    REQUIRE(rows.size() == 3);
    INFO(rows.dump(1));
    // Row 1 against row 0, interleaved: the same configuration twice.
    CHECK(rows[1]["interleaved"] == true);
    CHECK(rows[1]["compared_with"] == 0);
    // Never faster or slower: the interval reaches into 1.00x +-1% (the noise floor). Within noise
    // when it is also inside +-3%; a burst of other work on the machine can leave it wider than
    // that in the time the row has, and then the honest verdict is undecided. About 1 A/A row in
    // 100 misses by design (aa_rows says why): one of the two runs may, not both.
    const std::string aa = rows[1]["verdict_vs_prev"].get<std::string>();
    if (aa_missed(rows[1]) && ++missed == 1) {
      WARN("the A/A row of one run missed: " << rows[1]["speedup_vs_prev"] << " " << aa);
    } else {
      CHECK((aa == "within noise" || aa == "undecided"));
      CHECK(rows[1]["speedup_vs_prev_lo"].get<double>() <= 1.01);
      CHECK(rows[1]["speedup_vs_prev_hi"].get<double>() >= 1.0 / 1.01);
      if (aa == "within noise") {
        CHECK(rows[1]["speedup_vs_prev_lo"].get<double>() >= 1.0 / 1.03);
        CHECK(rows[1]["speedup_vs_prev_hi"].get<double>() <= 1.03);
      }
    }
    // Batch 32 against batch 2: many times the samples/s.
    CHECK(rows[2]["verdict_vs_prev"] == "faster");
    CHECK(rows[2]["verdict_vs_base"] == "faster");
    CHECK(rows[2]["speedup_vs_prev_lo"].get<double>() > 1.5);
    // Every row has its windows and its 95% interval.
    for (const auto& r : rows) {
      CHECK(r["windows"].get<int>() >= 3);
      CHECK(r["samples_per_s_lo"].get<double>() <= r["samples_per_s"].get<double>());
      CHECK(r["samples_per_s_hi"].get<double>() >= r["samples_per_s"].get<double>());
    }
  }
  // Never faster in one run and slower in the other.
  for (size_t i = 0; i < 3; ++i)
    for (const char* key : {"verdict_vs_prev", "verdict_vs_base"}) {
      const std::string a =
          runs[0]["rows"][i][key].is_string() ? runs[0]["rows"][i][key].get<std::string>() : "";
      const std::string b =
          runs[1]["rows"][i][key].is_string() ? runs[1]["rows"][i][key].get<std::string>() : "";
      INFO("row " << i << " " << key << ": " << a << " / " << b);
      CHECK_FALSE((a == "faster" && b == "slower"));
      CHECK_FALSE((a == "slower" && b == "faster"));
    }
}

TEST_CASE("competing load is flagged in every format, and A/A is still not called faster or slower",
          "[verdicts]") {
  TempDir dir;
  const std::string cfg = dir.write("verdicts.json", kConfig);
  ptune::test::RunResult r;
  {
    Busy busy;
    // Under load every row runs to its budget (its interval read once, at the end): 8 s a row.
    // A cache of its own: the peak is calibrated here, under the load, as on a first run.
    r = run("PTUNE_CACHE=" + dir.file("cache") + " " + ptune::test::exe() + " sweep " + cfg +
            " --set measure.max_s=8 --format json --out " + dir.file("load.csv"));
  }
  INFO(r.err);
  REQUIRE(r.code == 0);
  // One warning line on stderr for a row measured under load.
  CHECK(r.err.find("measured under competing load") != std::string::npos);
  const Json res = Json::parse(r.out);
  const auto& rows = res["rows"];
  REQUIRE(rows.size() == 3);
  INFO(rows.dump(1));
  for (const auto& row : rows) {
    CHECK(row["under_load"] == true);
    CHECK(row["other_cpu_cores"].get<double>() >= 0.2);
    bool noted = false;
    for (const auto& n : row["notes"])
      noted = noted || n.get<std::string>().rfind("measured under competing load", 0) == 0;
    CHECK(noted);
    // The peak calibrated under that load is no ceiling: FLOP/s, but no % of peak.
    CHECK(row["flops_per_s"].is_number());
    CHECK(row["peak_under_load"] == true);
    CHECK(row["pct_of_peak"].is_null());
    CHECK(row["peak_source"].get<std::string>().find(
              "measured under competing load (other processes used ") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("cache") + "/peak"));
  // The A/A row is not called faster or slower: under load its interval is read at 99.9%, once,
  // when its budget is spent (a row on a quiet machine is read at 99% after every pair).
  CHECK(rows[1]["verdict_vs_prev"] != "faster");
  CHECK(rows[1]["verdict_vs_prev"] != "slower");
  // The CSV written beside it, and the HTML report of the JSON, say so too.
  const std::string csv = ptune::test::read_file(dir.file("load.csv"));
  CHECK(csv.find(",under_load,") != std::string::npos);
  CHECK(csv.find(",true,") != std::string::npos);
  const std::string json = dir.write("load.json", r.out);
  REQUIRE(run(ptune::test::exe() + " report " + json + " -o " + dir.file("load.html")).code == 0);
  const std::string html = ptune::test::read_file(dir.file("load.html"));
  CHECK(html.find("<th class=\"n\">load</th>") != std::string::npos);
  CHECK(html.find(" cores</td>") != std::string::npos);
  CHECK(html.find("no ceiling, so % peak is left out") != std::string::npos);
}

TEST_CASE(
    "an A/A row of a tiny config is within noise or undecided with 1.00x inside on a quiet machine, its "
    "start-up left out",
    "[verdicts]") {
  // Two identical rows (ResNet-18, 32 px, batch 2, one thread; windows of 12 steps, about 0.9 s,
  // and 20 s a row, about 11 pairs: a row ends at the first look that shows within noise, often
  // after the 5 pairs, and what this test asserts, 1.00x inside the interval, needs no narrow
  // one). The second row's pipeline is
  // fresh: its first windows may still run slow, and would then be left out (noted), so that
  // the pairs left compare two warm pipelines.
  TempDir dir;
  const Json rows =
      aa_rows(dir, R"({ "name": "A" })", R"({ "name": "A again", "set": { "loader.batch_size": 2 } })", 20);
  INFO(rows.dump(1));
  const auto& aa = rows[1];
  const std::string verdict = aa["verdict_vs_prev"].get<std::string>();
  // On a quiet machine within noise, or undecided with 1.00x inside: with glibc's default malloc
  // (a default process) each step faults about 13,700 pages in, and the kernel's time for that
  // leaves the 99% interval near +-5% after 16 pairs, wider than the +-3% within noise needs
  // (docs/statistics.md, "The first pipeline of a process"). Two child processes with tcmalloc
  // (the next test) reach within noise.
  if (aa["under_load"] == false && verdict != "within noise") {
    CHECK(verdict == "undecided");
    CHECK(aa["speedup_vs_prev_lo"].get<double>() <= 1.0);
    CHECK(aa["speedup_vs_prev_hi"].get<double>() >= 1.0);
  }
  // A note that left windows out names how many, and the windows kept are what the figures use.
  for (const auto& n : aa["notes"]) {
    const std::string note = n.get<std::string>();
    if (note.rfind("warm-up: the first ", 0) == 0) CHECK(note.find(" pair") != std::string::npos);
  }
  CHECK(aa["windows"].get<int>() == static_cast<int>(aa["prev_ms_per_step"].size()));
  // Row 0's pipeline timed twice: as the first row (beside the primer's companion) and in row 1's
  // pairs (beside row 1's pipeline), both times beside one other live pipeline, so in one state
  // of the process unless building row 1 moved it (check_first_not_faster says which way that
  // goes). Timed with no neighbour, under glibc's default malloc the first row's windows ran
  // 1.45x to 1.73x faster than the same pipeline's in the pairs.
  if (rows[0]["under_load"] == false && aa["under_load"] == false)
    check_first_not_faster(rows[0]["repeat_ms_per_step"], aa["prev_ms_per_step"]);
}

TEST_CASE("an A/A row in child processes with the same process settings is not called faster or slower",
          "[verdicts]") {
  // The same settings (tcmalloc preloaded) on both rows: each row runs in three fresh processes
  // (measure.processes), compared with the previous row's three, kept warm since their own row,
  // and timed in turn (docs/statistics.md). Two processes started
  // alike ran up to 8% apart, each the same all along, so the interval counts the spread
  // between processes: a single pair of processes called this A/A pair faster, 1.077x
  // [1.051, 1.104]. 15 s a row: what this test checks (the verdict is never faster or slower,
  // the interval is the one over processes) needs no narrow interval, and an interval over three
  // processes a side narrows little with more windows of the same processes.
  TempDir dir;
  const Json rows =
      aa_rows(dir, R"({ "name": "tcmalloc", "set": { "process.allocator": "tcmalloc" } })",
              R"({ "name": "tcmalloc again", "set": { "process.allocator": "tcmalloc" } })", 15);
  INFO(rows.dump(1));
  const auto& aa = rows[1];
  const std::string verdict = aa["verdict_vs_prev"].get<std::string>();
  CHECK((verdict == "within noise" || verdict == "undecided"));
  // The printed interval is the one over the processes' means, from the windows the row keeps.
  std::vector<double> a, b;
  std::vector<int> pa, pb;
  for (const auto& v : aa["prev_ms_per_step"]) a.push_back(v.get<double>());
  for (const auto& v : aa["repeat_ms_per_step"]) b.push_back(v.get<double>());
  for (const auto& v : aa["prev_process"]) pa.push_back(v.get<int>());
  for (const auto& v : aa["repeat_process"]) pb.push_back(v.get<int>());
  REQUIRE(pa.size() == a.size());
  REQUIRE(pb.size() == b.size());
  CHECK(std::set<int>(pa.begin(), pa.end()) == std::set<int>{0, 1, 2});
  CHECK(std::set<int>(pb.begin(), pb.end()) == std::set<int>{0, 1, 2});
  // Recomputed here: the pairs' mean log-ratio, its variance the spread of the mean ratio by A's
  // process over 3 plus that by B's process over 3, at 99% with Welch-Satterthwaite's df.
  std::map<int, std::vector<double>> by_a, by_b;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::log(a[i] / b[i]);
    sum += d;
    by_a[pa[i]].push_back(d);
    by_b[pb[i]].push_back(d);
  }
  auto var_of_means = [](const std::map<int, std::vector<double>>& g) {
    std::vector<double> m;
    for (const auto& [p, v] : g) m.push_back(std::accumulate(v.begin(), v.end(), 0.0) / v.size());
    const double mean = std::accumulate(m.begin(), m.end(), 0.0) / m.size();
    double ss = 0;
    for (double x : m) ss += (x - mean) * (x - mean);
    return ss / (m.size() - 1) / m.size();
  };
  const double va = var_of_means(by_a), vb = var_of_means(by_b), mean = sum / a.size();
  const double df = (va + vb) * (va + vb) / (va * va / 2 + vb * vb / 2);
  const double h =
      boost::math::quantile(boost::math::students_t_distribution<double>(df), 0.995) * std::sqrt(va + vb);
  // Within the rounding of the windows to 0.001 ms and of the bounds to 4 digits.
  CHECK(aa["speedup_vs_prev"].get<double>() == Approx(std::exp(mean)).epsilon(2e-4));
  CHECK(aa["speedup_vs_prev_lo"].get<double>() == Approx(std::exp(mean - h)).epsilon(2e-4));
  CHECK(aa["speedup_vs_prev_hi"].get<double>() == Approx(std::exp(mean + h)).epsilon(2e-4));
  bool against = false;
  for (const auto& n : aa["notes"])
    against =
        against ||
        n.get<std::string>().rfind(
            "timed against the 3 processes of the row it is compared with, kept warm since that row", 0) == 0;
  CHECK(against);
  // Both rows ran in child processes with tcmalloc mapped.
  for (const auto& row : rows) {
    bool child = false;
    for (const auto& n : row["notes"]) {
      const std::string note = n.get<std::string>();
      child = child || (note.rfind("this row's child processes: 3 processes started alike", 0) == 0 &&
                        note.find("libtcmalloc") != std::string::npos);
    }
    CHECK(child);
  }
}
