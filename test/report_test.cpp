// Report rendering, result files, the HTML report, the comparison gate and the terminal.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "core/files.hpp"
#include "core/numbers.hpp"
#include "core/table.hpp"
#include "report/compare.hpp"
#include "report/figures.hpp"
#include "report/html.hpp"
#include "report/results.hpp"
#include "report/run_file.hpp"
#include "report/terminal.hpp"
#include "test_util.hpp"

using namespace ptune::report;
using ptune::table::markdown_escape;

namespace {

Row row(const std::string& name, double sps, ptune::config::Mode mode = ptune::config::Mode::kTrain) {
  Row r;
  r.name = name;
  r.mode = mode;
  r.changes = nlohmann::ordered_json::object();
  ptune::measure::Measurement m;
  m.batch_size = 32;
  m.steps = 10;
  m.samples_per_s = sps;
  m.ms_per_step = 1000.0 * 32 / sps;
  m.repeat_ms = {m.ms_per_step * 0.99, m.ms_per_step, m.ms_per_step * 1.01};
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
  res.rows.push_back(row("loader", 1000, ptune::config::Mode::kData));
  compute_speedups(res.rows);
  res.rows.push_back(row("workers, 8", 800));
  res.rows.back().changes["loader.num_workers"] = 8;
  compute_speedups(res.rows);
  Row skipped;
  skipped.name = "graphs";
  skipped.status =
      ptune::report::RowStatus::skipped("optim.cuda_graphs needs a CUDA device; none is visible");
  res.rows.push_back(skipped);
  res.status = ptune::report::RunStatus::kComplete;
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

TEST_CASE("a sweep of several archs compares each row with the rows of its own arch and mode", "[report]") {
  // zoo-cpu.json's shape: each arch walked through its options, then the next arch.
  Results res;
  auto add = [&](const std::string& name, double sps, const std::string& arch,
                 ptune::config::Mode mode = ptune::config::Mode::kTrain) {
    res.rows.push_back(row(name, sps, mode));
    res.rows.back().arch = arch;
    compute_speedups(res.rows);
  };
  add("vit", 100, "vit_b_16");
  add("vit bf16", 150, "vit_b_16");
  add("convnext", 400, "convnext_tiny");
  add("convnext synthetic", 1000, "convnext_tiny", ptune::config::Mode::kSynthetic);
  add("convnext bf16", 600, "convnext_tiny");
  add("vit channels_last", 300, "vit_b_16");
  CHECK(res.rows[2].speedup_vs_prev == 1.0);  // the first convnext row is its own base
  CHECK_FALSE(res.rows[2].compared_with);
  CHECK(res.rows[4].compared_with == 2u);  // not the synthetic row, not ViT
  CHECK(res.rows[4].speedup_vs_prev == Approx(1.5));
  CHECK(res.rows[5].compared_with == 1u);  // ViT's last row, across the ConvNeXt rows
  CHECK(res.rows[5].speedup_vs_prev == Approx(2.0));
  CHECK(res.rows[5].speedup_vs_base == Approx(3.0));
  // The JSON records each row's arch, and a file read back without its speedups gets the same.
  auto j = to_json(res);
  CHECK(j["rows"][5]["arch"] == "vit_b_16");
  for (auto& r : j["rows"])
    for (const char* k : {"speedup_vs_prev", "speedup_vs_base", "compared_with"}) r[k] = nullptr;
  ptune::test::TempDir dir;
  const auto back = load_run(dir.write("zoo.json", j.dump()));
  const auto& rows = back.results.rows;
  CHECK(rows[2].arch == "convnext_tiny");
  CHECK(rows[2].speedup_vs_prev == 1.0);
  CHECK(rows[4].speedup_vs_prev == Approx(1.5).epsilon(1e-3));
  CHECK(rows[5].speedup_vs_prev == Approx(2.0).epsilon(1e-3));
  CHECK(rows[5].speedup_vs_base == Approx(3.0).epsilon(1e-3));
  // Without "arch" (an older file, another program's) the rows of a mode are one chain.
  for (auto& r : j["rows"]) r.erase("arch");
  const auto old = load_run(dir.write("old.json", j.dump()));
  CHECK(old.results.rows[5].arch.empty());
  CHECK(old.results.rows[2].speedup_vs_prev == Approx(400.0 / 150).epsilon(1e-3));  // after vit bf16
  CHECK(old.results.rows[5].speedup_vs_prev == Approx(0.5));                        // after convnext bf16
  // The HTML report draws a chart per mode and arch, each on its own scale.
  const std::string html = to_html({back});
  size_t charts = 0;
  for (size_t at = html.find("<svg class=\"chart throughput\""); at != std::string::npos;
       at = html.find("<svg class=\"chart throughput\"", at + 1))
    ++charts;
  CHECK(charts == 3);
  CHECK(html.find("<figcaption>mode: train, vit_b_16</figcaption>") != std::string::npos);
  CHECK(html.find("<figcaption>mode: synthetic, convnext_tiny</figcaption>") != std::string::npos);
}

TEST_CASE("json has the documented fields", "[report]") {
  auto j = to_json(sample());
  CHECK(j["status"] == "complete");
  CHECK(j["rows"].size() == 4);
  auto& r = j["rows"][2];
  for (const char* k :
       {"name", "changes", "batch_size", "steps", "ms_per_step", "samples_per_s", "speedup_vs_prev",
        "speedup_vs_base", "data_wait_pct", "h2d_pct", "peak_mem_bytes", "loss", "diagnosis", "status"})
    CHECK(r.contains(k));
  CHECK(r["changes"]["loader.num_workers"] == 8);
  CHECK(j["rows"][3]["status"] == "skipped: optim.cuda_graphs needs a CUDA device; none is visible");
  CHECK(j["rows"][3]["samples_per_s"].is_null());
}

TEST_CASE("table, csv and markdown render every row", "[report]") {
  auto res = sample();
  auto table = render_results(res, "table");
  CHECK(table.find("samples/s") != std::string::npos);
  CHECK(table.find("2.00x") != std::string::npos);
  CHECK(table.find("3 graphs: skipped: optim.cuda_graphs needs a CUDA device") != std::string::npos);
  // The row itself says how it ended, where its rate would be; coloured as its line under the table.
  const size_t line = table.find("\n3  graphs");
  REQUIRE(line != std::string::npos);
  const std::string row3 = table.substr(line + 1, table.find('\n', line + 1) - line - 1);
  REQUIRE(row3.size() > std::string("skipped").size());
  CHECK(row3.substr(row3.size() - 7) == "skipped");
  CHECK(row3.size() == table.find("samples/s") + std::string("samples/s").size());  // in its column
  CHECK(render_results(res, "table", true).find("\033[33mskipped\033[0m") != std::string::npos);
  auto csv = render_results(res, "csv");
  CHECK(csv.find("index,name,changes,mode,arch,num_workers,batch_size") == 0);
  CHECK(csv.find("\"workers, 8\"") != std::string::npos);  // quoted comma
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 5);
  auto md = render_results(res, "md");
  CHECK(md.find("| # | row |") == 0);
  // header, rule, 4 rows, blank, device, blank, legend, blank, 1 status line
  CHECK(std::count(md.begin(), md.end(), '\n') == 12);
  CHECK(md.find("\n± and \\[lo, hi\\] are confidence intervals: 95% for samples/s") != std::string::npos);
  CHECK(table.find("\n± and [lo, hi] are confidence intervals: 95% for samples/s") != std::string::npos);
  CHECK(md.find("\nDevice: CPU (cpu), LibTorch 2.11.0\n") != std::string::npos);  // no thread count given
  CHECK(md.find("\n- 3 graphs: skipped: optim.cuda\\_graphs needs a CUDA device; none is visible\n") !=
        std::string::npos);
}

TEST_CASE("one table model: aligned text, Markdown and CSV with one escaping each", "[report]") {
  using ptune::table::csv_escape;
  CHECK(csv_escape("plain") == "plain");
  CHECK(csv_escape("a,b") == "\"a,b\"");
  CHECK(csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_escape("line\nbreak") == "\"line\nbreak\"");
  CHECK(csv_escape("bar\r50%") == "\"bar\r50%\"");  // a progress bar's carriage return
  ptune::table::Table t{{{"name"}, {"ms", true}}, {{"a,b", "1.5"}, {"c"}}};
  CHECK(ptune::table::csv(t) == "name,ms\n\"a,b\",1.5\nc,\n");
  // Widths in code points, colour codes not counted; right-aligned columns padded on the left;
  // no line ends in spaces (the last column left-aligned, or a short row).
  t.rows.push_back({"\033[32m±é\033[0m", "12.25"});
  CHECK(ptune::table::display_width(t.rows.back()[0]) == 2);
  CHECK(ptune::table::text(t) ==
        "name     ms\n"
        "a,b     1.5\n"
        "c\n"
        "\033[32m±é\033[0m    12.25\n");
  CHECK(ptune::table::text({{{"k"}, {"v"}}, {{"a", "x"}, {"long", "y"}}}, {"  ", " "}) ==
        "  k    v\n  a    x\n  long y\n");
  CHECK(ptune::table::markdown(t) ==
        "| name | ms |\n|---|---:|\n| a,b | 1.5 |\n| c |  |\n| \033\\[32m±é\033\\[0m | 12.25 |\n");
  CHECK(ptune::table::markdown({{{"gpu_util%", true}}, {{"a|b"}}}) == "| gpu\\_util% |\n|---:|\n| a\\|b |\n");
}

TEST_CASE(
    "one table model: HTML with the columns' alignment, a cell's own class and title, every text escaped",
    "[report]") {
  using ptune::table::HtmlCell;
  using ptune::table::HtmlRow;
  ptune::table::HtmlTable t =
      ptune::table::html_table({{{"name"}, {"ms", true}}, {{"a<b", "1.5"}, {"c"}}}, "x");
  CHECK(
      ptune::table::html(t) ==
      "<div class=\"scroll\"><table class=\"x\"><thead><tr><th>name</th><th class=\"n\">ms</th></tr></thead>"
      "<tbody><tr><td>a&lt;b</td><td class=\"n\">1.5</td></tr><tr><td>c</td></tr></tbody></table></div>");
  // A cell's class after the column's; words among numbers without it; an empty cell with no class
  // of its own gets none; the title and the row's attributes escaped; a key cell as <th>.
  HtmlCell words("not run", "muted");
  words.words = true;
  HtmlRow row({"k\"", HtmlCell("2x", "verdict-faster", "a \"note\" & more")}, true, "slow");
  row.attributes = {{"data-class", "<conv>"}};
  ptune::table::HtmlTable u;
  u.columns = {{"key"}, {"v", true}, {"w", true}, {"e", true}};
  u.swatches = {"", "#0072B2"};
  u.scroll = false;
  u.rows = {row, HtmlRow({"k2", words, "", "0"})};
  CHECK(
      ptune::table::html(u) ==
      "<table><thead><tr><th>key</th><th class=\"n\"><span class=\"swatch\" style=\"background:#0072B2\">"
      "</span>v</th><th class=\"n\">w</th><th class=\"n\">e</th></tr></thead><tbody>"
      "<tr class=\"slow\" data-class=\"&lt;conv&gt;\"><th>k&quot;</th><td class=\"n verdict-faster\" "
      "title=\"a &quot;note&quot; &amp; more\">2x</td></tr>"
      "<tr><td>k2</td><td class=\"muted\">not run</td><td></td><td class=\"n\">0</td></tr></tbody></table>");
  u.head = false;
  CHECK(ptune::table::html(u).rfind("<table><tbody><tr class=\"slow\"", 0) == 0);
}

TEST_CASE("a text written atomically replaces the file whole and leaves no temporary", "[report]") {
  ptune::test::TempDir dir;
  auto path = dir.file("r.json");
  ptune::files::write_atomically(path, "--out", "first");
  ptune::files::write_atomically(path, "--out", "second");
  CHECK(ptune::test::read_file(path) == "second");
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);  // no temporary left beside it
  CHECK_THROWS_WITH(ptune::files::write_atomically(dir.file("no/such/dir/r.json"), "--out", "x"),
                    "cannot write --out '" + dir.file("no/such/dir/r.json") + "': No such file or directory");
}

