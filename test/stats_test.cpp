// The statistics behind every figure: intervals against values computed independently (SciPy's
// Student t and Welch test, noted beside each), the bootstrap on a fixed seed, the sum of log terms, the
// verdict rule and the outlier rule; then the diagnosis that skips what the sweep measured as useless.

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "config/config.hpp"
#include "measure/diagnosis.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/process_group.hpp"
#include "measure/schedule.hpp"
#include "measure/side.hpp"
#include "core/stats.hpp"

using namespace ptune::measure;
using namespace ptune::stats;

TEST_CASE("t quantiles are Student's", "[stats]") {
  CHECK(t_quantile(0.975, 4) == Approx(2.7764451051977934).epsilon(1e-9));  // scipy.stats.t.ppf
  CHECK(t_quantile(0.995, 10) == Approx(3.16927267261695).epsilon(1e-9));
  CHECK(t_quantile(0.995, 2.5) == Approx(7.163728138948783).epsilon(1e-9));  // fractional df (Welch)
  CHECK_THROWS_AS(t_quantile(1.0, 3), std::domain_error);
  CHECK_THROWS_AS(t_quantile(0.9, 0), std::domain_error);
}

TEST_CASE("a row's interval is the t-interval of its windows' mean log", "[stats]") {
  // exp(mean +- t(0.975, 4) * sd / sqrt(5)) of ln 10..14: SciPy gives these.
  const Interval i = log_mean_interval({10, 11, 12, 13, 14}, 0.95);
  CHECK(i.point == Approx(11.915960744952384).epsilon(1e-12));
  CHECK(i.lo == Approx(10.102294653149556).epsilon(1e-12));
  CHECK(i.hi == Approx(14.05523451357444).epsilon(1e-12));
  CHECK(i.n == 5);
  CHECK(i.level == 0.95);
  CHECK(i.valid());
  CHECK(i.half_width_pct() == Approx(100 * (std::sqrt(i.hi / i.lo) - 1)));
  // One window: a point, no interval; non-positive values are ignored.
  const Interval one = log_mean_interval({5.0, 0.0, -1.0});
  CHECK(one.point == Approx(5.0));
  CHECK_FALSE(one.valid());
  CHECK(one.half_width_pct() == 0);
}

TEST_CASE("a paired speedup is the t-interval of the windows' log-ratios", "[stats]") {
  // B takes 8.1..8.6 ms where A takes 9.8..10.5: A/B per pair, t(0.995, 3); SciPy's values.
  const Interval s = paired_speedup({10.0, 10.5, 9.8, 10.2}, {8.1, 8.6, 7.9, 8.0}, 0.99);
  CHECK(s.point == Approx(1.2425925616458746).epsilon(1e-12));
  CHECK(s.lo == Approx(1.177542418042907).epsilon(1e-12));
  CHECK(s.hi == Approx(1.3112362243594315).epsilon(1e-12));
  CHECK(s.n == 4);
  // Identical sides: exactly 1, however noisy the windows.
  const Interval same = paired_speedup({10, 30, 20}, {10, 30, 20});
  CHECK(same.point == Approx(1.0));
  CHECK(same.lo == Approx(1.0));
  CHECK(same.hi == Approx(1.0));
  CHECK_THROWS_AS(paired_speedup({1, 2}, {1}), std::invalid_argument);
}

TEST_CASE("windows in several processes compare by their process means, a process a draw", "[stats]") {
  // Three processes a side, two windows each, measured apart: the means of each process's logs
  // compare by Welch's interval (SciPy 1.17: ttest_ind(equal_var=False).confidence_interval(0.99)
  // on the process means; df 3.61). The 13% gain is undecided: the processes of A spread 8%.
  const std::vector<double> a = {10, 11, 10.5, 10.2, 10.8, 10.5}, b = {9, 9.6, 9.3, 9.1, 9.5, 9.2};
  const std::vector<int> turn = {0, 1, 2, 0, 1, 2}, shifted = {0, 1, 2, 1, 2, 0};
  const Interval s = speedup_interval(a, turn, b, turn, false, 0.99);
  CHECK(s.point == Approx(1.1307700118384207).epsilon(1e-12));
  CHECK(s.lo == Approx(0.9889549512840324).epsilon(1e-12));
  CHECK(s.hi == Approx(1.2929211972829595).epsilon(1e-12));
  CHECK(s.n == 12);
  // The windows' order within a process does not matter, nor which ids name the processes.
  CHECK(speedup_interval({10, 10.2, 11, 10.8, 10.5, 10.5}, {7, 7, 3, 3, 5, 5}, b, turn, false, 0.99).lo ==
        Approx(s.lo).epsilon(1e-12));
  // The same windows timed in pairs, B's processes in shifted turns: the mean log-ratio, its
  // variance the spread of the pairs' mean ratio by A's process over 3 plus that by B's process
  // over 3, df by Welch-Satterthwaite (2.37; numpy: exp(mean(d) +- t.ppf(0.995, df) * se)).
  const Interval p = speedup_interval(a, turn, b, shifted, true, 0.99);
  CHECK(p.point == Approx(1.130770011838421).epsilon(1e-12));
  CHECK(p.lo == Approx(1.0709975843646236).epsilon(1e-12));
  CHECK(p.hi == Approx(1.193878341407861).epsilon(1e-12));
  // A side's rate: the 95% t-interval of its process means (SciPy: t.interval(0.95, 2)), here
  // samples/s of 4 samples a step.
  const LogTerm rate = rate_term(a, 4000.0, turn);
  const Interval r = sum_interval({rate}, 0.95);
  CHECK(r.point == Approx(381.14841921330014).epsilon(1e-12));
  CHECK(r.lo == Approx(346.71188654025445).epsilon(1e-12));
  CHECK(r.hi == Approx(419.00529837165175).epsilon(1e-12));
  CHECK(mean_interval(a, turn, 0.95).point == Approx(4000.0 / r.point).epsilon(1e-12));
  // A side in one process beside one in three: one more draw of a process, with the other side's
  // spread of a process mean and its degrees of freedom (Welch-Satterthwaite df 3.2).
  const Interval one = speedup_interval({10, 10.2, 10.1}, {}, b, turn, false, 0.99);
  CHECK(one.point == Approx(1.0882172248354058).epsilon(1e-12));
  CHECK(one.lo == Approx(0.9166684140263832).epsilon(1e-12));
  CHECK(one.hi == Approx(1.291870332072322).epsilon(1e-12));
  // One process a side: no spread between processes is known, so no interval.
  const Interval single = speedup_interval(a, {0, 0, 0, 0, 0, 0}, b, {0, 0, 0, 0, 0, 0}, true, 0.99);
  CHECK_FALSE(single.valid());
  CHECK_FALSE(speedup_interval(a, {0, 0, 0, 0, 0, 0}, b, {0, 0, 0, 0, 0, 0}, false, 0.99).valid());
  CHECK(verdict_of(single, NoiseRule{}) == Verdict::kUndecided);
  // A process list of another length is a caller's error.
  CHECK_THROWS_AS(speedup_interval(a, {0, 1}, b, turn, true, 0.99), std::invalid_argument);
  CHECK_THROWS_AS(process_term(a, {0, 1}), std::invalid_argument);
}

