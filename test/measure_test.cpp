// Profiler traces and the GPU-busy arithmetic.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "measure/trace.hpp"
#include "test_util.hpp"

using namespace ptune::measure;

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