TEST_CASE("GPU columns appear when a row has GPU metrics", "[report]") {
  auto res = sample();
  CHECK(render_results(res, "table").find("GPU busy") == std::string::npos);
  res.rows[0].m->gpu_busy_pct = 87.4;
  res.rows[0].m->peak_mem_bytes = 3LL * 1024 * 1024 * 1024;
  auto table = render_results(res, "table");
  CHECK(table.find("GPU busy") != std::string::npos);
  CHECK(table.find("87%") != std::string::npos);
  CHECK(table.find("3072 MiB") != std::string::npos);
  CHECK(to_json(res)["rows"][0]["gpu_busy_pct"] == 87.4);
}

TEST_CASE("a cell's number and a shortened name: printf's digits, cut never inside a character", "[report]") {
  CHECK(ptune::numbers::fmt("%.1f", 2.25) == "2.2");  // round half to even in binary: 2.25 is exact
  CHECK(ptune::numbers::fmt("%.3g", 1234.5) == "1.23e+03");
  CHECK(ptune::numbers::fixed(2.25, 1) == "2.2");
  CHECK(ptune::numbers::fixed(-0.5, 0) == "-0");
  CHECK(ptune::numbers::percent(61.5) == "62%");  // half away from zero, as std::lround
  CHECK(ptune::numbers::percent(-0.4) == "0%");
  CHECK(ptune::numbers::grouped(37957.5, 1) == "37,957.5");
  CHECK(ptune::numbers::grouped(-1234567, 0) == "-1,234,567");
  CHECK(ptune::numbers::grouped(999, 0) == "999");
  CHECK(ptune::numbers::shortest(410.0) == "410");
  CHECK(ptune::numbers::shortest(0.125) == "0.125");
  CHECK(ptune::table::shorten("aten::mm", 8) == "aten::mm");
  // A name from a file on one line; a colour's ESC kept.
  CHECK(ptune::table::one_line("new\nline\ttab\r\x01 \x1b[32mok") == "new\\nline\\ttab\\r\\x01 \x1b[32mok");
  CHECK(ptune::table::shorten("aten::addmm", 8) == "aten:...");
  // "é" is two bytes (0xc3 0xa9): a cut after 5 bytes would split the second one.
  const std::string name = "caf\xc3\xa9\xc3\xa9_kernel";
  CHECK(ptune::table::shorten(name, 8) == "caf\xc3\xa9...");
  CHECK(ptune::table::shorten(name, 9) == "caf\xc3\xa9...");
  CHECK(ptune::table::shorten(name, 10) == "caf\xc3\xa9\xc3\xa9...");
}

TEST_CASE("a row measured under load says so in the table, CSV, Markdown and JSON", "[report]") {
  auto res = sample();
  auto& load = res.rows[2].m->load;
  load.sampled = true;
  load.cores = 2;
  load.other_cpu_cores = 1.04;
  load.under_load = true;
  res.rows[0].m->load.sampled = true;  // a quiet row
  const auto table = render_results(res, "table");
  CHECK(table.find("  load  ") != std::string::npos);
  CHECK(table.find("+1.0 cores") != std::string::npos);
  const auto md = render_results(res, "md");
  CHECK(md.find("| load |") != std::string::npos);
  CHECK(md.find("| +1.0 cores |") != std::string::npos);
  const auto j = to_json(res);
  CHECK(j["rows"][2]["under_load"] == true);
  CHECK(j["rows"][2]["other_cpu_cores"] == 1.04);
  CHECK(j["rows"][0]["under_load"] == false);
  CHECK(render_results(res, "csv").find(",true,1.04,") != std::string::npos);
}

TEST_CASE("the GPU's view of the load is in the table, CSV, Markdown, JSON and HTML, and reads back",
          "[report][load]") {
  auto res = sample();
  auto& shared = res.rows[2].m->load;  // another process on the GPU: under load
  shared.sampled = shared.gpu_sampled = true;
  shared.cores = 2;
  shared.gpu_other_processes = 1;
  shared.under_load = true;
  auto& throttled = res.rows[0].m->load;  // a throttled GPU alone: noted, not under load
  throttled.sampled = throttled.gpu_sampled = true;
  throttled.cores = 2;
  throttled.gpu_other_processes = 0;
  throttled.gpu_notes = {"SM clock 1410 of 1980 MHz; throttled: power cap"};
  CHECK(throttled.summary() ==
        "other processes used 0.00 of 2 cores, steal 0%, load average 0.0, 0 other processes on the GPU, SM "
        "clock 1410 of 1980 MHz; throttled: power cap");
  CHECK(shared.summary() ==
        "other processes used 0.00 of 2 cores, steal 0%, load average 0.0, 1 other process on the GPU");

  const auto table = render_results(res, "table");
  CHECK(table.find(" GPU throttled ") != std::string::npos);
  CHECK(table.find(" GPU shared ") != std::string::npos);
  const auto md = render_results(res, "md");
  CHECK(md.find("| GPU throttled |") != std::string::npos);
  CHECK(md.find("| GPU shared |") != std::string::npos);
  const auto csv = render_results(res, "csv");
  CHECK(csv.find(",false,0.0,0.0,0.0,0,SM clock 1410 of 1980 MHz; throttled: power cap,") !=
        std::string::npos);
  CHECK(csv.find(",true,0.0,0.0,0.0,1,,") != std::string::npos);

  const auto j = to_json(res);
  CHECK(j["rows"][0]["under_load"] == false);
  CHECK(j["rows"][0]["gpu_other_processes"] == 0);
  CHECK(j["rows"][0]["gpu_notes"] ==
        nlohmann::ordered_json::array({"SM clock 1410 of 1980 MHz; throttled: power cap"}));
  CHECK(j["rows"][2]["under_load"] == true);
  CHECK(j["rows"][2]["gpu_other_processes"] == 1);
  CHECK(j["rows"][2]["gpu_notes"] == nlohmann::ordered_json::array());
  CHECK(j["rows"][1]["gpu_other_processes"].is_null());  // the GPU was not read
  CHECK(j["rows"][1]["gpu_notes"].is_null());

  // Read back as a results file: the same keys and values.
  const auto back = normalize(j, "results.json");
  for (size_t i = 0; i < 3; ++i)
    for (const char* k : {"under_load", "gpu_other_processes", "gpu_notes"}) {
      INFO("row " << i << " " << k);
      CHECK(back["rows"][i][k] == j["rows"][i][k]);
    }
  auto bad = j;
  bad["rows"][0]["gpu_notes"] = "not a list";
  bad["rows"][0]["gpu_other_processes"] = "1";
  const auto cleaned = normalize(bad, "results.json");
  CHECK(cleaned["rows"][0]["gpu_notes"].is_null());
  CHECK(cleaned["rows"][0]["gpu_other_processes"].is_null());

  const auto html = to_html({from_results(res)});
  CHECK(html.find("<td class=\"n status-note\" title=\"SM clock 1410 of 1980 MHz; throttled: power cap\">GPU "
                  "throttled</td>") != std::string::npos);
  CHECK(html.find("<td class=\"n status-note\">GPU shared</td>") != std::string::npos);
}

TEST_CASE("colour marks speedups and skipped rows, and keeps the columns aligned", "[report]") {
  auto res = sample();
  auto plain = render_results(res, "table");
  auto coloured = render_results(res, "table", true);
  CHECK(plain.find("\033[") == std::string::npos);
  CHECK(coloured.find("\033[32m2.00x ±") != std::string::npos);  // row 2: 2x faster, green
  CHECK(plain.find("2.00x ±") != std::string::npos);
  CHECK(plain.find("% faster") != std::string::npos);
  CHECK(coloured.find("\033[33m  3 graphs: skipped:") != std::string::npos);  // skipped: yellow
  // Without the escapes, the coloured table is the plain one.
  std::string stripped;
  bool esc = false;
  for (char c : coloured) {
    if (c == '\033')
      esc = true;
    else if (esc)
      esc = c != 'm';
    else
      stripped += c;
  }
  CHECK(stripped == plain);
}