TEST_CASE("two runs' windows compare by Welch's interval", "[stats]") {
  // scipy.stats.ttest_ind(equal_var=False) on the logs: df 2.8435, the interval at 99%.
  const Interval w = welch_speedup({10.0, 10.5, 9.8, 10.2, 10.1}, {8.1, 8.6, 7.9}, 0.99);
  CHECK(w.point == Approx(1.2346121035176676).epsilon(1e-12));
  CHECK(w.lo == Approx(1.0409470014745237).epsilon(1e-9));
  CHECK(w.hi == Approx(1.4643080233606165).epsilon(1e-9));
  // Too few windows together: the ratio only.
  const Interval two = welch_speedup({10.0}, {5.0});
  CHECK(two.point == Approx(2.0));
  CHECK_FALSE(two.valid());
}

TEST_CASE("the bootstrap is deterministic on a fixed seed and agrees with theory", "[stats]") {
  std::vector<double> v;
  for (int k = 1; k <= 20; ++k) v.push_back(k);
  const Interval a = bootstrap_mean(v, 0.95, 4000, 7), b = bootstrap_mean(v, 0.95, 4000, 7);
  CHECK(a.lo == b.lo);
  CHECK(a.hi == b.hi);
  CHECK(a.point == Approx(10.5));
  // The mean of 1..20 has standard error 5.916 / sqrt(20) = 1.323: a 95% interval of about
  // +-2.5 (the percentile bootstrap runs a little narrower than the t-interval's +-2.77).
  CHECK(a.lo == Approx(10.5 - 2.5).margin(0.35));
  CHECK(a.hi == Approx(10.5 + 2.5).margin(0.35));
  const Interval c = bootstrap_mean(v, 0.95, 4000, 8);
  CHECK((c.lo != a.lo || c.hi != a.hi));  // another seed, another draw
}

TEST_CASE("a chain of speedups multiplies, its interval the t-interval of the summed log terms", "[stats]") {
  // Two paired links as log-ratios (ln a - ln b per pair).
  const std::vector<double> l1 = {0.10, 0.12, 0.08, 0.11}, l2 = {-0.02, 0.01, 0.00, -0.01};
  auto ms = [](const std::vector<double>& logs) {  // pairs (a, b) with ln a - ln b = each value
    std::vector<double> a, b;
    for (double v : logs) a.push_back(100 * std::exp(v)), b.push_back(100);
    return std::make_pair(a, b);
  };
  const auto [a1, b1] = ms(l1);
  const auto [a2, b2] = ms(l2);
  std::vector<LogTerm> terms = paired_terms(a1, b1);
  const auto t2 = paired_terms(a2, b2);
  terms.insert(terms.end(), t2.begin(), t2.end());
  const Interval chain = sum_interval(terms, 0.99);
  // By hand: means 0.1025 and -0.005; variances of the means 2.9167e-4 / 4 and 1.6667e-4 / 4;
  // Welch-Satterthwaite df = (v1 + v2)^2 / (v1^2 / 3 + v2^2 / 3) = 5.585.
  const double v1 = 8.75e-4 / 3 / 4, v2 = 5e-4 / 3 / 4;
  const double df = (v1 + v2) * (v1 + v2) / (v1 * v1 / 3 + v2 * v2 / 3);
  CHECK(df == Approx(5.585).epsilon(1e-3));
  const double h = t_quantile(0.995, df) * std::sqrt(v1 + v2);
  CHECK(chain.point == Approx(std::exp(0.1025 - 0.005)));
  CHECK(chain.lo == Approx(std::exp(0.0975 - h)));
  CHECK(chain.hi == Approx(std::exp(0.0975 + h)));
  // A chain of one link is the link itself, paired or apart.
  const Interval one = sum_interval(paired_terms(a1, b1), 0.99), direct = paired_speedup(a1, b1, 0.99);
  CHECK(one.lo == direct.lo);
  CHECK(one.hi == direct.hi);
  const std::vector<double> x = {100, 104, 98}, y = {80, 83, 79, 81};
  const Interval w = sum_interval(welch_terms(x, y), 0.99), wd = welch_speedup(x, y, 0.99);
  CHECK(w.lo == Approx(wd.lo));
  CHECK(w.hi == Approx(wd.hi));
  // Constant links: the product exactly; a term without spread of its own: point only.
  CHECK(sum_interval({LogTerm{std::log(2.0), 0, 3}, LogTerm{std::log(1.5), 0, 3}}, 0.99).hi == Approx(3.0));
  CHECK_FALSE(sum_interval({LogTerm{0.1, 0, 0}, LogTerm{0.2, 1e-4, 3}}, 0.99).valid());
}

TEST_CASE("verdicts read the speedup's interval against the noise rule", "[stats]") {
  const NoiseRule rule;  // 3% target, 1% floor
  auto iv = [](double lo, double hi) { return Interval{std::sqrt(lo * hi), lo, hi, 10, 0.99, {}}; };
  CHECK(verdict_of(iv(1.02, 1.06), rule) == Verdict::kFaster);
  CHECK(verdict_of(iv(1.011, 1.30), rule) == Verdict::kFaster);  // wide, but clear of +1%
  CHECK(verdict_of(iv(0.90, 0.98), rule) == Verdict::kSlower);
  CHECK(verdict_of(iv(0.99, 1.02), rule) == Verdict::kWithinNoise);
  CHECK(verdict_of(iv(1.005, 1.03), rule) == Verdict::kWithinNoise);  // above 1, but not by the floor
  CHECK(verdict_of(iv(1.009, 1.04), rule) == Verdict::kUndecided);    // narrow, but may hide a 4% gain
  CHECK(verdict_of(iv(0.965, 0.995), rule) == Verdict::kUndecided);
  CHECK(verdict_of(iv(0.95, 1.08), rule) == Verdict::kUndecided);                     // too wide to say
  CHECK(verdict_of(Interval{1.5, 1.5, 1.5, 1, 0, {}}, rule) == Verdict::kUndecided);  // no interval
  CHECK(std::string(verdict_name(Verdict::kWithinNoise)) == "within noise");
  CHECK(std::string(verdict_name(Verdict::kUndecided)) == "undecided");
}

TEST_CASE("the pairs a spread needs for a verdict are the fewest whose t half-width fits", "[stats]") {
  // References: the smallest n with t(0.995, n - 1) * sd / sqrt(n) within the room the rule
  // leaves (scipy.stats.t.ppf, searched n = 2, 3, ...).
  const NoiseRule rule;                                 // 3% target, 1% floor
  CHECK(pairs_to_decide(0.0, 0.05, 0.99, rule) == 23);  // A/A: within +-3%
  CHECK(pairs_to_decide(0.0, 0.02, 0.99, rule) == 7);
  CHECK(pairs_to_decide(0.0, 0.01, 0.99, rule) == 4);
  CHECK(pairs_to_decide(std::log(1.10), 0.05, 0.99, rule) == 6);      // faster: beyond +1%
  CHECK(pairs_to_decide(std::log(1.02), 0.05, 0.99, rule) == 175);    // between the lines
  CHECK(pairs_to_decide(-std::log(1.02), 0.05, 0.99, rule) == 175);   // symmetric
  CHECK(pairs_to_decide(std::log(1.0198), 0.05, 0.99, rule) == 172);  // the least room there is
  CHECK(pairs_to_decide(0.0, 1.0, 0.99, rule) == 7598);
  CHECK(pairs_to_decide(0.0, 10.0, 0.99, rule) == 0);  // past 100,000 pairs
  CHECK(pairs_to_decide(0.0, -1.0, 0.99, rule) == 0);
}

