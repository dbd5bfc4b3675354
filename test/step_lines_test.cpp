// Reading a program's steps from its output (proc/step_lines.hpp): torch-free, in the test
// binary that does not link LibTorch.
#include <catch2/catch.hpp>

#include "proc/step_lines.hpp"

using namespace ptune::proc;

TEST_CASE("lines end at a newline or a carriage return across reads and empty ones are dropped",
          "[step_lines]") {
  LineSplitter s;
  const std::string first = "step 1\nst", second = "ep 2\r\r\nlast";
  auto a = s.feed(first.data(), first.size(), 1.0);
  REQUIRE(a.size() == 1);
  CHECK(a[0].text == "step 1");
  CHECK(a[0].t_ms == 1.0);
  auto b = s.feed(second.data(), second.size(), 2.0);
  REQUIRE(b.size() == 1);
  CHECK(b[0].text == "step 2");
  CHECK(b[0].t_ms == 2.0);
  auto c = s.finish(3.0);
  REQUIRE(c);
  CHECK(c->text == "last");
  CHECK(!s.finish(4.0));
}

TEST_CASE("a line without an end is cut at kMaxLine", "[step_lines]") {
  LineSplitter s;
  const std::string long_text(LineSplitter::kMaxLine + 5, 'x');
  auto out = s.feed(long_text.data(), long_text.size(), 1.0);
  REQUIRE(out.size() == 1);
  CHECK(out[0].text.size() == LineSplitter::kMaxLine);
}

TEST_CASE("the step pattern: a match, and the number its step group captured", "[step_lines]") {
  StepPattern p(R"(^step (?<step>\d+)/)");
  CHECK(p.counts_steps());
  std::optional<int64_t> step;
  CHECK(p.match("step 12/100 loss 1.0", &step));
  CHECK(step == 12);
  CHECK(!p.match("epoch 1 step 12/100", &step));
  CHECK(!step);
  StepPattern plain("it/s");
  CHECK(!plain.counts_steps());
  CHECK(plain.match("100%|####| 5/5 [00:01<00:00,  4.1 it/s]", &step));
  CHECK(!step);
  // Output that is not UTF-8 is matched all the same.
  CHECK(p.match(std::string("step 3/9 \xff\xfe"), &step));
  CHECK(step == 3);
  // The default pattern.
  StepPattern d(R"((?i)\bstep\b\D{0,3}(?<step>\d+))");
  CHECK(d.match("Step: 7/500", &step));
  CHECK(step == 7);
  CHECK(d.match("step=8", &step));
  CHECK(step == 8);
  CHECK(!d.match("12.5 steps/s"));
}

TEST_CASE("a pattern that does not compile says why and where", "[step_lines]") {
  CHECK_THROWS_WITH(StepPattern("step (\\d+"), "missing closing parenthesis at offset 9");
}

TEST_CASE("steps between lines: counted from the numbers, or steps_per_match a line", "[step_lines]") {
  StepCounter numbered(1);
  CHECK(!numbered.add(100, 10));  // the first line opens the count
  auto i = numbered.add(150, 20);
  REQUIRE(i);
  CHECK(i->ms == 50);
  CHECK(i->steps == 10);
  CHECK(!numbered.add(155, 20));  // the same step again (another rank's line): left out
  CHECK(!numbered.add(160, 1));   // a new epoch: not counted
  i = numbered.add(170, 3);
  REQUIRE(i);
  CHECK(i->steps == 2);
  CHECK(numbered.steps() == 22);  // on from 20: the count never goes back
  CHECK(numbered.lines() == 5);
  numbered.forget();  // after a pause: the cut step is not counted
  CHECK(!numbered.add(500, 4));
  StepCounter every(10);
  CHECK(!every.add(0, std::nullopt));
  i = every.add(40, std::nullopt);
  REQUIRE(i);
  CHECK(i->steps == 10);
  CHECK(every.steps() == 20);
}