namespace {

/// A failed row, as the sweep records one.
Row failed_row(const std::string& name) {
  Row r;
  r.name = name;
  r.status = ptune::report::RowStatus::failed("out of memory");
  return r;
}

/// Splits CSV text into records of fields (RFC 4180: quoted fields may hold commas, quotes
/// doubled, and newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> records(1, std::vector<std::string>(1));
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        records.back().back() += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        records.back().back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      records.back().emplace_back();
    } else if (c == '\n') {
      records.emplace_back(1);
    } else {
      records.back().back() += c;
    }
  }
  if (records.back().size() == 1 && records.back()[0].empty()) records.pop_back();
  return records;
}

/// How many cells a Markdown table line has: its `|` separators not escaped by a backslash.
size_t md_cells(const std::string& line) {
  size_t pipes = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\')
      ++i;
    else if (line[i] == '|')
      ++pipes;
  }
  return pipes - 1;
}

const std::string kAwkward = "a|b <i>x</i> & \"q\" 'p' `c` *d* _e_ [f](g) ~~h~~ \\ 100%,\nsecond line";

}  // namespace

TEST_CASE("every JSON row has every key, null where it has no value", "[report]") {
  auto res = sample();
  res.rows.push_back(failed_row("oom"));
  res.rows[0].diagnosis = "compute-bound";
  res.rows[0].loss_curve = {2.0, 1.5};
  auto j = to_json(res);
  REQUIRE(j["rows"].size() == 5);
  for (const auto& row : j["rows"]) {
    INFO(row.dump());
    std::vector<std::string> keys;
    for (auto it = row.begin(); it != row.end(); ++it) keys.push_back(it.key());
    CHECK(keys == row_keys());  // the same keys in the same order, whatever the status
    CHECK(row["changes"].is_object());
    CHECK(row["notes"].is_array());
  }
  CHECK(j["rows"][0]["diagnosis"] == "compute-bound");
  CHECK(j["rows"][0]["loss_curve"].size() == 2);
  CHECK(j["rows"][1]["loss_curve"].is_null());
  CHECK(j["rows"][1]["diagnosis"].is_null());
  CHECK(j["rows"][0]["gpu_busy_pct"].is_null());
  for (size_t i : {3, 4}) {
    for (const char* k :
         {"batch_size", "ms_per_step", "samples_per_s", "speedup_vs_prev", "loss", "compute_pct"})
      CHECK(j["rows"][i][k].is_null());
  }
  CHECK(j["rows"][4]["status"] == "failed: out of memory");
}

TEST_CASE("an interval with an infinite upper bound prints as unbounded in every format", "[report]") {
  // A t-interval of very few degrees of freedom under competing load can pass a double's range:
  // its upper bound is +inf with a positive lower bound. Every writer prints it "[unbounded]", as
  // any interval past 10x either way; none throws (it used to end a sweep with
  // "basic_string::substr").
  auto res = sample();
  REQUIRE(res.rows[1].m);
  res.rows[1].prev_ci = {1.5, 0.01, std::numeric_limits<double>::infinity(), 2, 0.999};
  const auto j = to_json(res);
  CHECK(j["rows"][1]["speedup_vs_prev_interval"] == "[unbounded]");
  CHECK(j["rows"][1]["speedup_vs_prev_lo"] == 0.01);
  for (const char* format : {"table", "csv", "md", "json"}) {
    INFO(format);
    std::string text;
    CHECK_NOTHROW(text = render_results(res, format));
    CHECK(text.find("inf") == std::string::npos);
    CHECK(text.find("unbounded") != std::string::npos);
  }
}

TEST_CASE("CSV has one fixed set of columns and numbers only in numeric columns", "[report]") {
  Results skipped_only;
  skipped_only.rows.push_back(sample().rows[3]);
  auto full = sample();
  full.rows[0].name = kAwkward;
  full.rows[0].notes = {"first, note", "second \"quoted\""};
  full.rows[0].m->gpu_busy_pct = 55.5;
  full.rows[0].m->peak_mem_bytes = 123456789;
  full.rows[0].m->model_flops_per_sample = 5.5e9;
  full.rows[0].m->peak_flops_per_s = 2.0e12;
  full.rows[0].m->peak_precision = "fp32";
  full.rows[0].m->peak_source = "calibrated, here";
  full.rows.push_back(failed_row("oom"));
  std::string header;
  for (const auto& c : csv_columns()) header += (header.empty() ? "" : ",") + c;
  CHECK(
      header ==
      "index,name,changes,mode,arch,num_workers,batch_size,steps,windows,ms_per_step,spread_pct,samples_per_"
      "s,samples_per_s_lo,samples_per_s_hi,samples_per_s_interval,speedup_vs_prev,speedup_vs_prev_lo,speedup_"
      "vs_prev_hi,speedup_vs_prev_interval,verdict_vs_prev,speedup_vs_base,speedup_vs_base_lo,speedup_vs_"
      "base_hi,speedup_vs_base_interval,verdict_vs_base,compared_with,interleaved,under_load,other_cpu_cores,"
      "steal_pct,load_average,gpu_other_processes,gpu_notes,data_wait_pct,h2d_pct,compute_pct,page_faults_"
      "per_step,system_time_pct,cpu_cores_busy,peak_rss_bytes,model_flops_per_sample,flops_per_s,peak_flops_"
      "per_s,pct_of_peak,peak_"
      "precision,peak_source,peak_under_load,peak_mem_bytes,device_mem_bytes,gpu_busy_pct,trace,loss,"
      "diagnosis,notes,status");
  const std::vector<std::string> numeric = {"index",
                                            "num_workers",
                                            "batch_size",
                                            "steps",
                                            "windows",
                                            "ms_per_step",
                                            "spread_pct",
                                            "samples_per_s",
                                            "samples_per_s_lo",
                                            "samples_per_s_hi",
                                            "speedup_vs_prev",
                                            "speedup_vs_prev_lo",
                                            "speedup_vs_prev_hi",
                                            "speedup_vs_base",
                                            "speedup_vs_base_lo",
                                            "speedup_vs_base_hi",
                                            "compared_with",
                                            "other_cpu_cores",
                                            "steal_pct",
                                            "load_average",
                                            "gpu_other_processes",
                                            "data_wait_pct",
                                            "h2d_pct",
                                            "compute_pct",
                                            "model_flops_per_sample",
                                            "flops_per_s",
                                            "peak_flops_per_s",
                                            "pct_of_peak",
                                            "peak_mem_bytes",
                                            "device_mem_bytes",
                                            "gpu_busy_pct",
                                            "loss"};
  for (const Results* r : {&skipped_only, &full}) {
    auto records = parse_csv(render_results(*r, "csv"));
    REQUIRE(records.size() == r->rows.size() + 1);
    CHECK(records[0] == csv_columns());
    for (size_t i = 1; i < records.size(); ++i) {
      REQUIRE(records[i].size() == csv_columns().size());
      for (size_t k = 0; k < csv_columns().size(); ++k) {
        if (std::find(numeric.begin(), numeric.end(), csv_columns()[k]) == numeric.end()) continue;
        const std::string& v = records[i][k];
        INFO("row " << i << " column " << csv_columns()[k] << ": '" << v << "'");
        if (v.empty()) continue;
        size_t used = 0;
        CHECK_NOTHROW(std::stod(v, &used));
        CHECK(used == v.size());
      }
    }
  }
  auto records = parse_csv(render_results(full, "csv"));
  auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(csv_columns().begin(), csv_columns().end(), name) -
                               csv_columns().begin());
  };
  CHECK(records[1][col("name")] == kAwkward);  // commas, quotes and the newline survive
  CHECK(records[1][col("notes")] == "first, note; second \"quoted\"");
  CHECK(records[1][col("gpu_busy_pct")] == "55.5");
  CHECK(records[1][col("peak_mem_bytes")] == "123456789");
  CHECK(records[1][col("mode")] == "train");
  CHECK(records[3][col("changes")] == "{\"loader.num_workers\":8}");
  CHECK(records[4][col("samples_per_s")].empty());
  CHECK(records[4][col("status")] == "skipped: optim.cuda_graphs needs a CUDA device; none is visible");
  CHECK(records[5][col("status")] == "failed: out of memory");
}

TEST_CASE("Markdown cells are escaped so that every cell stays in its column", "[report]") {
  auto res = sample();
  res.rows[0].name = kAwkward;
  res.rows[0].diagnosis = "input-bound: <wait> | 60%";
  res.rows[3].status = ptune::report::RowStatus::skipped("a | b\nc");
  auto md = render_results(res, "md");
  std::istringstream lines(md);
  std::string line;
  std::vector<std::string> table;
  while (std::getline(lines, line) && !line.empty()) table.push_back(line);
  REQUIRE(table.size() == 2 + res.rows.size());  // the table ends at the first blank line
  for (const auto& l : table) CHECK(md_cells(l) == 15);
  CHECK(table[2].find("a\\|b &lt;i&gt;x&lt;/i&gt; &amp; \"q\" 'p' \\`c\\` \\*d\\* \\_e\\_ \\[f\\](g) "
                      "&#126;&#126;h&#126;&#126; \\\\ 100%,<br>second line") != std::string::npos);
  CHECK(md.find("- 0 " + markdown_escape(kAwkward) + ": input-bound: &lt;wait&gt; \\| 60%\n") !=
        std::string::npos);
  CHECK(md.find("- 3 graphs: skipped: a \\| b<br>c\n") != std::string::npos);
  CHECK(markdown_escape("x\r\ny\rz") == "x<br>y<br>z");
}