TEST_CASE("a row left undecided by its budget says how many pairs its spread would need", "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // Eight pairs whose log-ratios are +-0.05 in turn: mean 0, one pair's standard deviation
  // 0.05 * sqrt(8 / 7) (5.5%); 26 pairs give a 99% half-width within ln 1.03 (scipy).
  Comparison c;
  for (int i = 0; i < 8; ++i) {
    c.a_ms.push_back(100.0 * std::exp(i % 2 ? 0.05 : -0.05));
    c.b_ms.push_back(100.0);
  }
  c.speedup = paired_speedup(c.a_ms, c.b_ms, kSpeedupLevel);
  c.verdict = verdict_of(c.speedup, NoiseRule{});
  REQUIRE(c.verdict == Verdict::kUndecided);
  c.stop = StopRule::kBudget;
  c.pair_ms = 1500;
  c.transient = 1;
  const WindowPlan plan;
  CHECK(undecided_note(c, plan) ==
        "undecided in its time: one pair's speedup varied by 5.5% (one standard deviation) over 8 pairs; at "
        "that spread about 26 pairs, about 41 s of timing (measure.max_s), would decide it");
  // Not where it was decided, stopped by something else, or measured under load.
  Comparison decided = c;
  decided.verdict = Verdict::kWithinNoise;
  CHECK(undecided_note(decided, plan).empty());
  Comparison max_pairs = c;
  max_pairs.stop = StopRule::kMaxPairs;
  CHECK(undecided_note(max_pairs, plan).empty());  // in one process: more time is not what it needs
  Comparison loaded = c;
  loaded.under_load = true;
  CHECK(undecided_note(loaded, plan).empty());
  // Sides in two processes each, whose speeds differ by process: the note says how many processes
  // a side would decide it, under load too (the load does not explain a process's own speed),
  // and the time they would take at this row's costs (1.5 s a pair, 4 s to start a process of
  // each side).
  Comparison procs;
  for (int i = 0; i < 8; ++i) {
    procs.a_ms.push_back(i % 2 ? 104.0 : 96.0), procs.a_process.push_back(i % 2);
    procs.b_ms.push_back(i % 2 ? 97.0 : 103.0), procs.b_process.push_back(i % 2);
  }
  procs.speedup =
      speedup_interval(procs.a_ms, procs.a_process, procs.b_ms, procs.b_process, true, kSpeedupLevel);
  procs.verdict = Verdict::kUndecided;
  procs.stop = StopRule::kBudget;
  procs.under_load = true;
  procs.pair_ms = 1500;
  procs.process_start_ms = 4000;
  // 0.07 either way by process, nothing left by window: the process-level variance 0.0098 over k
  // a side, at 99% within +-3% (ln 1.03 = 0.0296) needs k = 155; past the key's most.
  CHECK(undecided_note(procs, plan) ==
        "undecided in its time: a change this small (0.0%) would need more than 64 processes a side "
        "(measure.max_processes' most) to decide here; one process's own speed varied by 10.4% and one "
        "pair's by "
        "0.0% (one standard deviation), 2 processes a side");
  // Half the spread (0.035 either way): a quarter of the variance; 2.64 (t at 99% on 78 degrees
  // of freedom) x sqrt(0.00245 x 2 / 40) = 0.0292 fits: 40 processes a side, 38 more starts (152 s)
  // and 72 more pairs (two a process: 108 s).
  for (size_t i = 0; i < procs.a_ms.size(); ++i) {
    procs.a_ms[i] = i % 2 ? 102.0 : 98.0;
    procs.b_ms[i] = i % 2 ? 98.5 : 101.5;
  }
  procs.speedup =
      speedup_interval(procs.a_ms, procs.a_process, procs.b_ms, procs.b_process, true, kSpeedupLevel);
  CHECK(
      undecided_note(procs, plan) ==
      "undecided in its time: a change this small (0.0%) needs about 40 processes a side here, about 5 min "
      "in all (measure.max_processes 40, measure.max_s 261); one process's own speed varied by 5.1% and one "
      "pair's by 0.0% (one standard deviation), 2 processes a side");
}

TEST_CASE("outliers are far from the median by the MAD rule and by 5%", "[stats]") {
  CHECK(outliers({10, 10.1, 9.9, 10.05, 30}) == std::vector<size_t>{4});
  CHECK(outliers({10, 10.1, 9.9, 10.05}).empty());           // too few to tell
  CHECK(outliers({100, 100.1, 99.9, 100.05, 102}).empty());  // far in MADs, but within 5%
  // The row's note names them, once, however often its windows are set.
  Measurement m;
  m.batch_size = 8;
  set_windows(m, {10, 10.1, 9.9, 10.05, 30}, 1);
  CHECK(m.notes == std::vector<std::string>{"1 of 5 windows was an outlier (window 5, far from the median): "
                                            "something else may have run then; it is kept"});
  set_windows(m, {30, 10, 10.1, 9.9, 10.05, 10, 31}, 1);
  CHECK(m.notes ==
        std::vector<std::string>{"2 of 7 windows were outliers (windows 1, 7, far from the median): "
                                 "something else may have run then; they are kept"});
  // Many: the first five, and how many more.
  std::vector<double> many(20, 10.0);
  for (size_t i : {1, 3, 4, 8, 9, 12, 15}) many[i] = 30;
  set_windows(m, many, 1);
  CHECK(m.notes ==
        std::vector<std::string>{"7 of 20 windows were outliers (windows 2, 4, 5, 9, 10 and 2 more, far "
                                 "from the median): something else may have run then; they are kept"});
}

TEST_CASE("speedups between measurements compare samples/s, not ms per step", "[stats]") {
  Measurement a, b;
  a.batch_size = 16, b.batch_size = 32;
  a.repeat_ms = {100, 101, 99}, b.repeat_ms = {100, 99, 101};  // twice the samples in the same time
  a.ms_per_step = b.ms_per_step = 100;
  a.samples_per_s = 160, b.samples_per_s = 320;
  const Interval s = speedup_between(a, b);
  CHECK(s.point == Approx(2.0).epsilon(1e-3));
  CHECK(verdict_of(s, NoiseRule{}) == Verdict::kFaster);
}