namespace {

using Steps = std::vector<int64_t>;

/// What `lines` (one every 10 ms) give: the numbers `reader` reads (-1 for a step line without
/// one), the intervals StepCounter closes from them (steps, and ms), and its steps in all.
struct Read {
  Steps numbers, steps, ms;
  int64_t total = 0;
};

Read read(StepReader& reader, const std::vector<std::string>& lines) {
  Read r;
  StepCounter counter(1);
  double t = 0;
  for (const std::string& l : lines) {
    t += 10;
    std::optional<int64_t> step;
    if (!reader.match(l, &step)) continue;
    r.numbers.push_back(step.value_or(-1));
    if (const auto i = counter.add(t, step)) {
      r.steps.push_back(i->steps);
      r.ms.push_back(static_cast<int64_t>(i->ms));
    }
  }
  r.total = counter.steps();
  return r;
}

}  // namespace

TEST_CASE("the loggers by name: the numbers each one's lines give", "[step_lines]") {
  REQUIRE(ptune::config::find_step_logger("tqdm"));
  CHECK(!ptune::config::find_step_logger("tqdm "));
  CHECK(!ptune::config::find_step_logger("auto"));
  CHECK(ptune::config::step_logger_names() == "auto, tqdm, torchvision, timm, step");
  StepNumbers n;
  StepPattern tqdm(ptune::config::find_step_logger("tqdm")->regex);
  CHECK(tqdm.match(
      "Epoch 0:  40%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 2/5 [00:00<00:00, 89.93it/s]",
      &n));
  CHECK((n.step == 2 && n.total == 5 && !n.epoch));
  CHECK(tqdm.match("  0%|          | 0/100 [00:00<?, ?it/s]", &n));
  CHECK((n.step == 0 && n.total == 100));
  CHECK(tqdm.match("7it [00:01,  4.90it/s]", &n));
  CHECK((n.step == 7 && !n.total));
  CHECK(!tqdm.match("Epoch: [0]  [ 40/390]  eta: 0:01:02", &n));
  StepPattern tv(ptune::config::find_step_logger("torchvision")->regex);
  CHECK(tv.match("Epoch: [3]  [ 40/390]  eta: 0:01:02  lr: 0.1  loss: 2.3010 (2.3050)", &n));
  CHECK((n.epoch == 3 && n.step == 40 && n.total == 390));
  CHECK(!tv.match("Test:  [ 40/390]  eta: 0:01:02", &n));  // the evaluation's lines
  StepPattern timm(ptune::config::find_step_logger("timm")->regex);
  CHECK(timm.match("Train: 2 [  50/1251 (  4%)]  Loss: 6.91 (6.92)  Time: 0.31s", &n));
  CHECK((n.epoch == 2 && n.step == 50 && n.total == 1251));
  CHECK(!timm.match("Test: [   0/196]  Time: 0.9 (0.9)", &n));
  StepPattern step(ptune::config::find_step_logger("step")->regex);
  CHECK(step.match("Step: 7/500", &n));
  CHECK((n.step == 7 && !n.total));
}

TEST_CASE("step numbers: epochs go on from the last, and a step already seen is not counted again",
          "[step_lines]") {
  // torchvision's per-epoch counter: epoch * total + the step.
  StepReader tv("torchvision");
  Read r = read(tv, {"Epoch: [0]  [  0/390]", "Epoch: [0]  [380/390]", "Epoch: [1]  [  0/390]",
                     "Epoch: [1]  [ 10/390]"});
  CHECK(r.numbers == Steps{0, 380, 390, 400});
  CHECK(r.steps == Steps{380, 10, 10});
  CHECK(r.total == 400);
  // Two ranks print every step: each step counted once, timed from the line that came first.
  StepReader ranks("step");
  r = read(ranks, {"step 1", "step 1", "step 2", "step 3", "step 2", "step 3", "step 4"});
  CHECK(r.steps == Steps{1, 1, 1});
  CHECK(r.ms == Steps{20, 10, 30});
  CHECK(r.total == 4);
  // A number without a total that starts again (a new epoch): the steps across are not counted,
  // and the count goes on.
  StepReader plain(R"(it (?<step>\d+))");
  r = read(plain, {"it 0", "it 10", "it 20", "it 0", "it 10", "it 20", "it 19"});
  CHECK(r.steps == Steps{10, 10, 10, 10});
  CHECK(r.total == 40);
}