TEST_CASE("result files: the format from the extension in any case, and the CSV's companion", "[report]") {
  CHECK(format_of_path("r.csv") == "csv");
  CHECK(format_of_path("R.CSV") == "csv");
  CHECK(format_of_path("out/r.Md") == "md");
  CHECK(format_of_path("r.HTML") == "html");
  CHECK(format_of_path("r.htm") == "html");
  CHECK(format_of_path("r.json") == "json");
  CHECK(format_of_path("csv") == "json");
  CHECK(csv_companion_path("out/r.CSV") == "out/r.env.json");
  CHECK(csv_companion_path("out.d/r") == "out.d/r.env.json");
  ptune::test::TempDir dir;
  auto res = sample();
  res.config = {{"name", "exp"}};
  write_results(dir.file("r.CSV"), res);
  CHECK(parse_csv(ptune::test::read_file(dir.file("r.CSV")))[0] == csv_columns());
  auto env = nlohmann::json::parse(ptune::test::read_file(dir.file("r.env.json")));
  CHECK(env["environment"]["device"] == "CPU");
  CHECK(env["config"]["name"] == "exp");
  CHECK(env["csv"] == "r.CSV");
  CHECK(env["status"] == "complete");
  CHECK(!env.contains("rows"));
  write_results(dir.file("r.html"), res);
  CHECK(ptune::test::read_file(dir.file("r.html")).rfind("<!DOCTYPE html>", 0) == 0);
  write_results(dir.file("r.md"), res);
  CHECK(ptune::test::read_file(dir.file("r.md")).rfind("| # | row |", 0) == 0);
  CHECK(!std::filesystem::exists(dir.file("r.html.tmp")));
}

TEST_CASE("terminal style: NO_COLOR counts only when non-empty, TERM=dumb gets no escapes", "[report]") {
  auto s = terminal_style(true, "xterm-256color", nullptr);
  CHECK((s.escapes && s.color));
  s = terminal_style(true, "xterm", "");
  CHECK((s.escapes && s.color));
  s = terminal_style(true, "xterm", "1");
  CHECK((s.escapes && !s.color));
  s = terminal_style(true, "dumb", nullptr);
  CHECK((!s.escapes && !s.color));
  s = terminal_style(true, nullptr, nullptr);
  CHECK((!s.escapes && !s.color));
  s = terminal_style(false, "xterm", nullptr);
  CHECK((!s.escapes && !s.color));
}

TEST_CASE("the progress line shows no rate on a phase's first ticks", "[report]") {
  ProgressLine p(true);
  // The first tick comes after the phase's first step: the clock starts there.
  auto first = p.tick(0, 3, "baseline", "measure", 1, 11, 16, 100.0);
  CHECK(first == "\r\033[K[1/3] baseline: measure 1/11");
  CHECK(p.tick(0, 3, "baseline", "measure", 2, 11, 16, 100.001).find("samples/s") == std::string::npos);
  // 5 steps of 16 samples in 2 s since the first tick: 40 samples/s; 5 steps left at 0.4 s each.
  CHECK(p.tick(0, 3, "baseline", "measure", 6, 11, 16, 102.0) ==
        "\r\033[K[1/3] baseline: measure 6/11  40.0 samples/s  ETA 2s");
  CHECK(p.tick(0, 3, "baseline", "measure", 11, 11, 16, 104.0).find("\r\033[K", 5) !=
        std::string::npos);  // cleared
  // A new phase starts its own clock.
  CHECK(p.tick(1, 3, "workers", "warmup", 1, 2, 16, 105.0) == "\r\033[K[2/3] workers: warmup 1/2");
  ProgressLine plain(false);  // TERM=dumb: a plain line when a phase ends, no escapes
  CHECK(plain.tick(0, 1, "b", "warmup", 1, 2, 4, 0.0).empty());
  CHECK(plain.tick(0, 1, "b", "warmup", 2, 2, 4, 1.0) == "[1/1] b: warmup 2/2  4.0 samples/s  ETA 0s\n");
  CHECK(plain.clear().empty());
}

namespace {

RunFile run_of(const std::vector<std::tuple<std::string, std::optional<double>, double>>& rows,
               const std::string& label, const std::string& status = "complete") {
  nlohmann::ordered_json doc = {{"rows", nlohmann::ordered_json::array()}, {"status", status}};
  for (const auto& [name, sps, spread] : rows) {
    nlohmann::ordered_json r = {{"name", name}, {"spread_pct", spread}};
    if (sps)
      r["samples_per_s"] = *sps, r["status"] = "ok";
    else
      r["status"] = spread < 0 ? "failed: out of memory" : "skipped: loader.pin_memory needs a CUDA device";
    doc["rows"].push_back(r);
  }
  RunFile run;
  run.label = label;
  run.results = results_from_json(normalize(doc, label));
  return run;
}

}  // namespace

TEST_CASE("compare_runs: slower beyond the limit and both spreads, missing and failed rows regress",
          "[report]") {
  auto old = run_of({{"a", 100.0, 2},
                     {"b", 100.0, 10},
                     {"c", 100.0, 0},
                     {"d", std::nullopt, 0},
                     {"e", 100.0, 0},
                     {"f", 100.0, 0},
                     {"h", 100.0, 0},
                     {"i", 100.0, 0}},
                    "old");
  auto now = run_of({{"A", 90.0, 1},           // -10%: beyond 5% and the spreads 2% and 1%
                     {"b", 92.0, 1},           // -8%: beyond 5% but within b's old spread (10%)
                     {"c", 120.0, 0},          // +20%: faster
                     {"d", std::nullopt, 0},   // skipped in both
                     {"f", std::nullopt, -1},  // failed now
                     {"g", 50.0, 0},           // a new row
                     {"h", 95.0, 0},           // -5%: exactly the limit, not beyond it
                     {"i", std::nullopt, 0}},  // skipped now, measured before
                    "new");
  auto cmp = compare_runs(old, now, 5.0);
  REQUIRE(cmp.rows.size() == 9);  // the new run's 8 rows, then e (only in the old)
  std::map<std::string, const RowCheck*> by;
  for (const auto& r : cmp.rows) by[r.name] = &r;
  CHECK(by["A"]->verdict == "slower");
  CHECK(by["A"]->regression);
  REQUIRE(by["A"]->change_pct);
  CHECK(*by["A"]->change_pct == Approx(-10.0));
  CHECK(by["A"]->why == "-10.0% beyond 5.0% and the spreads (2.0%, 1.0%)");
  CHECK(by["b"]->verdict == "within noise");
  CHECK(!by["b"]->regression);
  CHECK(by["c"]->verdict == "faster");
  CHECK(!by["c"]->regression);
  CHECK(by["d"]->verdict == "not measured in either");
  CHECK(!by["d"]->regression);
  CHECK(by["e"]->verdict == "missing");
  CHECK(by["e"]->regression);
  CHECK(by["f"]->verdict == "failed");
  CHECK(by["f"]->regression);
  CHECK(by["g"]->verdict == "new row");
  CHECK(!by["g"]->regression);
  CHECK(by["h"]->verdict == "within noise");
  CHECK(by["i"]->verdict == "not measured");
  CHECK(by["i"]->regression);
  CHECK(cmp.regressions().size() == 4);
  auto text = render_run_comparison(cmp);
  CHECK(text.find("4 regressions: A (slower), f (failed), i (not measured), e (missing)\n") !=
        std::string::npos);
  CHECK(text.find("0.900x") != std::string::npos);
  // Without a limit the spreads alone decide: b's -8% is still within its 10% spread.
  auto no_limit = compare_runs(old, now, 0);
  CHECK(no_limit.rows[1].verdict == "within noise");
  CHECK(no_limit.rows[6].verdict == "slower");  // h: -5% beyond no limit and no spread
  // Equal runs: no regression.
  auto same = compare_runs(old, old, 5.0);
  CHECK(same.regressions().empty());
  CHECK(render_run_comparison(same).find("no regression") != std::string::npos);
  // An interrupted run is said so.
  auto partial = run_of({{"a", 100.0, 0}}, "partial", "interrupted");
  CHECK(compare_runs(old, partial, 5).warnings ==
        std::vector<std::string>{"partial: the run is interrupted, not complete"});
}