TEST_CASE("the diagnosis skips a move the sweep measured as within noise or slower", "[stats]") {
  ptune::config::ExperimentConfig cfg;
  cfg.device = "cpu";
  Measurement m;
  m.split = Measurement::StepSplit{0, 0, 99};
  // Native bf16 assumed: the first move of a compute-bound fp32 row is optim.amp.
  CHECK(
      diagnose(m, cfg, {}, {}, true) ==
      "compute-bound (99% in forward/backward/update) on fp32: optim.amp bf16 with model.channels_last (this "
      "CPU's native bf16 pays off with channels_last tensors and enough work per call; at small images or "
      "batches bf16 can be slower than fp32 (this row: 224x224, batch 32): measure it)");
  const std::vector<Tried> amp_noise = {{"optim.amp", "bf16", 7, "bf16 autocast", "within noise", 1.01}};
  CHECK(diagnose(m, cfg, amp_noise, {}, true) ==
        "compute-bound (99% in forward/backward/update) on fp32: optim.amp measured within noise here (row 7 "
        "'bf16 autocast', 1.01x); try model.channels_last");
  // A trial of ptune tune is named as such (the pair candidate sets both keys).
  const std::vector<Tried> pair_slower = {
      {"optim.amp", "bf16", 9, "AMP bf16 with channels_last", "slower", 0.92, true},
      {"model.channels_last", true, 9, "AMP bf16 with channels_last", "slower", 0.92, true}};
  CHECK(diagnose(m, cfg, pair_slower, {}, true) ==
        "compute-bound (99% in forward/backward/update) on fp32: optim.amp measured slower here (trial 'AMP "
        "bf16 "
        "with channels_last', 0.92x); model.channels_last measured slower here (trial 'AMP bf16 with "
        "channels_last', 0.92x)");
  // Faster or undecided is no reason to skip it.
  CHECK(diagnose(m, cfg, {{"optim.amp", "bf16", 7, "bf16 autocast", "undecided", 1.2}}, {}, true)
            .find("on fp32: optim.amp bf16 with model.channels_last (") != std::string::npos);
  // Both moves measured useless: both named, no advice left.
  const std::vector<Tried> both = {{"optim.amp", "bf16", 7, "bf16 autocast", "within noise", 1.01},
                                   {"model.channels_last", true, 8, "channels_last", "slower", 0.93}};
  CHECK(diagnose(m, cfg, both, {}, true) ==
        "compute-bound (99% in forward/backward/update) on fp32: optim.amp measured within noise here (row 7 "
        "'bf16 autocast', 1.01x); model.channels_last measured slower here (row 8 'channels_last', 0.93x)");
  // Without native bf16 the CPU is not advised to use it, and the note says why.
  CHECK(diagnose(m, cfg, {}, {}, false) ==
        "compute-bound (99% in forward/backward/update) on fp32: this CPU has no native bf16 arithmetic (no "
        "AVX512-BF16 or AMX), so optim.amp is not advised; try model.channels_last");
  // A row already in bf16 where the CPU emulates it: leaving bf16 off is the advice, before any other.
  ptune::config::ExperimentConfig in_bf16 = cfg;
  in_bf16.optim.amp = ptune::config::Amp::kBf16;
  CHECK(
      diagnose(m, in_bf16, {}, {}, false) ==
      "compute-bound (99% in forward/backward/update) on bf16 that this CPU emulates: this CPU has no native "
      "bf16 arithmetic (no AVX512-BF16 or AMX), so optim.amp off is faster here; try model.channels_last");
  in_bf16.model.channels_last = true;
  CHECK(
      diagnose(m, in_bf16, {}, {}, false) ==
      "compute-bound (99% in forward/backward/update) on bf16 that this CPU emulates: this CPU has no native "
      "bf16 arithmetic (no AVX512-BF16 or AMX), so optim.amp off is faster here");
  // Where bf16 is native, a bf16 row is told nothing about precision.
  CHECK(diagnose(m, in_bf16, {}, {}, true) == "compute-bound (99% in forward/backward/update)");
  in_bf16.model.channels_last = false;
  CHECK(diagnose(m, in_bf16, {}, {}, true) ==
        "compute-bound (99% in forward/backward/update): try model.channels_last (oneDNN's bf16 kernels on "
        "this "
        "CPU's native bf16 want channels_last tensors; without it each convolution reorders them)");
  // Input-bound: more workers measured within noise, so the next move.
  Measurement in;
  in.split = Measurement::StepSplit{70, 0, 30};
  CHECK(
      diagnose(in, cfg, {{"loader.num_workers", 2, 2, "2 loader workers", "within noise", 1.0}}, {}, true) ==
      "input-bound (70% waiting for data): loader.num_workers measured within noise here (row 2 '2 loader "
      "workers', 1.00x); try ship smaller batches (loader.uint8_transfer)");
}

namespace {
/// A side whose windows take what a shared clock says: the machine's state at that moment. Its
/// windows are one step long, and advance `now` (a fake wall clock, ms) by their time.
struct ClockSide : ptune::measure::Side {
  ClockSide(char name, std::string& log, const std::function<double(size_t)>& ms, double* now = nullptr)
      : name(name), log(log), ms(ms), now(now) {}
  double window(const ptune::measure::Deadline&) override {
    const size_t at = log.size();
    log += name;
    const double t = ms(at);
    if (now) *now += t;
    return t;
  }
  char name;
  std::string& log;                  // every window in the order timed: "ABBA..."
  std::function<double(size_t)> ms;  // window index -> ms/step
  double* now;                       // the fake clock, or null
};

/// A deadline of `budget_ms` on the fake clock `now` (from its value now).
ptune::measure::Deadline fake_deadline(double budget_ms, const double& now) {
  return ptune::measure::Deadline(budget_ms, [&now] { return now; });
}
}  // namespace

TEST_CASE(
    "pairs come in blocks of A B, B A in a drawn order, and a periodic disturbance favours neither side",
    "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  WindowPlan plan;
  plan.min_pairs = 40;
  plan.max_pairs = 40;  // no deadline: measure.repeats and max_pairs decide
  // A disturbance in a rhythm of four windows (slow, fast, fast, slow), as another program
  // sharing the cores can give: with a fixed ABBA ABBA order every A window would be a slow one.
  auto rhythm = [](size_t i) { return i % 4 == 0 || i % 4 == 3 ? 150.0 : 90.0; };
  std::string log;
  ClockSide a('A', log, rhythm), b('B', log, rhythm);
  const Comparison c = compare(a, b, plan);
  REQUIRE(log.size() == 80);
  bool abba = false, baab = false;
  for (size_t k = 0; k < 80; k += 4) {
    const std::string block = log.substr(k, 4);
    INFO("block " << k / 4 << ": " << block);
    CHECK((block == "ABBA" || block == "BAAB"));
    abba = abba || block == "ABBA";
    baab = baab || block == "BAAB";
  }
  CHECK(abba);
  CHECK(baab);
  // A/A under the disturbance: the interval holds 1, and the verdict is neither side.
  CHECK(c.speedup.lo <= 1.0);
  CHECK(c.speedup.hi >= 1.0);
  CHECK(c.verdict != Verdict::kFaster);
  CHECK(c.verdict != Verdict::kSlower);
  // The same order every time (every rank of a data-parallel run takes the same).
  std::string again;
  ClockSide a2('A', again, rhythm), b2('B', again, rhythm);
  (void)compare(a2, b2, plan);
  CHECK(again == log);
}

