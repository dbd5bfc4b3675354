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
  CHECK(!numbered.add(160, 1));  // a new epoch: not counted
  i = numbered.add(170, 3);
  REQUIRE(i);
  CHECK(i->steps == 2);
  CHECK(numbered.steps() == 20);
  CHECK(numbered.lines() == 4);
  numbered.forget();  // after a pause: the cut step is not counted
  CHECK(!numbered.add(500, 4));
  StepCounter every(10);
  CHECK(!every.add(0, std::nullopt));
  i = every.add(40, std::nullopt);
  REQUIRE(i);
  CHECK(i->steps == 10);
  CHECK(every.steps() == 20);
}

TEST_CASE("the tail keeps the last lines, shortened", "[step_lines]") {
  Tail t(2);
  CHECK(t.text().empty());
  t.add("a");
  t.add("b");
  t.add(std::string(300, 'c'));
  CHECK(t.text() == "b | " + std::string(197, 'c') + "...");
}