TEST_CASE("load_run reads ptune's results and scripts/bench's comparison, and names bad files", "[report]") {
  ptune::test::TempDir dir;
  CHECK_THROWS_WITH(load_run(dir.file("none.json")),
                    "cannot read results '" + dir.file("none.json") + "': No such file or directory");
  auto bad = dir.write("bad.json", "{\"rows\": [");
  CHECK_THROWS_WITH(load_run(bad), Catch::StartsWith(bad + ": malformed JSON: "));
  auto other = dir.write("other.json", "{\"loader\": {}}");
  CHECK_THROWS_WITH(
      load_run(other),
      Catch::StartsWith(other + ": not a results file: expected a JSON object with a \"rows\" list"));
  auto noname = dir.write("noname.json", "{\"rows\": [{\"samples_per_s\": 3}]}");
  CHECK_THROWS_WITH(load_run(noname), noname + ": rows[0]: no \"name\"");
  // A minimal file of any program: names and samples/s; the rest is filled in.
  auto minimal = load_run(dir.write("minimal.json", R"({"rows": [{"name": "a", "samples_per_s": 10},
      {"name": "b", "samples_per_s": 30, "mode": "train", "notes": "one note"}, {"name": "c", "status": "skipped: no"}]})"));
  CHECK(minimal.source == "ptune");
  CHECK(minimal.results.rows[1].speedup_vs_prev == 3.0);
  CHECK(minimal.results.rows[1].notes == std::vector<std::string>{"one note"});
  CHECK(!minimal.results.rows[2].m);
  CHECK(minimal.results.status == ptune::report::RunStatus::kComplete);
  // What the file does not say stays unsaid: no batch, workers, ms/step or step split.
  REQUIRE(minimal.results.rows[0].m);
  CHECK(minimal.results.rows[0].m->batch_size == 0);
  CHECK(!minimal.results.rows[0].num_workers);
  CHECK(!minimal.results.rows[0].m->split);
  CHECK(printed_ms_per_step(minimal.results.rows[0]) == 0);
  const auto minimal_doc = to_json(minimal.results);
  for (const auto& row : minimal_doc["rows"]) CHECK(row.size() == row_keys().size());
  for (const char* key : {"batch_size", "num_workers", "ms_per_step", "data_wait_pct", "compute_pct"})
    CHECK(minimal_doc["rows"][0][key].is_null());
  // scripts/bench/case_study_vs_pytorch.py --json: PyTorch's fastest variant per row.
  auto bench = load_run(dir.write("vs.json", R"({"status": "complete",
      "settings": {"threads": 2}, "machine": {"device": "cpu", "name": "EPYC", "torch": "2.11.0", "cuda": "13.0"},
      "rows": [
        {"index": 0, "name": "baseline", "mode": "train", "status": "ok", "ratio": 1.1, "ratio_vs": "eager",
         "ptune": {"status": "ok", "samples_per_s": 110},
         "pytorch": [{"variant": "eager", "status": "ok", "samples_per_s": 100, "spread_pct": 2.5},
                     {"variant": "compiled", "status": "failed: no compiler"}]},
        {"index": 1, "name": "graphs", "mode": "train", "status": "skipped: needs CUDA"},
        {"index": 2, "name": "broken", "mode": "train", "status": "ok",
         "pytorch": [{"variant": "eager", "status": "failed: RuntimeError: x"}]}]})"));
  CHECK(bench.source == "PyTorch");
  const auto& rows = bench.results.rows;
  REQUIRE(rows[0].m);
  CHECK(rows[0].m->samples_per_s == 100);
  CHECK(rows[0].m->spread_pct == 2.5);
  CHECK(rows[0].notes.at(0) == "PyTorch variant: eager (the fastest of 1 that ran)");
  CHECK(rows[0].notes.at(1) == "ptune / PyTorch in that comparison: 1.1x");
  CHECK(rows[1].status.text() == "skipped: needs CUDA");
  CHECK(rows[2].status.text() == "failed: eager: failed: RuntimeError: x");
  CHECK(bench.results.environment.device == "EPYC");
  CHECK(bench.results.environment.cpu_threads == 2);
  // The script's older layout: "row" and "pytorch_samples_per_s", ptune's environment.
  auto older = load_run(dir.write("older.json", R"({"torch": "2.11.0+cu130",
      "environment": {"device": "EPYC", "device_kind": "cpu"},
      "rows": [{"row": "baseline", "pytorch_samples_per_s": 120.5, "ptune_samples_per_s": 130, "ptune_status": "ok"},
               {"row": "graphs", "pytorch_samples_per_s": null, "ptune_status": "skipped: needs CUDA"}]})"));
  CHECK(older.source == "PyTorch");
  CHECK(older.results.rows[0].name == "baseline");
  REQUIRE(older.results.rows[0].m);
  CHECK(older.results.rows[0].m->samples_per_s == 120.5);
  CHECK(older.results.rows[1].status.text() == "skipped: needs CUDA");
  CHECK(older.results.environment.torch == "2.11.0+cu130");
  CHECK(older.results.environment.device == "EPYC");
  std::vector<RunFile> runs = {bench, minimal, minimal};
  runs[2].path = "other/minimal.json";
  label_runs(runs);
  CHECK(runs[0].label == "vs (PyTorch)");
  CHECK(runs[1].label == dir.file("minimal.json"));  // two files named minimal: their paths
  CHECK(runs[2].label == "other/minimal.json");
  CHECK(match_key("  Batch\t 512 ") == "batch 512");
}

namespace {

/// The `<rect class="bar" ...>` elements of an HTML page: (data-row, data-value, width).
struct Bar {
  std::string row;
  double value, width;
  int run;
};

std::string attr(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return tag.substr(start, tag.find('"', start) - start);
}

std::vector<Bar> bars_of(const std::string& html) {
  std::vector<Bar> bars;
  for (size_t at = html.find("<rect class=\"bar\""); at != std::string::npos;
       at = html.find("<rect class=\"bar\"", at + 1)) {
    const std::string tag = html.substr(at, html.find('>', at) - at);
    bars.push_back({attr(tag, "data-row"), std::stod(attr(tag, "data-value")), std::stod(attr(tag, "width")),
                    std::stoi(attr(tag, "data-run"))});
  }
  return bars;
}

}  // namespace

TEST_CASE("the HTML report is self-contained, escapes every name, and draws one bar per measured row",
          "[report]") {
  auto res = sample();
  res.rows[0].name = "<script>alert(1)</script> & \"q\"";
  res.rows[0].diagnosis = "compute-bound <b>";
  res.rows[0].loss_curve = {2.0, 1.8, 1.7};
  res.rows.push_back(failed_row("oom"));
  res.config = {{"name", "exp <1>"},
                {"loader", {{"batch_size", 32}, {"num_workers", 0}}},
                {"sweep",
                 {{{"name", res.rows[0].name}},
                  {{"name", "loader"}},
                  {{"name", "workers, 8"}, {"set", {{"loader.num_workers", 8}}}}}}};
  auto html = to_html({from_results(res)});
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("@import") == std::string::npos);
  CHECK(html.find("Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\"") !=
        std::string::npos);
  CHECK(html.find("<title>ptune report: exp &lt;1&gt;</title>") != std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;") != std::string::npos);
  CHECK(html.find("compute-bound &lt;b&gt;") != std::string::npos);
  auto bars = bars_of(html);
  REQUIRE(bars.size() == 3);  // the skipped and the failed rows have none
  CHECK(bars[0].value == Approx(400).epsilon(1e-3));
  CHECK(bars[1].value == Approx(800).epsilon(1e-3));
  CHECK(bars[2].value == Approx(1000).epsilon(1e-3));  // the data row, on its own chart after the train rows'
  CHECK(bars[1].width / bars[1].value == Approx(bars[0].width / bars[0].value));  // one scale per mode
  CHECK(html.find("skipped: optim.cuda_graphs needs a CUDA device") != std::string::npos);
  CHECK(html.find("class=\"nobar status-failed\"") != std::string::npos);
  CHECK(html.find("class=\"curve\"") != std::string::npos);            // the loss curve
  CHECK(html.find("loader.num_workers: 0 → 8") != std::string::npos);  // row 2's config against row 0's
  CHECK(html.find("×2.00 prev") != std::string::npos);
}

TEST_CASE("the HTML report puts runs side by side, rows matched by name", "[report]") {
  auto before = run_of({{"baseline", 100.0, 0}, {"workers", 200.0, 0}, {"gone", 50.0, 0}}, "before");
  auto after = run_of({{"Baseline", 110.0, 0}, {"new row", 300.0, 0}, {"workers", 250.0, 0}}, "after");
  auto html = to_html({before, after});
  auto bars = bars_of(html);
  REQUIRE(bars.size() == 6);
  // Lines: baseline, new row (after baseline, as in the second run), workers, gone.
  CHECK(bars[0].row == "baseline");
  CHECK(bars[1].row == "baseline");
  CHECK(bars[1].run == 1);
  CHECK(bars[1].value == 110);
  CHECK(bars[2].row == "new row");
  CHECK(bars[2].run == 1);
  CHECK(bars[3].row == "workers");
  CHECK(bars[5].row == "gone");
  CHECK(html.find("×1.10 before") != std::string::npos);  // after's baseline against before's
  CHECK(html.find("×1.25 before") != std::string::npos);
  CHECK(html.find("not in this run") != std::string::npos);
  CHECK(html.find("<h3>Side by side (samples/s)</h3>") != std::string::npos);
}

TEST_CASE(
    "Markdown renders in python-markdown, markdown-it and mistune with every cell in its column, CSV loads "
    "with the same columns for every file",
    "[report][python]") {
  const std::string python = PTUNE_PYTHON;
  // Not a silent pass: without Python this test cannot run (scripts/setup configures it).
  if (python.empty())
    FAIL("PTUNE_PYTHON not configured (cmake -DPTUNE_PYTHON=...): cannot render the Markdown");
  const std::string script = std::string(PTUNE_TEST_DATA) + "/results_files_check.py";
  ptune::test::TempDir dir;
  auto res = sample();
  res.environment.cpu_threads = 2;
  const std::vector<std::string> names = {kAwkward, "<b>bold</b> & </td>", "pipe | at | ends |",
                                          "back\\slash \\| and `ticks`"};
  for (size_t i = 0; i < names.size(); ++i) res.rows[i].name = names[i];
  res.rows[0].diagnosis = "input-bound: <wait> | 60% & more";
  res.rows.push_back(failed_row("oom\nhere"));
  auto md = dir.write("r.md", render_results(res, "md"));
  nlohmann::json expected_md = {
      {"columns", 15},
      {"names", {names[0], names[1], names[2], names[3], "oom\nhere"}},
      {"texts",
       {"Device: CPU (cpu), LibTorch 2.11.0, 2 CPU threads",
        "0 " + kAwkward + ": input-bound: <wait> | 60% & more", "4 oom\nhere: failed: out of memory"}}};
  auto e = dir.write("md.json", expected_md.dump());
  auto r = ptune::test::run("'" + python + "' '" + script + "' markdown '" + e + "' '" + md + "'");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out == "ok\n");

  // CSV: three files of different rows; the same columns, numbers where numbers go.
  Results skipped_only;
  skipped_only.rows.push_back(sample().rows[3]);
  auto gpu = sample();
  gpu.rows[0].m->gpu_busy_pct = 91.25;
  gpu.rows[0].m->peak_mem_bytes = 1LL << 33;
  gpu.rows[0].m->device_mem_bytes = 80LL << 30;
  gpu.rows[0].m->trace_path = "runs/x/00-base/trace.json";
  gpu.rows[0].notes = {"a, b", "c \"d\""};
  const std::map<std::string, const Results*> files = {
      {"awkward.csv", &res}, {"skipped.CSV", &skipped_only}, {"gpu.csv", &gpu}};
  nlohmann::json expected_csv = {
      {"columns", csv_columns()},
      {"numeric",
       {"index", "num_workers", "batch_size", "steps", "ms_per_step", "spread_pct", "samples_per_s",
        "speedup_vs_prev", "speedup_vs_base", "data_wait_pct", "h2d_pct", "compute_pct", "peak_mem_bytes",
        "device_mem_bytes", "gpu_busy_pct", "loss"}},
      {"names", nlohmann::json::object()}};
  std::string paths;
  for (const auto& [file, results] : files) {
    write_results(dir.file(file), *results);
    nlohmann::json file_names = nlohmann::json::array();
    for (const auto& row : results->rows) file_names.push_back(row.name);
    expected_csv["names"][dir.file(file)] = file_names;
    paths += " '" + dir.file(file) + "'";
  }
  auto ec = dir.write("csv.json", expected_csv.dump());
  auto c = ptune::test::run("'" + python + "' '" + script + "' csv '" + ec + "'" + paths);
  INFO(c.out << c.err);
  CHECK(c.code == 0);
  CHECK(c.out == "ok\n");
}