TEST_CASE("under competing load a speedup needs a 99.9% interval and is read once, at the budget",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // B is 10% faster, with a little noise: on a quiet machine decided early, once a 99.9%
  // interval says so (at the fourth pair; the 99% one did at the third).
  auto ms = [](char side) {
    return [side](size_t i) {
      return (side == 'A' ? 110.0 : 100.0) * (1.0 + 0.01 * static_cast<double>(i % 3));
    };
  };
  WindowPlan plan;
  plan.min_pairs = 3;
  double now = 0;
  plan.deadline = fake_deadline(9 * 210.0, now);  // about nine pairs of one-step windows
  std::string quiet_log;
  ClockSide qa('A', quiet_log, ms('A'), &now), qb('B', quiet_log, ms('B'), &now);
  const Comparison quiet = compare(qa, qb, plan);
  CHECK(quiet.stop == StopRule::kDecided);
  CHECK(quiet.verdict == Verdict::kFaster);
  CHECK_FALSE(quiet.under_load);
  CHECK(quiet.b_ms.size() == 4);
  CHECK(quiet.speedup.level == Approx(kSpeedupLevel));

  // The same windows under load, seen at the first look (3 pairs): faster is not taken early,
  // the row runs to its budget and the verdict is read there, at 99.9%. Once seen, the load
  // stays (the figures since the row's start may dilute a burst): not asked again.
  int asked = 0;
  plan.under_load = [&asked] { return ++asked == 1; };
  std::string log;
  now = 0;
  plan.deadline = fake_deadline(9 * 210.0, now);
  ClockSide a('A', log, ms('A'), &now), b('B', log, ms('B'), &now);
  const Comparison loaded = compare(a, b, plan);
  CHECK(loaded.stop == StopRule::kBudget);
  CHECK(loaded.under_load);
  CHECK(loaded.b_ms.size() > 3);
  CHECK(asked == 1);
  CHECK(loaded.verdict == Verdict::kFaster);
  CHECK(loaded.speedup.level == Approx(kSpeedupLevelUnderLoad));
  const Interval again = paired_speedup(loaded.a_ms, loaded.b_ms, kSpeedupLevelUnderLoad);
  CHECK(loaded.speedup.lo == Approx(again.lo));
  CHECK(loaded.speedup.hi == Approx(again.hi));

  // Load first seen at a later look: asked at every look until then (noisy windows, so that
  // the first looks decide nothing).
  asked = 0;
  plan.under_load = [&asked] { return ++asked == 3; };
  auto noisy = [](char side) {
    auto k = std::make_shared<size_t>(0);  // this side's windows so far
    return [side, k](size_t) {
      const double a[] = {111.0, 97.0, 104.0};
      return side == 'B' ? 100.0 : a[(*k)++ % 3];
    };
  };
  std::string log3;
  now = 0;
  plan.deadline = fake_deadline(9 * 210.0, now);
  ClockSide a3('A', log3, noisy('A'), &now), b3('B', log3, noisy('B'), &now);
  const Comparison later = compare(a3, b3, plan);
  CHECK(asked == 3);
  CHECK(later.under_load);
  CHECK(later.stop == StopRule::kBudget);

  // Within noise still ends a row under load at once (it calls nothing).
  auto same = [](size_t i) { return 100.0 * (1.0 + 0.001 * static_cast<double>(i % 2)); };
  std::string log2;
  now = 0;
  plan.deadline = fake_deadline(9 * 210.0, now);
  ClockSide a2('A', log2, same, &now), b2('B', log2, same, &now);
  const Comparison aa = compare(a2, b2, plan);
  CHECK(aa.stop == StopRule::kDecided);
  CHECK(aa.verdict == Verdict::kWithinNoise);
  CHECK(aa.b_ms.size() == 3);
}

TEST_CASE(
    "a quiet row ends early as faster only on a 99.9% interval, and at its budget the 99% interval decides",
    "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // B 5% faster, the pairs' ratios scattered by about 2.5%: the 99% interval clears 1.01 from
  // the sixth pair on, the 99.9% interval from the ninth.
  auto ms = [](char side) {
    auto k = std::make_shared<size_t>(0);  // this side's windows so far
    return [side, k](size_t) {
      const double a[] = {108.0, 102.0, 105.0, 103.5, 106.5};
      return side == 'B' ? 100.0 : a[(*k)++ % 5];
    };
  };
  auto decided_at = [](const Comparison& c, double level) {
    for (size_t n = 3; n <= c.b_ms.size(); ++n) {
      const std::vector<double> a(c.a_ms.begin(), c.a_ms.begin() + static_cast<long>(n)),
          b(c.b_ms.begin(), c.b_ms.begin() + static_cast<long>(n));
      if (verdict_of(paired_speedup(a, b, level), NoiseRule{}) == Verdict::kFaster) return n;
    }
    return size_t{0};
  };
  WindowPlan plan;
  plan.min_pairs = 3;  // and no deadline
  std::string log;
  ClockSide a('A', log, ms('A')), b('B', log, ms('B'));
  const Comparison c = compare(a, b, plan);
  CHECK(c.stop == StopRule::kDecided);
  CHECK(c.verdict == Verdict::kFaster);
  CHECK(c.speedup.level == Approx(kSpeedupLevel));
  CHECK(decided_at(c, kSpeedupLevel) == 6);    // 99% decided at the sixth pair...
  CHECK(decided_at(c, kEarlyStopLevel) == 9);  // ...but the row went on
  CHECK(c.b_ms.size() == 9);                   // until 99.9% decided

  // A budget of seven and a half pairs (about 205 ms each), too short for the 99.9% interval:
  // the row runs to it (the eighth pair would not fit), and there the verdict is read at 99%:
  // faster.
  double now = 0;
  plan.deadline = fake_deadline(7.5 * 205.0, now);
  std::string log2;
  ClockSide a2('A', log2, ms('A'), &now), b2('B', log2, ms('B'), &now);
  const Comparison short_row = compare(a2, b2, plan);
  CHECK(short_row.stop == StopRule::kBudget);
  CHECK(short_row.b_ms.size() == 7);
  CHECK(short_row.verdict == Verdict::kFaster);
  CHECK(short_row.speedup.level == Approx(kSpeedupLevel));
}

TEST_CASE("a speedup between measurements apart takes the stricter level when either was under load",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  Measurement a, b;
  a.batch_size = b.batch_size = 2;
  a.steps = b.steps = 4;
  set_windows(a, {110, 112, 108, 111}, 1);
  set_windows(b, {100, 101, 99, 100}, 1);
  const Interval quiet = speedup_between(a, b);
  CHECK(quiet.level == Approx(kSpeedupLevel));
  b.load.under_load = true;
  const Interval loaded = speedup_between(a, b);
  CHECK(loaded.level == Approx(kSpeedupLevelUnderLoad));
  CHECK(loaded.point == Approx(quiet.point));
  CHECK(loaded.lo < quiet.lo);
  CHECK(loaded.hi > quiet.hi);
}

TEST_CASE("levels are written as every text says them", "[stats]") {
  using ptune::stats::level_text;
  CHECK(level_text(ptune::stats::kRowLevel) == "95%");
  CHECK(level_text(ptune::stats::kSpeedupLevel) == "99%");
  CHECK(level_text(ptune::stats::kSpeedupLevelUnderLoad) == "99.9%");
  CHECK(level_text(0.9) == "90%");
}

TEST_CASE("a falling start is the transient: dropped from the front, never beyond the first half",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // Three cold windows, then a warm pipeline with 0.5% noise: the warm half's 99.5% prediction
  // bound is about 3% above its mean, and the three lie far above it; the fourth does not.
  CHECK(transient_end({150, 120, 105, 100, 101, 99, 100.5, 100, 99.5, 100.2}) == 3);
  // One slow window in the middle is not a start-up: the leading window is warm.
  CHECK(transient_end({100, 101, 99, 130, 100, 100.5, 99.5, 100.2}) == 0);
  // A start as long as the first half: all of it goes, and no more (the later half is the
  // reference).
  CHECK(transient_end({150, 140, 130, 125, 120, 100, 100.5, 99.5, 100.2, 99.8}) == 5);
  // A series that falls all along has no warm half to tell a start-up from: its spread is wide.
  CHECK(transient_end({200, 190, 180, 170, 160, 150, 140, 130, 120, 110}) == 0);
  // Fewer than five windows (a reference of three): nothing can be told.
  CHECK(transient_end({150, 100, 100, 100}) == 0);
  // A fast first window is never dropped; nor anything from a series with a bad value.
  CHECK(transient_end({80, 100, 101, 99, 100, 100.5}) == 0);
  CHECK(transient_end({150, 120, 0, 100, 101, 99, 100.5}) == 0);
  // A pair is dropped when either side's window is the transient.
  CHECK(transient_pairs({100, 101, 99, 100, 100.5, 99.5}, {150, 120, 100, 101, 99, 100}) == 2);
}

