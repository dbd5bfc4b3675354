// Report rendering and atomic output.
#include <catch2/catch.hpp>

#include <filesystem>

#include "report/results.hpp"
#include "test_util.hpp"

using namespace ptune::report;

namespace {

Row row(const std::string& name, double sps, const std::string& mode = "train") {
  Row r;
  r.name = name;
  r.mode = mode;
  r.changes = nlohmann::ordered_json::object();
  ptune::measure::Measurement m;
  m.batch_size = 32;
  m.steps = 10;
  m.samples_per_s = sps;
  m.ms_per_step = 1000.0 * 32 / sps;
  m.repeat_ms = {m.ms_per_step};
  m.loss = 2.0;
  r.m = m;
  return r;
}

Results sample() {
  Results res;
  res.environment.device = "CPU";
  res.environment.device_kind = "cpu";
  res.environment.torch = "2.11.0";
  res.rows.push_back(row("baseline", 400));
  compute_speedups(res.rows);
  res.rows.push_back(row("loader", 1000, "data"));
  compute_speedups(res.rows);
  res.rows.push_back(row("workers, 8", 800));
  res.rows.back().changes["loader.num_workers"] = 8;
  compute_speedups(res.rows);
  Row skipped;
  skipped.name = "graphs";
  skipped.status = "skipped: optim.cuda_graphs needs a CUDA device; none is visible";
  res.rows.push_back(skipped);
  res.status = "complete";
  return res;
}

}  // namespace

TEST_CASE("speedups compare rows of the same mode", "[report]") {
  auto res = sample();
  CHECK(res.rows[0].speedup_vs_base == 1.0);
  CHECK(res.rows[1].speedup_vs_base == 1.0);  // the first data row is its own base
  CHECK(res.rows[2].speedup_vs_prev == Approx(2.0));
  CHECK(res.rows[2].speedup_vs_base == Approx(2.0));
}

TEST_CASE("json has the documented fields", "[report]") {
  auto j = to_json(sample());
  CHECK(j["status"] == "complete");
  CHECK(j["rows"].size() == 4);
  auto& r = j["rows"][2];
  for (const char* k : {"name", "changes", "batch_size", "steps", "ms_per_step", "samples_per_s", "speedup_vs_prev",
                        "speedup_vs_base", "data_wait_pct", "h2d_pct", "peak_mem_bytes", "loss", "diagnosis", "status"})
    CHECK(r.contains(k));
  CHECK(r["changes"]["loader.num_workers"] == 8);
  CHECK(j["rows"][3]["status"] == "skipped: optim.cuda_graphs needs a CUDA device; none is visible");
  CHECK(!j["rows"][3].contains("samples_per_s"));
}

TEST_CASE("table, csv and markdown render every row", "[report]") {
  auto res = sample();
  auto table = render(res, "table");
  CHECK(table.find("samples/s") != std::string::npos);
  CHECK(table.find("2.00x") != std::string::npos);
  CHECK(table.find("3 graphs: skipped: optim.cuda_graphs needs a CUDA device") != std::string::npos);
  auto csv = render(res, "csv");
  CHECK(csv.find("index,name,changes,batch_size") == 0);
  CHECK(csv.find("\"workers, 8\"") != std::string::npos);  // quoted comma
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 5);
  auto md = render(res, "md");
  CHECK(md.find("| # | row |") == 0);
  CHECK(std::count(md.begin(), md.end(), '\n') == 6);
}

TEST_CASE("write_atomic replaces the file whole and leaves no temporary", "[report]") {
  ptune::test::TempDir dir;
  auto path = dir.file("r.json");
  write_atomic(path, "first");
  write_atomic(path, "second");
  CHECK(ptune::test::read_file(path) == "second");
  CHECK(!std::filesystem::exists(path + ".tmp"));
  CHECK_THROWS_WITH(write_atomic(dir.file("no/such/dir/r.json"), "x"),
                    "cannot write '" + dir.file("no/such/dir/r.json") + "': No such file or directory");
}

TEST_CASE("GPU columns appear when a row has GPU metrics", "[report]") {
  auto res = sample();
  CHECK(render(res, "table").find("GPU busy") == std::string::npos);
  res.rows[0].m->gpu_busy_pct = 87.4;
  res.rows[0].m->peak_mem_bytes = 3LL * 1024 * 1024 * 1024;
  auto table = render(res, "table");
  CHECK(table.find("GPU busy") != std::string::npos);
  CHECK(table.find("87%") != std::string::npos);
  CHECK(table.find("3072 MiB") != std::string::npos);
  CHECK(to_json(res)["rows"][0]["gpu_busy_pct"] == 87.4);
}

TEST_CASE("colour marks speedups and skipped rows, and keeps the columns aligned", "[report]") {
  auto res = sample();
  auto plain = render(res, "table");
  auto coloured = render(res, "table", true);
  CHECK(plain.find("\033[") == std::string::npos);
  CHECK(coloured.find("\033[32m2.00x\033[0m") != std::string::npos);        // row 2: 2x faster
  CHECK(coloured.find("\033[33m  3 graphs: skipped:") != std::string::npos);  // skipped: yellow
  // Without the escapes, the coloured table is the plain one.
  std::string stripped;
  bool esc = false;
  for (char c : coloured) {
    if (c == '\033') esc = true;
    else if (esc) esc = c != 'm';
    else stripped += c;
  }
  CHECK(stripped == plain);
}