TEST_CASE("compare_runs: a row measured under competing load is judged at 99.9%, and says so", "[report]") {
  // Windows of 10 samples per step: the new run is 7.4% slower per sample.
  auto run_with = [](const std::vector<double>& ms, bool under_load, const std::string& label) {
    double sum = 0;
    for (double v : ms) sum += std::log(v);
    const double gm = std::exp(sum / static_cast<double>(ms.size()));
    nlohmann::ordered_json row = {
        {"name", "workers"}, {"samples_per_s", 10000.0 / gm}, {"ms_per_step", gm}, {"repeat_ms_per_step", ms},
        {"spread_pct", 0.0}, {"under_load", under_load},      {"status", "ok"}};
    nlohmann::ordered_json doc = {{"rows", nlohmann::ordered_json::array({row})}, {"status", "complete"}};
    RunFile run;
    run.label = label;
    run.results = results_from_json(normalize(doc, label));
    return run;
  };
  const std::vector<double> old_ms = {100, 104, 96, 102, 98}, new_ms = {109.08, 104.76, 111.24, 106.92, 108};
  // Quiet: the 99% interval [0.872, 0.983] lies below 1/1.01.
  auto quiet = compare_runs(run_with(old_ms, false, "old"), run_with(new_ms, false, "new"), 0);
  REQUIRE(quiet.rows.size() == 1);
  CHECK(quiet.rows[0].verdict == "slower");
  CHECK(quiet.rows[0].why == "-7.4% [-12.8%, -1.7%] beyond 1.0%");
  // The new run under load: the 99.9% interval [0.844, 1.015] holds 1.
  auto loaded = compare_runs(run_with(old_ms, false, "old"), run_with(new_ms, true, "new"), 0);
  CHECK(loaded.rows[0].verdict == "undecided");
  CHECK(loaded.rows[0].why ==
        "-7.4% [-15.6%, +1.5%]: too noisy to tell (measured under competing load: 99.9% interval)");
  CHECK(!loaded.rows[0].regression);
  // Either side under load counts.
  CHECK(compare_runs(run_with(old_ms, true, "old"), run_with(new_ms, false, "new"), 0).rows[0].verdict ==
        "undecided");
  CHECK(render_run_comparison(loaded).find("99.9% where either was measured under competing load") !=
        std::string::npos);
}

TEST_CASE("a row measured under competing load gets 99.9% intervals, and the chain after it too",
          "[report]") {
  using ptune::stats::kSpeedupLevel;
  using ptune::stats::kSpeedupLevelUnderLoad;
  std::vector<Row> rows;
  auto add = [&](const std::string& name, double sps, bool under_load) {
    rows.push_back(row(name, sps));
    rows.back().m->load.under_load = under_load;
    // Interleaved pairs: the previous row's windows beside this row's.
    if (rows.size() > 1) {
      const auto& prev = *rows[rows.size() - 2].m;
      rows.back().prev_ms = {prev.ms_per_step * 1.01, prev.ms_per_step * 0.99, prev.ms_per_step};
    }
    compute_speedups(rows);
  };
  add("baseline", 400, false);
  add("workers", 800, false);
  CHECK(rows[1].prev_ci.level == Approx(kSpeedupLevel));
  CHECK(rows[1].base_ci.level == Approx(kSpeedupLevel));
  add("batch", 1200, true);
  CHECK(rows[2].prev_ci.level == Approx(kSpeedupLevelUnderLoad));
  CHECK(rows[2].base_ci.level == Approx(kSpeedupLevelUnderLoad));
  add("amp", 1800, false);  // quiet itself, but its chain holds the loaded row
  CHECK(rows[3].prev_ci.level == Approx(kSpeedupLevel));
  CHECK(rows[3].base_ci.level == Approx(kSpeedupLevelUnderLoad));
  CHECK(rows[3].prev_ci.point == Approx(1.5));
  // The same pairs at 99.9% give a wider interval than at 99%.
  std::vector<Row> quiet = rows;
  quiet[2].m->load.under_load = false;
  compute_speedups(quiet);
  CHECK(quiet[3].base_ci.level == Approx(kSpeedupLevel));
  CHECK(rows[3].base_ci.hi / rows[3].base_ci.lo > quiet[3].base_ci.hi / quiet[3].base_ci.lo);
}

namespace {

/// A row whose windows vary by `noise` (relative) around `ms`, paired with the previous row's
/// windows `prev_ms` (empty: measured apart).
Row timed_row(const std::string& name, int64_t batch, std::vector<double> ms, std::vector<double> prev_ms) {
  Row r;
  r.name = name;
  r.changes = nlohmann::ordered_json::object();
  ptune::measure::Measurement m;
  m.batch_size = batch;
  m.steps = 10;
  ptune::measure::set_windows(m, ms, 1);
  r.m = m;
  r.prev_ms = std::move(prev_ms);
  return r;
}

/// The results document (ptune sweep's JSON) of `rows`, a complete run.
nlohmann::json results_doc(const std::vector<Row>& rows) {
  Results res;
  res.rows = rows;
  res.status = ptune::report::RunStatus::kComplete;
  return nlohmann::json::parse(to_json(res).dump());
}

}  // namespace

namespace {

/// A row timed in processes of its own against the previous row's: windows `ms` in processes
/// `process`, paired with `prev_ms` in `prev_process`.
Row process_row(const std::string& name, std::vector<double> ms, std::vector<int> process,
                std::vector<double> prev_ms, std::vector<int> prev_process) {
  Row r = timed_row(name, 16, {}, std::move(prev_ms));
  ptune::measure::set_windows(*r.m, ms, 1, process);
  r.prev_process = std::move(prev_process);
  return r;
}

}  // namespace

TEST_CASE("vs base is never narrower than a link it rests on, nor decided where that link is not",
          "[report][figures]") {
  // An A/A link and a link 50% slower, each in two processes a side whose own speeds differ by 3%:
  // each link's spread rests on one degree of freedom (t = 63.7 at 99%: both undecided).
  // Welch-Satterthwaite gives the sum of the two links two (t = 9.9), which alone would call the
  // chain slower on the strength of links that are themselves undecided.
  const std::vector<int> turns = {0, 1, 0, 1, 0, 1, 0, 1};
  const std::vector<int> shifted = {0, 1, 1, 0, 0, 1, 1, 0};
  std::vector<Row> rows;
  rows.push_back(process_row("baseline", {100, 101, 99, 100, 100, 101, 99, 100}, turns, {}, {}));
  rows.back().prev_process.clear();
  compute_speedups(rows);
  rows.push_back(process_row("A/A", {100, 103, 103, 100, 100, 103, 103, 100}, shifted,
                             {100, 101, 99, 100, 101, 100, 99, 101}, turns));
  compute_speedups(rows);
  rows.push_back(process_row("slower", {148, 152.5, 152.5, 148, 148, 152.5, 152.5, 148}, shifted,
                             {100, 101, 101, 100, 101, 100, 100, 101}, turns));
  compute_speedups(rows);
  const Row& last = rows.back();
  auto width = [](const ptune::stats::Interval& i) { return std::log(i.hi / i.lo); };
  std::vector<ptune::report::ChainRow> links;
  for (const Row& r : rows)
    links.push_back(
        {16, r.m->repeat_ms, r.m->repeat_process, r.prev_ms, r.prev_process, r.compared_with, false});
  // The scenario: the plain sum is narrower than the link and calls the chain slower.
  const ptune::stats::Interval plain =
      ptune::stats::sum_interval(ptune::report::base_terms(links, 2), ptune::stats::kSpeedupLevel);
  REQUIRE(width(plain) < width(last.prev_ci));
  REQUIRE(ptune::stats::verdict_of(plain, last.rule) == ptune::stats::Verdict::kSlower);
  CHECK(last.verdict_prev == "undecided");
  CHECK(width(last.base_ci) >= width(last.prev_ci) - 1e-12);
  CHECK(last.base_ci.point == Approx(plain.point).epsilon(1e-12));
  CHECK(last.verdict_base == "undecided");
}