TEST_CASE("on stationary noise the transient test drops the first window 0.5% of the time, as derived",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // With log times independent and normal, the first window is independent of the later half's
  // mean and spread, so (y0 - mean) / (sd * sqrt(1 + 1/m)) follows Student's t with m - 1
  // degrees of freedom: it exceeds the 99.5% quantile with probability exactly 0.5%, whatever
  // the noise's size and the series' length; a series loses anything only if it loses its first
  // window. 20,000 series per length: the rate's standard error is sqrt(0.005 * 0.995 / 20000)
  // = 0.05%, so 4.5 standard errors either side (0.27% to 0.73%) hold but for one run in 100,000
  // (and the generator has a fixed seed: the test is deterministic).
  std::mt19937_64 gen(42);
  for (size_t n : {5, 6, 9, 16, 40}) {
    for (double sigma : {0.01, 0.2}) {
      std::normal_distribution<double> noise(0.0, sigma);
      const int series = 20000;
      int dropped = 0, dropped_more = 0;
      std::vector<double> w(n);
      for (int s = 0; s < series; ++s) {
        for (double& v : w) v = 100.0 * std::exp(noise(gen));
        const int64_t k = transient_end(w);
        dropped += k > 0;
        dropped_more += k > 1;
      }
      const double rate = static_cast<double>(dropped) / series;
      INFO("n " << n << ", sigma " << sigma << ": " << dropped << " of " << series << " dropped a window");
      CHECK(rate >= 0.0027);
      CHECK(rate <= 0.0073);
      CHECK(dropped_more <= dropped);
    }
  }
}

TEST_CASE("a compared row leaves its start-up pairs out, and measure.repeats counts after them", "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // B's first two windows are cold (30% and 15% slower); after them both sides take the same
  // time. The transient can be told from the fifth pair on (a warm reference of three windows).
  auto side = [](bool cold_start) {
    auto k = std::make_shared<size_t>(0);  // this side's windows so far
    return [cold_start, k](size_t) {
      const size_t i = (*k)++;
      if (cold_start && i == 0) return 130.0;
      if (cold_start && i == 1) return 115.0;
      return 100.0 * (1.0 + 0.004 * static_cast<double>(i % 3));
    };
  };
  WindowPlan plan;
  plan.min_pairs = 3;
  std::string log;
  ClockSide a('A', log, side(false)), b('B', log, side(true));
  std::vector<int64_t> transient_seen;
  const Comparison c =
      compare(a, b, plan, [&](const Comparison& so_far) { transient_seen.push_back(so_far.transient); });
  CHECK(log.size() == 10);  // five pairs: three kept after the two left out
  CHECK(c.transient == 2);
  CHECK(transient_seen == std::vector<int64_t>{0, 0, 0, 0, 2});
  REQUIRE(c.b_ms.size() == 3);
  CHECK(c.a_ms.size() == 3);
  CHECK(c.b_ms[0] == Approx(100.0 * 1.008));  // B's third window: the first warm one
  CHECK(c.verdict == Verdict::kWithinNoise);
  CHECK(c.speedup.point == Approx(1.0));
  CHECK(c.stop == StopRule::kDecided);
  const auto notes = run_notes(c.transient, c.b_ms.size(), c.stop, plan, true);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] ==
        "warm-up: the first 2 pairs still ran slower (the pipeline's start-up: above the 99.5% prediction "
        "bound of the later windows): left out of every figure, on both sides");
}

TEST_CASE("a deadline counts from the row's start, agrees its steps, and settles an automatic budget once",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  double now = 1000;
  Deadline fixed = fake_deadline(3000, now);
  CHECK(fixed.limited());
  now = 2500;  // 1.5 s spent
  CHECK(fixed.fits(1500));
  CHECK_FALSE(fixed.fits(1501));
  CHECK(fixed.steps_that_fit(400, 10) == 3);
  CHECK(fixed.steps_that_fit(400, 2) == 2);
  now = 5000;  // past it: still one step
  CHECK(fixed.steps_that_fit(400, 10) == 1);
  fixed.settle();  // a fixed budget stays
  CHECK(fixed.limit_ms() == 3000);
  // Automatic: 30 s at most, then 4x the time the first windows took.
  now = 0;
  Deadline automatic = fake_deadline(0, now);
  CHECK(automatic.limit_ms() == Deadline::kAutoBudgetMs);
  now = 2000;
  automatic.settle();
  CHECK(automatic.limit_ms() == 8000);
  now = 3000;
  automatic.settle();
  CHECK(automatic.limit_ms() == 8000);
  now = 0;
  Deadline slow = fake_deadline(0, now);
  now = 9000;
  slow.settle();
  CHECK(slow.limit_ms() == Deadline::kAutoBudgetMs);
  // In a data-parallel run the rank with the least time left decides for all.
  now = 0;
  Deadline ranked = fake_deadline(1000, now);
  now = 200;
  ranked.agree_with([](double v) { return std::max(v, 1.0); });  // another rank is already over
  CHECK_FALSE(ranked.fits(1));
  ranked.agree_with([](double v) { return std::max(v, -2.0); });  // another rank fits 2 steps only
  CHECK(ranked.steps_that_fit(100, 10) == 2);
  // No deadline: everything fits.
  CHECK(Deadline().fits(1e12));
  CHECK(Deadline().steps_that_fit(1e9, 7) == 7);
  // Windows that share the time left: the first of 3 gets 0.9 of a third of it.
  now = 0;
  Deadline row = fake_deadline(10000, now);
  now = 1000;  // 9 s left
  const Deadline first = row.share(3);
  CHECK(first.fits(0.9 * 9000 / 3));
  CHECK_FALSE(first.fits(0.9 * 9000 / 3 + 1));
  CHECK(first.steps_that_fit(1000, 10) == 2);
  CHECK(row.steps_that_fit(1000, 10) == 9);  // the row's own deadline is left as it was
  CHECK(row.share(1).fits(9000));            // one window (or none) due: the row's whole time left
  CHECK(row.share(0).fits(9000));
  CHECK(Deadline().share(5).fits(1e12));
}

namespace {
/// A side whose windows run the steps that fit the deadline they are given (at most `steps`),
/// `step_ms` each on the fake clock.
struct StepSide : ptune::measure::Side {
  StepSide(double step_ms, int64_t steps, double& now) : step_ms(step_ms), steps(steps), now(now) {}
  double window(const ptune::measure::Deadline& d) override {
    const int64_t n = d.steps_that_fit(step_ms, steps);
    ran.push_back(n);
    now += static_cast<double>(n) * step_ms;
    return step_ms * (1.0 + 0.002 * static_cast<double>(ran.size() % 3));
  }
  double step_ms;
  int64_t steps;
  double& now;
  std::vector<int64_t> ran;  // the steps of each window
};
}  // namespace