TEST_CASE("tqdm: its redraws, its bar per epoch, and another bar in between", "[step_lines]") {
  auto at = [](const std::string& desc, int n, int total) {
    return desc + ": 50%|#####     | " + std::to_string(n) + "/" + std::to_string(total) + " [00:00<00:00]";
  };
  StepReader bar("tqdm");
  Read r = read(bar, {at("Epoch 0", 0, 10), at("Epoch 0", 4, 10), at("Epoch 0", 4, 10),  // redrawn
                      at("Validation", 1, 3),  // another bar while the epoch's runs: not a step line
                      at("Epoch 0", 10, 10), at("Epoch 1", 0, 10), at("Epoch 1", 2, 10)});
  CHECK(r.numbers == Steps{0, 4, 4, 10, 10, 12});
  CHECK(r.steps == Steps{4, 6, 2});
  CHECK(r.total == 12);
  // Once the followed bar has reached its total, the next bar is followed, on from its count.
  StepReader next("tqdm");
  r = read(next, {at("Map", 999, 1000), at("Map", 1000, 1000), at("Train", 0, 50), at("Train", 5, 50)});
  CHECK(r.numbers == Steps{999, 1000, 1000, 1005});
  CHECK(r.steps == Steps{1, 5});
}

TEST_CASE("auto: the first logger with two lines, and the note that says so", "[step_lines]") {
  StepReader reader("auto");
  CHECK(!reader.detected());
  CHECK(!reader.detection_note());
  // One stray `step` line does not decide; the bar's second line does, and is a step line.
  Read r = read(reader, {"loading checkpoint from step 3000", "  0%|          | 0/20 [00:00<?, ?it/s]",
                         "  5%|5         | 1/20 [00:00<00:02,  9.9it/s]",
                         " 15%|#5        | 3/20 [00:00<00:02,  9.9it/s]", "step 4000"});
  CHECK(r.numbers == Steps{1, 3});
  CHECK(reader.detected() == "tqdm");
  CHECK(reader.detection_note() ==
        "step lines: tqdm's progress bar, found by program.step_pattern \"auto\" (set \"tqdm\" to say so)");
  StepReader tv("auto");
  r = read(tv, {"Epoch: [0]  [ 0/390]  eta: 0:01:02", "Epoch: [0]  [10/390]  eta: 0:01:02",
                "Epoch: [0]  [20/390]  eta: 0:01:02"});
  CHECK(r.numbers == Steps{10, 20});
  CHECK(tv.detected() == "torchvision");
  CHECK(tv.described() == "program.step_pattern 'auto' (two lines of one of: tqdm, torchvision, timm, step)");
  StepReader given("step");
  read(given, {"step 1", "step 2"});
  CHECK(!given.detected());
  CHECK(given.described() == "program.step_pattern 'step'");
}

TEST_CASE("torchrun's rank prefixes: a pattern without a number counts one rank's lines", "[step_lines]") {
  CHECK(split_rank_prefix("[default1]:step 3").rank == "default1");
  CHECK(split_rank_prefix("[default1]:step 3").text == "step 3");
  CHECK(!split_rank_prefix("[default]:step 3").rank);
  CHECK(!split_rank_prefix("[rank1] step 3").rank);
  StepReader reader("^done$");  // anchored: matched after the prefix
  CHECK(read(reader, {"[default1]:done", "[default0]:done", "[default1]:done", "[default0]:done", "done"})
            .numbers == Steps{-1, -1, -1});
  StepReader numbered(R"(^step (?<step>\d+))");
  const Read r = read(numbered, {"[default0]:step 1", "[default1]:step 1", "[default1]:step 2"});
  CHECK(r.numbers == Steps{1, 1, 2});
  CHECK(r.steps == Steps{1});
}

TEST_CASE("the tail keeps the last lines, shortened", "[step_lines]") {
  Tail t(2);
  CHECK(t.text().empty());
  t.add("a");
  t.add("b");
  t.add(std::string(300, 'c'));
  CHECK(t.text() == "b | " + std::string(197, 'c') + "...");
}