TEST_CASE("one source: every ratio of printed rates is the speedup printed between them",
          "[report][figures]") {
  // The base row's own windows; then rows each timed against the previous one. The previous
  // row runs 10% faster in a later comparison than in its own (a warm pipeline): each row's
  // own windows alone would disagree with the paired speedups.
  std::vector<Row> rows;
  rows.push_back(timed_row("baseline", 16, {100, 104, 98, 101}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("workers", 16, {80, 82, 79, 81}, {90, 93, 88, 91}));
  compute_speedups(rows);
  Row skipped;
  skipped.name = "graphs";
  skipped.status =
      ptune::report::RowStatus::skipped("optim.cuda_graphs needs a CUDA device; none is visible");
  rows.push_back(skipped);
  compute_speedups(rows);
  rows.push_back(timed_row("batch 32", 32, {120, 118, 125, 121}, {70, 73, 71, 72}));
  compute_speedups(rows);
  rows.push_back(timed_row("apart", 32, {100, 103, 99}, {}));  // measured alone: Welch link
  compute_speedups(rows);
  const auto rate = [&](size_t i) { return printed_rate(rows[i]).point; };
  CHECK(rate(0) == Approx(rows[0].m->samples_per_s));  // the base row: its own rate
  for (size_t i : {1, 3, 4}) {
    const size_t prev = *rows[i].compared_with;
    CHECK(rate(i) / rate(prev) == Approx(rows[i].speedup_vs_prev).epsilon(1e-12));
    CHECK(rate(i) / rate(0) == Approx(rows[i].speedup_vs_base).epsilon(1e-12));
    CHECK(rows[i].prev_ci.lo <= rows[i].speedup_vs_prev);
    CHECK(rows[i].prev_ci.hi >= rows[i].speedup_vs_prev);
    // ms/step and samples/s agree with each other.
    CHECK(printed_ms_per_step(rows[i]) == Approx(1000.0 * rows[i].m->batch_size / rate(i)));
  }
  CHECK(*rows[3].compared_with == 1);  // past the skipped row
  // Row 1's previous row is the base: one measurement, printed as one.
  CHECK(rows[1].base_ci.lo == rows[1].prev_ci.lo);
  CHECK(rows[1].base_ci.hi == rows[1].prev_ci.hi);
  CHECK(rows[1].verdict_base == rows[1].verdict_prev);
  // A later row's rate carries the base's uncertainty and its links': wider than the base's own.
  CHECK(printed_rate(rows[3]).hi / printed_rate(rows[3]).lo >
        printed_rate(rows[0]).hi / printed_rate(rows[0]).lo);
  // And in the JSON document, as every results file is checked.
  const auto doc = results_doc(rows);
  CHECK(ptune::test::figure_disagreements(doc).empty());
  // The check itself fails on a file whose rates disagree with its speedups.
  auto broken = doc;
  broken["rows"][3]["samples_per_s"] = broken["rows"][3]["samples_per_s"].get<double>() * 1.3;
  CHECK(ptune::test::figure_disagreements(broken).size() == 3);  // its two, and the next row's vs prev
  broken = doc;
  broken["rows"][1]["speedup_vs_base_hi"] = 9.0;
  CHECK(ptune::test::figure_disagreements(broken).size() == 1);
}

TEST_CASE("a row whose windows ran outside its printed rate says so, and how its previous row's ran",
          "[report][figures]") {
  // Row 1 pairs with the base's pipeline at the base's own speed; row 2's pairs find row 1's
  // pipeline 30% slower than in its own row: the process changed speed between rows 1 and 2.
  std::vector<Row> rows;
  rows.push_back(timed_row("baseline", 16, {100, 104, 98, 101, 99, 102}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("same", 16, {100, 103, 99, 101, 98, 102}, {101, 103, 98, 100, 99, 102}));
  compute_speedups(rows);
  rows.push_back(timed_row("after", 16, {131, 134, 129, 132, 130, 133}, {130, 135, 128, 131, 129, 134}));
  compute_speedups(rows);
  compute_speedups(rows);  // again: still one note
  const auto changed = [](const Row& r) {
    std::vector<std::string> out;
    for (const auto& n : r.notes)
      if (n.rfind("its own windows ran at ", 0) == 0) out.push_back(n);
    return out;
  };
  CHECK(changed(rows[1]).empty());  // its windows' rate lies inside its printed interval
  const auto notes = changed(rows[2]);
  REQUIRE(notes.size() == 1);
  const auto text = [](double v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return std::string(buf);
  };
  const auto& rate = rows[2].rate;
  CHECK(rows[2].m->samples_per_s < rate.lo);
  const auto iv =
      ptune::stats::welch_speedup(rows[1].m->repeat_ms, rows[2].prev_ms, ptune::stats::kSpeedupLevel);
  CHECK(text(iv.point, 2) == "0.77");
  CHECK(notes[0] ==
        "its own windows ran at " + text(rows[2].m->samples_per_s, 1) + " samples/s, not the " +
            text(rate.point, 1) + interval_text(rate) +
            " printed (its base's rate times vs base): the process's speed changed since the base "
            "row, and the speedups hold (each compares windows timed together); the previous row's "
            "settings ran 0.77x" +
            interval_text(iv) + " as fast in its pairs as in their own row");
  // Its printed rate is the chained one, about 1 / 0.77 of its windows' own.
  CHECK(rate.point == Approx(rows[2].m->samples_per_s / iv.point).epsilon(0.02));
  // A row timed apart from row 2 (a Welch link on their own windows) inherits row 2's printed
  // rate, off its windows: it says so, with no pairs to compare.
  rows.push_back(timed_row("apart", 16, {90, 92, 89, 91}, {}));
  compute_speedups(rows);
  CHECK(rows[3].rate.point / rows[2].rate.point ==
        Approx(rows[3].m->samples_per_s / rows[2].m->samples_per_s));
  CHECK(changed(rows[3]) ==
        std::vector<std::string>{
            "its own windows ran at " + text(rows[3].m->samples_per_s, 1) + " samples/s, not the " +
            text(rows[3].rate.point, 1) + interval_text(rows[3].rate) +
            " printed (its base's rate times vs base): the process's speed changed since the "
            "base row, and the speedups hold (each compares windows timed together)"});
  // The check over every results file agrees, and fails where the note is missing or wrong.
  const auto doc = results_doc(rows);
  CHECK(ptune::test::figure_disagreements(doc).empty());
  auto unnoted = doc;
  unnoted["rows"][2]["notes"] = nlohmann::json::array();
  CHECK(
      ptune::test::figure_disagreements(unnoted) ==
      std::vector<std::string>{
          "row 2 'after': its own windows ran outside its printed samples/s interval, and no note says so"});
  auto misnoted = doc;
  misnoted["rows"][1]["notes"].push_back(notes[0]);
  CHECK(ptune::test::figure_disagreements(misnoted) ==
        std::vector<std::string>{
            "row 1 'same': a note says its own windows ran outside its printed samples/s, but they did not"});
}

TEST_CASE("the JSON keeps each window's time to six significant digits, microseconds to seconds",
          "[report]") {
  // A data-loading row's windows are microseconds a batch; a fixed 0.001 ms wrote them as 0.
  std::vector<Row> rows;
  rows.push_back(timed_row("loader only", 8, {0.0021234567, 0.0049876543, 0.0030000001}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("slow", 8, {4213.45678, 4100.0}, {}));
  compute_speedups(rows);
  const auto doc = results_doc(rows);
  const auto windows = [&](size_t i) {
    return doc["rows"][i]["repeat_ms_per_step"].get<std::vector<double>>();
  };
  CHECK(windows(0) == std::vector<double>{0.00212346, 0.00498765, 0.003});
  CHECK(windows(1) == std::vector<double>{4213.46, 4100.0});
  CHECK(doc["rows"][0]["ms_per_step"].get<double>() > 0);
}

TEST_CASE("intervals print as ± only where symmetric, else [lo, hi], one text in every format",
          "[report][figures]") {
  CHECK(interval_text(1.0, 1 / 1.05, 1.05) == " ±5.0%");
  CHECK(interval_text(100.0, 98.2, 101.8) == " ±1.8%");
  CHECK(interval_text(2.0, 1.9, 2.3) == " [1.90, 2.30]");  // +15% / -5%
  CHECK(interval_text(0.99, 0.120, 8.2) == " [0.120, 8.20]");
  CHECK(interval_text(0.99, 0.060, 16.4) == " [unbounded]");      // past 10x either way: bounds nothing
  CHECK(interval_text(1.0, 0.5, 2.0) == " [0.500, 2.00]");        // a factor of 2 either way: not ±
  CHECK(interval_text(1.0, 1 / 1.2, 1.2) == " ±20%");             // a factor of 1.2: sides within a tenth
  CHECK(interval_text(1.0, 0.8, 1.25) == " [0.800, 1.25]");       // 1.25: +25% against -20%, not within
  CHECK(interval_text(1.45, 1.2e-70, 8.8e62) == " [unbounded]");  // two pairs under load at 99.9%
  CHECK(interval_text(1.0, 0.5, std::numeric_limits<double>::infinity()) == " [unbounded]");
  CHECK(interval_text(1.0, 0, 2.0).empty());
  CHECK(interval_text(1.0, 2.0, 1.0).empty());
  // A wide and a narrow interval: the same text in the table, Markdown, CSV and HTML.
  std::vector<Row> rows;
  rows.push_back(timed_row("baseline", 16, {100, 104, 98, 101}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("noisy", 16, {50, 300}, {100, 101}));
  compute_speedups(rows);
  Results res;
  res.rows = rows;
  res.status = ptune::report::RunStatus::kComplete;
  res.environment.device = "CPU";
  res.environment.device_kind = "cpu";
  const std::string wide = interval_text(rows[1].prev_ci);
  const std::string narrow = interval_text(printed_rate(rows[0]));
  REQUIRE(wide.find('[') != std::string::npos);
  REQUIRE(narrow.find("±") != std::string::npos);
  const std::string html = to_html({from_results(res)});
  for (const std::string& text : {render_results(res, "table"), render_results(res, "csv"), html}) {
    CHECK(text.find(wide.substr(1)) != std::string::npos);
    CHECK(text.find(narrow.substr(1)) != std::string::npos);
  }
  // Markdown: the same text, escaped so that it renders as itself.
  CHECK(render_results(res, "md").find(markdown_escape(wide.substr(1))) != std::string::npos);
  CHECK(render_results(res, "md").find(markdown_escape(narrow.substr(1))) != std::string::npos);
  CHECK(html.find(" ±" + std::to_string(static_cast<int>(rows[1].m->spread_pct))) == std::string::npos);
}

TEST_CASE("compare_runs judges the rates the tables print, and its ratio is theirs", "[report][figures]") {
  auto run_of = [](double scale) {
    std::vector<Row> rows;
    rows.push_back(timed_row("baseline", 16, {100 * scale, 104 * scale, 98 * scale, 101 * scale}, {}));
    compute_speedups(rows);
    rows.push_back(timed_row("workers", 16, {80 * scale, 82 * scale, 79 * scale, 81 * scale},
                             {90 * scale, 93 * scale, 88 * scale, 91 * scale}));
    compute_speedups(rows);
    Results res;
    res.rows = rows;
    res.status = ptune::report::RunStatus::kComplete;
    return from_results(res);
  };
  const auto old_run = run_of(1.0), new_run = run_of(1.25);  // every window 25% slower
  const auto cmp = compare_runs(old_run, new_run, 5.0);
  REQUIRE(cmp.rows.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const auto& c = cmp.rows[i];
    const double printed_old = old_run.results.rows[i].m->samples_per_s;
    const double printed_new = new_run.results.rows[i].m->samples_per_s;
    CHECK(*c.new_sps / *c.old_sps == Approx(printed_new / printed_old).epsilon(1e-4));
    CHECK(c.verdict == "slower");
    REQUIRE(c.interval_pct);
    CHECK(c.interval_pct->first <= *c.change_pct);
    CHECK(c.interval_pct->second >= *c.change_pct);
  }
  CHECK(render_run_comparison(cmp).find(
            to_json(new_run.results)["rows"][1]["samples_per_s_interval"].get<std::string>()) !=
        std::string::npos);
}

TEST_CASE("rows measured apart: vs base is Welch between the two rows, and each rate is the row's own",
          "[report][figures]") {
  std::vector<Row> rows;
  rows.push_back(timed_row("baseline", 16, {100, 104, 98, 101}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("b", 16, {90, 95, 91}, {}));
  compute_speedups(rows);
  rows.push_back(timed_row("c", 32, {150, 149, 160, 155, 151}, {}));
  compute_speedups(rows);
  // The middle row's windows cancel out of the chain: no variance counted twice.
  const auto direct = ptune::stats::welch_speedup({200, 208, 196, 202}, rows[2].m->repeat_ms);
  CHECK(rows[2].base_ci.point == Approx(direct.point));
  CHECK(rows[2].base_ci.lo == Approx(direct.lo));
  CHECK(rows[2].base_ci.hi == Approx(direct.hi));
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(printed_rate(rows[i]).point == Approx(rows[i].m->samples_per_s));
    CHECK(printed_rate(rows[i]).lo == Approx(rows[i].m->samples_per_s_ci.lo));
  }
}

TEST_CASE("achieved FLOP/s and % of peak in the table, JSON, CSV, Markdown and HTML, none on a data row",
          "[report]") {
  auto res = sample();
  for (size_t i : {0, 1, 2}) {
    res.rows[i].m->model_flops_per_sample = 2.0e9;  // the data row's must be ignored: it has no model
    res.rows[i].m->peak_flops_per_s = 1600e9;
    res.rows[i].m->peak_precision = "fp32";
    res.rows[i].m->peak_source = "calibrated achievable peak (not a datasheet figure): test";
  }
  res.rows[1].m->model_flops_per_sample.reset();
  // The row's own rate differs from the rate it prints (the base's rate times vs base): the
  // FLOP/s follow the printed one.
  res.rows[2].m->samples_per_s = 999;
  const double printed = printed_rate(res.rows[2]).point;
  REQUIRE(printed != Approx(999));
  REQUIRE(achieved_flops(res.rows[2]));
  CHECK(*achieved_flops(res.rows[2]) == Approx(2.0e9 * printed));
  CHECK(*pct_of_peak(res.rows[0]) == Approx(100.0 * 2.0e9 * 400 / 1600e9));  // 50%
  CHECK_FALSE(achieved_flops(res.rows[1]));
  {
    // A peak the row beat bounds nothing: no % of peak (bf16 where it is not native).
    auto beaten = res.rows[0];
    beaten.m->peak_flops_per_s = 400e9;
    CHECK_FALSE(pct_of_peak(beaten));
  }
  CHECK_FALSE(achieved_flops(res.rows[3]));

  const auto j = to_json(res);
  CHECK(j["rows"][0]["flops_per_s"] == 800e9);
  CHECK(j["rows"][0]["model_flops_per_sample"] == 2e9);
  CHECK(j["rows"][0]["peak_flops_per_s"] == 1600e9);
  CHECK(j["rows"][0]["pct_of_peak"] == 50.0);
  CHECK(j["rows"][0]["peak_precision"] == "fp32");
  CHECK(j["rows"][2]["flops_per_s"].get<double>() == Approx(2.0e9 * printed).epsilon(1e-9));
  CHECK(j["rows"][1]["flops_per_s"].is_null());
  CHECK(j["rows"][1]["pct_of_peak"].is_null());
  CHECK(j["rows"][3]["flops_per_s"].is_null());

  const std::string table = render_results(res, "table");
  CHECK(table.find("FLOP/s  % peak") != std::string::npos);
  CHECK(table.find("800G     50%") != std::string::npos);
  CHECK(table.find("\n% peak against: fp32 1.60T FLOP/s, calibrated achievable peak (not a datasheet "
                   "figure): test\n") != std::string::npos);
  const std::string md = render_results(res, "md");
  CHECK(md.find("| FLOP/s | % peak |") != std::string::npos);
  CHECK(md.find("| 800G | 50% |") != std::string::npos);
  CHECK(md.find("\n% peak against: fp32 1.60T FLOP/s, calibrated achievable peak (not a datasheet figure): "
                "test\n") != std::string::npos);
  const auto records = parse_csv(render_results(res, "csv"));
  const auto col = static_cast<size_t>(std::find(csv_columns().begin(), csv_columns().end(), "pct_of_peak") -
                                       csv_columns().begin());
  REQUIRE(col < csv_columns().size());
  CHECK(records[1][col] == "50.0");
  CHECK(records[2][col] == "");
  const std::string html = to_html({from_results(res)});
  CHECK(html.find("<th class=\"n\">FLOP/s</th><th class=\"n\">% peak</th>") != std::string::npos);
  CHECK(html.find(">800G</td>") != std::string::npos);
  CHECK(html.find(">50%</td>") != std::string::npos);
  CHECK(html.find(
            "% peak against: fp32 1.60T FLOP/s, calibrated achievable peak (not a datasheet figure): test") !=
        std::string::npos);
  CHECK(j["rows"][0]["peak_under_load"] == false);
  CHECK(j["rows"][3]["peak_under_load"].is_null());  // the data row has no peak

  // A peak calibrated under competing load is no ceiling: no % of peak, '?' and the reason, in
  // every format.
  auto loaded = res;
  for (size_t i : {0, 1, 2}) loaded.rows[i].m->peak_under_load = true;
  CHECK_FALSE(pct_of_peak(loaded.rows[0]));
  CHECK(achieved_flops(loaded.rows[0]));
  const auto lj = to_json(loaded);
  CHECK(lj["rows"][0]["pct_of_peak"].is_null());
  CHECK(lj["rows"][0]["peak_under_load"] == true);
  CHECK(lj["rows"][0]["flops_per_s"] == 800e9);
  const std::string note =
      "\n% peak against: fp32 1.60T FLOP/s, calibrated achievable peak (not a datasheet figure): "
      "test: no ceiling, so % peak is left out ('?'); calibrated again when the cores are quiet\n";
  const std::string lt = render_results(loaded, "table");
  CHECK(lt.find("800G       ?") != std::string::npos);
  CHECK(lt.find(note) != std::string::npos);
  const std::string lmd = render_results(loaded, "md");
  CHECK(lmd.find("| 800G | ? |") != std::string::npos);
  CHECK(lmd.find(note) != std::string::npos);
  CHECK(parse_csv(render_results(loaded, "csv"))[1][col] == "");
  const std::string lhtml = to_html({from_results(loaded)});
  CHECK(lhtml.find(">800G</td><td class=\"n\">?</td>") != std::string::npos);
  CHECK(lhtml.find("test: no ceiling, so % peak is left out (&#39;?&#39;)") != std::string::npos);
}

TEST_CASE("FLOP/s are printed with an SI prefix and three significant digits", "[report]") {
  CHECK(flops_text(85.34e9) == "85.3G");
  CHECK(flops_text(1.214e12) == "1.21T");
  CHECK(flops_text(512e6) == "512M");
  CHECK(flops_text(999.6e9) == "1.00T");
  CHECK(flops_text(7.0) == "7.00");
}

TEST_CASE("load_run: a folder, and a row's figure of another type, are named, not read as blank",
          "[report]") {
  ptune::test::TempDir dir;
  CHECK_THROWS_WITH(
      load_run(dir.path.string()),
      "results '" + dir.path.string() + "' is a folder; name a results file (ptune sweep --out FILE.json)");
  Results res;
  res.rows.push_back(timed_row("baseline", 16, {100, 104, 98, 101}, {}));
  compute_speedups(res.rows);
  res.status = ptune::report::RunStatus::kComplete;
  auto j = to_json(res);
  j["rows"][0]["samples_per_s"] = "fast";
  const std::string path = dir.write("bad.json", j.dump());
  CHECK_THROWS_WITH(
      load_run(path),
      path +
          ": rows[0].samples_per_s: \"fast\" is not a number (a results file holds numbers or null there)");
  // Numbers no run gives: negative, or so large that every ratio overflows; a window that is not
  // a time.
  j["rows"][0]["samples_per_s"] = 1e308;
  CHECK_THROWS_WITH(
      load_run(dir.write("huge.json", j.dump())),
      dir.file("huge.json") +
          ": rows[0].samples_per_s: 1e+308 is not a figure a run gives (a number from 0 to 1e15)");
  j["rows"][0]["samples_per_s"] = -5;
  CHECK_THROWS_WITH(load_run(dir.write("neg.json", j.dump())),
                    dir.file("neg.json") +
                        ": rows[0].samples_per_s: -5 is not a figure a run gives (a number from 0 to 1e15)");
  j["rows"][0]["samples_per_s"] = 100;
  j["rows"][0]["repeat_ms_per_step"] = nlohmann::json::array({"a"});
  CHECK_THROWS_WITH(
      load_run(dir.write("win.json", j.dump())),
      dir.file("win.json") +
          ": rows[0].repeat_ms_per_step: \"a\" is not a window's time (a number from 0 to 1e15)");
}