TEST_CASE("a row whose full windows would not fit measure.repeats pairs in its budget runs shorter ones",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // 400 ms steps, 4 a window: a full pair takes 3.2 s, and 6 s of budget hold one and a cut one.
  // Shared, the first windows run 2 steps and the row keeps the 3 pairs measure.repeats asks for.
  double now = 0;
  WindowPlan plan;
  plan.min_pairs = 3;
  plan.deadline = fake_deadline(6000, now);
  StepSide a(400, 4, now), b(400, 4, now);
  const Comparison c = compare(a, b, plan);
  CHECK(c.b_ms.size() + static_cast<size_t>(c.transient) >= 3);
  CHECK(now <= 6000);
  // The first pair's windows shortened to their share (later ones grow into what is left).
  REQUIRE(a.ran.size() >= 3);
  REQUIRE(b.ran.size() >= 3);
  CHECK(a.ran[0] == 2);
  CHECK(b.ran[0] == 2);
  // Alone (a first row): the same, three windows of its own.
  now = 0;
  plan.deadline = fake_deadline(3000, now);
  StepSide alone(400, 4, now);
  const AloneRun r = measure_alone(alone, plan);
  CHECK(r.ms.size() + static_cast<size_t>(r.transient) >= 3);
  CHECK(now <= 3000);
  REQUIRE(alone.ran.size() >= 3);
  CHECK(alone.ran[0] == 2);
}

TEST_CASE("a row out of time stops between pairs, drops an unpaired window and says so", "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // Windows of 100 ms (A) and 300 ms (B), then 500 ms each: a budget of 850 ms holds the first
  // pair (400 ms), leaves 450 for the second, whose first window takes 500: its other side
  // cannot fit, and the lone window is left out.
  auto side = [](double first) {
    auto k = std::make_shared<size_t>(0);
    return [first, k](size_t) { return (*k)++ == 0 ? first : 500.0; };
  };
  WindowPlan plan;
  plan.min_pairs = 3;
  double now = 0;
  plan.deadline = fake_deadline(850, now);
  std::string log;
  ClockSide a('A', log, side(100), &now), b('B', log, side(300), &now);
  const Comparison c = compare(a, b, plan);
  CHECK(log.size() == 3);
  CHECK(c.unpaired);
  CHECK(c.stop == StopRule::kBudget);
  CHECK(c.a_ms == std::vector<double>{100});
  CHECK(c.b_ms == std::vector<double>{300});
  CHECK(c.verdict == Verdict::kUndecided);
  const auto notes = run_notes(c.transient, c.b_ms.size(), c.stop, plan, true);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] ==
        "ran out of time: the row's budget (measure.max_s, 0.85 s, warm-up included) ended it after 1 pair "
        "of the 3 measure.repeats asks for; its figures are those of what was timed");
  // In child processes, two windows for each process are planned, and the note says why.
  const auto in_3 = run_notes(c.transient, c.b_ms.size(), c.stop, in_processes(plan, 3), true);
  REQUIRE(in_3.size() == 1);
  CHECK(in_3[0] ==
        "ran out of time: the row's budget (measure.max_s, 0.85 s, warm-up included) ended it after 1 pair "
        "of the 6 planned (measure.repeats, and two for each of its 3 processes); its figures are those of "
        "what was timed");

  // Alone: windows of 400 ms and a budget of 1 s: the second window ends at 800 ms and a third
  // would not fit.
  now = 0;
  plan.deadline = fake_deadline(1000, now);
  std::string alone_log;
  ClockSide s(
      'S', alone_log, [](size_t) { return 400.0; }, &now);
  const AloneRun r = measure_alone(s, plan);
  CHECK(alone_log == "SS");
  CHECK(r.stop == StopRule::kBudget);
  CHECK(r.ms.size() == 2);
  const auto alone_notes = run_notes(r.transient, r.ms.size(), r.stop, plan, false);
  REQUIRE(alone_notes.size() == 1);
  CHECK(alone_notes[0].find("after 2 windows of the 3 measure.repeats asks for") != std::string::npos);
  // The first window is always timed, whatever the deadline.
  now = 0;
  plan.deadline = fake_deadline(1, now);
  std::string one_log;
  ClockSide one(
      'S', one_log, [](size_t) { return 400.0; }, &now);
  CHECK(measure_alone(one, plan).ms.size() == 1);
  CHECK(one_log == "S");
}

namespace {
/// One process of a ProcessGroup: its k-th window takes ms[k]; its result over its own windows
/// carries `figures`, and the note on its windows cut short where figures.short_windows says so.
struct FakeProcess : ptune::measure::RowSide {
  FakeProcess(std::vector<double> ms, Measurement figures) : ms(std::move(ms)), figures(std::move(figures)) {}
  double window(const ptune::measure::Deadline&) override { return ms.at(timed++); }
  Measurement result(size_t first, size_t count) override {
    asked.emplace_back(first, count);
    Measurement m = figures;
    m.repeat_ms.assign(ms.begin() + static_cast<std::ptrdiff_t>(first),
                       ms.begin() + static_cast<std::ptrdiff_t>(first + count));
    if (m.short_windows > 0) m.notes.push_back(short_windows_note(m.short_windows, count, m.steps));
    return m;
  }
  void set_progress(const Progress&, int64_t) override {}
  std::vector<double> ms;
  Measurement figures;
  size_t timed = 0;
  std::vector<std::pair<size_t, size_t>> asked;  // each result() asked for: (first, count)
};
}  // namespace

TEST_CASE("a group's result merges its processes' own over their windows among those asked for", "[stats]") {
  Measurement f0, f1, f2;
  f0.steps = f1.steps = f2.steps = 10;
  f0.split = Measurement::StepSplit{10, 20, 70};
  f0.page_faults_per_step = 100;
  f0.cpu_cores_busy = 2;
  f0.peak_rss_bytes = 1000;
  f0.notes = {"a", "b"};
  f0.short_windows = 1;
  f1.page_faults_per_step = 200;
  f1.system_time_pct = 5;
  f1.peak_rss_bytes = 3000;
  f1.notes = {"b", "c"};
  f2.split = Measurement::StepSplit{20, 20, 60};
  f2.system_time_pct = 15;
  f2.cpu_cores_busy = 4;
  f2.notes = {"a"};
  f2.short_windows = 2;
  std::vector<std::unique_ptr<RowSide>> children;
  children.push_back(std::make_unique<FakeProcess>(std::vector<double>{100, 101, 102}, f0));
  children.push_back(std::make_unique<FakeProcess>(std::vector<double>{103, 104, 105}, f1));
  children.push_back(std::make_unique<FakeProcess>(std::vector<double>{106, 107}, f2));
  std::vector<FakeProcess*> p;
  for (auto& c : children) p.push_back(static_cast<FakeProcess*>(c.get()));
  ProcessGroup group(std::move(children), false);
  for (int w = 0; w < 7; ++w) group.window(Deadline());  // processes 0 1 2 0 1 2 0
  // Windows 1 to 5: processes 1 2 0 1 2, each process's own windows a run of its own.
  const Measurement m = group.result(1, 5);
  CHECK(p[0]->asked == std::vector<std::pair<size_t, size_t>>{{1, 1}});
  CHECK(p[1]->asked == std::vector<std::pair<size_t, size_t>>{{0, 2}});
  CHECK(p[2]->asked == std::vector<std::pair<size_t, size_t>>{{0, 2}});
  CHECK(m.repeat_ms == std::vector<double>{103, 106, 101, 104, 107});
  CHECK(m.repeat_process == std::vector<int>{1, 2, 0, 1, 2});
  // Averaged by windows (1, 2 and 2 of them) over the processes that have the figure.
  REQUIRE(m.split);
  CHECK(m.split->data_wait_pct == Approx(50.0 / 3));
  CHECK(m.split->h2d_pct == Approx(20));
  CHECK(m.split->compute_pct == Approx(190.0 / 3));
  REQUIRE(m.page_faults_per_step);
  CHECK(*m.page_faults_per_step == Approx(100));
  REQUIRE(m.system_time_pct);
  CHECK(*m.system_time_pct == Approx(8));
  REQUIRE(m.cpu_cores_busy);
  CHECK(*m.cpu_cores_busy == Approx(2));
  CHECK(m.peak_rss_bytes == int64_t{3000});
  // Each note once, the processes' own notes on short windows replaced by the group's.
  CHECK(m.short_windows == 3);
  CHECK(m.notes == std::vector<std::string>{"a", "b", "c", short_windows_note(3, 5, 10)});
  // A figure no process has stays none.
  Measurement none;
  none.steps = 10;
  std::vector<std::unique_ptr<RowSide>> plain;
  plain.push_back(std::make_unique<FakeProcess>(std::vector<double>{100, 100}, none));
  ProcessGroup one(std::move(plain), false);
  one.window(Deadline());
  one.window(Deadline());
  const Measurement alone = one.result();
  CHECK_FALSE(alone.split);
  CHECK_FALSE(alone.page_faults_per_step);
  CHECK_FALSE(alone.system_time_pct);
  CHECK_FALSE(alone.cpu_cores_busy);
  CHECK_FALSE(alone.peak_rss_bytes);
  CHECK(alone.notes.empty());
  CHECK_THROWS_WITH(one.result(2), "no timed window to report");
}

namespace {
/// One-step windows of about 100 ms that vary by about 3% (a fixed quasi-random pattern).
double noisy(size_t i) {
  const double x = static_cast<double>(i);
  return 100.0 * std::exp(0.04 * std::sin(2.39996 * x * x));
}
}  // namespace

TEST_CASE("an automatic budget grows to what a verdict needs, up to measure.auto_max_s", "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // A/A, one-step windows of about 100 ms that vary by about 3% (a fixed quasi-random pattern): a
  // pair's log-ratio varies by about 4%, so within noise (+-3% at 99%) needs a few dozen pairs,
  // about 5-10 s; the automatic budget settles at 4x its first 3 pairs (about 2.4 s).
  for (const double most_s : {1.0, 120.0}) {
    INFO("measure.auto_max_s " << most_s);
    double now = 0;
    std::string log;
    ClockSide a('A', log, noisy, &now), b('B', log, noisy, &now);
    WindowPlan plan;
    plan.min_pairs = 3;
    plan.deadline = fake_deadline(0, now);
    plan.deadline.set_auto_most(1000.0 * most_s);
    const Comparison c = compare(a, b, plan);
    if (most_s < 2) {
      // Below the settled budget: nothing to grow to; the row ends undecided at about 2.4 s.
      CHECK_FALSE(c.budget_grown);
      CHECK(c.verdict == Verdict::kUndecided);
      CHECK(now <= 2600);
    } else {
      CHECK(c.budget_grown);
      CHECK(c.verdict == Verdict::kWithinNoise);
      CHECK(c.limit_ms <= 120000);
      CHECK(now <= c.limit_ms);
      CHECK(now > 2600);
    }
  }
}

TEST_CASE("a spread's optimistic end: its variance at the lower bound chi-squared gives", "[stats]") {
  using namespace ptune::measure;
  Spread s;
  s.process_var = 4e-4;
  s.window_var = 1e-4;
  s.df = 1;
  // chi-squared's 0.9 quantile: 2.705543 at 1 degree of freedom, 15.987179 at 10 (tables).
  Spread o = optimistic(s, 0.9);
  CHECK(o.process_var == Approx(4e-4 / 2.705543).epsilon(1e-6));
  CHECK(o.window_var == Approx(1e-4 / 2.705543).epsilon(1e-6));
  s.df = 10;
  o = optimistic(s, 0.9);
  CHECK(o.process_var == Approx(4e-4 * 10 / 15.987179).epsilon(1e-6));
  s.df = 0;  // nothing measured: as it is
  CHECK(optimistic(s, 0.9).process_var == 4e-4);
}

TEST_CASE("an automatic budget grows to its most where only the spread's optimistic end decides in it",
          "[stats]") {
  using namespace ptune::measure;
  using namespace ptune::stats;
  // The noisy A/A above: at the first look (3 pairs, 2 degrees of freedom) within noise needs
  // about 5-10 s at the spread measured, more than a most of 4 s; at the spread's lower 90% bound
  // (0.43x its variance) it needs less than 4 s: the budget grows to 4 s, said so.
  double now = 0;
  std::string log;
  ClockSide a('A', log, noisy, &now), b('B', log, noisy, &now);
  WindowPlan plan;
  plan.min_pairs = 3;
  plan.deadline = fake_deadline(0, now);
  plan.deadline.set_auto_most(4000);
  const Comparison c = compare(a, b, plan);
  CHECK(c.budget_grown);
  CHECK(c.budget_hope);
  CHECK(c.limit_ms == Approx(4000));
  CHECK(now > 2600);
  CHECK(now <= 4000);
}

TEST_CASE("what size of change a row can decide in its budget, from the spread it measured", "[stats]") {
  using namespace ptune::measure;
  const ptune::stats::NoiseRule rule;  // 1% floor
  // One process each side, a pair's log-ratio varying by 0.05: 60 s of 1 s pairs give 60 pairs,
  // a 99% half-width of t(0.995, 59) x 0.05 / sqrt(60) = 2.6618 x 0.006455 = 0.017182; the change
  // that just clears 1% beyond it: 1.01 x e^0.017182 - 1 = 2.750%.
  const auto paired = decidable_change_pct(0.05, 1000, 0.99, rule, 60000);
  REQUIRE(paired);
  CHECK(*paired == Approx(2.750).margin(0.002));
  CHECK_FALSE(decidable_change_pct(0.05, 1000, 0.99, rule, 2000));  // two pairs: no interval
  // In processes: a spread mostly between processes. With starts that cost nothing but their
  // time, more processes buy a narrower interval than more pairs of three.
  Spread s;
  s.process_var = 4e-4;
  s.window_var = 1e-4;
  s.df = 4;
  s.processes = 3;
  s.pairs = 12;
  const double level = 0.99;
  const auto held = decidable_change_pct(s, 3, 1000, 1e9, level, rule, 12, 120000);  // a start never fits
  const auto grown = decidable_change_pct(s, 3, 1000, 4000, level, rule, 12, 120000);
  REQUIRE(held);
  REQUIRE(grown);
  CHECK(*held == Approx(100.0 * std::expm1(std::log(1.01) + predicted_half_width(s, 3, 120, level))));
  CHECK(*grown < *held);
  // More budget: a smaller change.
  CHECK(*decidable_change_pct(s, 3, 1000, 4000, level, rule, 12, 600000) < *grown);
}
