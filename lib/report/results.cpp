#include "report/results.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/numbers.hpp"
#include "core/table.hpp"
#include "report/changes.hpp"
#include "report/figures.hpp"
#include "report/html.hpp"
#include "report/run_file.hpp"

namespace ptune::report {
namespace {

using Json = nlohmann::ordered_json;

using numbers::fixed;

std::string mib(int64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 0) + " MiB"; }

/// "1.45x ±4% faster": a speedup, its interval's half-width and its verdict.
std::string speedup_text(double v, const stats::Interval& ci, const std::string& verdict) {
  std::string s = fixed(v, 2) + "x" + interval_text(ci);
  if (!verdict.empty()) s += " " + verdict;
  return s;
}

/// The load cell: "-" on a quiet machine, else what competed ("+0.9 cores", "steal 7%", "GPU
/// shared"), and "GPU throttled" where the GPU slowed down (its note says how, under the table).
std::string load_text(const system::LoadReport& l) {
  std::string s;
  if (l.under_load) {
    if (l.gpu_other_processes && *l.gpu_other_processes > 0)
      s = "GPU shared";
    else if (l.steal_pct >= system::load_thresholds(l.cores).steal_pct)
      s = "steal " + fixed(l.steal_pct, 0) + "%";
    else
      s = "+" + fixed(l.other_cpu_cores, 1) + " cores";
  }
  if (!l.gpu_notes.empty()) s += (s.empty() ? "" : ", ") + std::string("GPU throttled");
  if (s.empty()) return l.sampled ? "-" : "?";
  return s;
}

/// The cells of one row in table/csv/md order; `gpu` adds GPU busy and peak memory.
std::vector<std::string> cells(const Row& row, size_t index, bool gpu) {
  std::vector<std::string> c = {std::to_string(index), row.name, changes_text(row.changes)};
  // A program's row: its loader is its own, unseen ("-").
  const std::string workers =
      row.arch == "program" || !row.num_workers ? "-" : std::to_string(*row.num_workers);
  if (!row.m) {
    c.insert(c.end(), {"", workers, "", "", "", "", "", "", "", ""});
    c.insert(c.end(), {"", ""});  // FLOP/s, % peak
    if (gpu) c.insert(c.end(), {"", ""});
    return c;
  }
  const auto& m = *row.m;
  // A file of another program may hold samples/s alone: what it does not say is "-".
  c.push_back(m.batch_size > 0 ? std::to_string(m.batch_size) : "-");
  c.push_back(workers);
  const stats::Interval rate = printed_rate(row);
  const double ms = printed_ms_per_step(row);
  c.push_back(ms > 0 ? fixed(ms, 1) : "-");
  c.push_back(fixed(rate.point, 1) + interval_text(rate));
  c.push_back(speedup_text(row.speedup_vs_prev, row.prev_ci, row.verdict_prev));
  c.push_back(speedup_text(row.speedup_vs_base, row.base_ci, row.verdict_base));
  c.push_back(load_text(m.load));
  c.push_back(m.split ? fixed(m.split->data_wait_pct, 0) + "%" : "-");
  c.push_back(m.split ? fixed(m.split->h2d_pct, 0) + "%" : "-");
  c.push_back(m.loss ? fixed(*m.loss, 3) : "-");
  const auto achieved = achieved_flops(row);
  const auto of_peak = pct_of_peak(row);
  c.push_back(achieved ? flops_text(*achieved) : "-");
  c.push_back(of_peak ? fixed(*of_peak, *of_peak < 10 ? 1 : 0) + "%"
              : achieved && m.peak_flops_per_s && m.peak_under_load ? "?"
                                                                    : "-");
  if (gpu) {
    c.push_back(m.gpu_busy_pct ? fixed(*m.gpu_busy_pct, 0) + "%" : "-");
    c.push_back(m.peak_mem_bytes ? mib(*m.peak_mem_bytes) : "-");
  }
  return c;
}

bool any_gpu(const Results& r) {
  for (const auto& row : r.rows)
    if (row.m && (row.m->gpu_busy_pct || row.m->peak_mem_bytes)) return true;
  return false;
}

/// Whether the rates are steps/s: a program's rows whose config gives no program.samples_per_step.
bool counts_steps(const Results& r) {
  const auto program = r.config.find("program");
  if (program == r.config.end() || !program->is_object()) return false;
  const auto command = program->find("command"), per_step = program->find("samples_per_step");
  return command != program->end() && command->is_array() && !command->empty() &&
         (per_step == program->end() || !per_step->is_number() || per_step->get<double>() <= 0);
}

std::vector<table::Column> columns(bool gpu, bool steps = false) {
  std::vector<table::Column> cols = {{"#", true},
                                     {"row", false},
                                     {"change", false},
                                     {"batch", true},
                                     {"workers", true},
                                     {"ms/step", true},
                                     {steps ? "steps/s" : "samples/s", true},
                                     {"vs prev", true},
                                     {"vs base", true},
                                     {"load", true},
                                     {"data wait", true},
                                     {"h2d", true},
                                     {"loss", true},
                                     {"FLOP/s", true},
                                     {"% peak", true}};
  if (gpu) cols.insert(cols.end(), {{"GPU busy", true}, {"peak mem", true}});
  return cols;
}

/// The lines under the table: per row its status (when not ok) or diagnosis, its notes, its
/// trace; each as (row index, row name, text).
struct TrailLine {
  size_t index;
  std::string name, text;
};

std::vector<TrailLine> trail_lines(const Results& r) {
  std::vector<TrailLine> lines;
  for (size_t k = 0; k < r.rows.size(); ++k) {
    const Row& row = r.rows[k];
    const size_t i = row.index.value_or(k);  // its place in the sweep, as the table's #
    if (!row.status.ok_state())
      lines.push_back({i, row.name, row.status.text()});
    else if (!row.diagnosis.empty())
      lines.push_back({i, row.name, row.diagnosis});
    for (const auto& n : row.notes) lines.push_back({i, row.name, "note: " + n});
    if (row.m && !row.m->trace_path.empty()) lines.push_back({i, row.name, "trace " + row.m->trace_path});
  }
  return lines;
}

std::string trail(const Results& r) {
  std::string s;
  for (const auto& l : trail_lines(r))
    s += "  " + std::to_string(l.index) + " " + l.name + ": " + l.text + "\n";
  return s;
}

/// "AMD EPYC (cpu), LibTorch 2.11.0, 2 CPU threads; CPU: ..."; what a file of another program does
/// not say is left out.
std::string device_line(const Environment& e) {
  std::string s = e.device.empty() ? "unknown device" : e.device;
  if (!e.device_kind.empty()) s += " (" + e.device_kind + ")";
  if (!e.torch.empty()) s += ", LibTorch " + e.torch + (e.cuda.empty() ? "" : " (CUDA " + e.cuda + " build)");
  if (e.cpu_threads > 0)
    s += ", " + std::to_string(e.cpu_threads) + (e.cpu_threads == 1 ? " CPU thread" : " CPU threads");
  if (e.world_size > 1) s += ", " + std::to_string(e.world_size) + " processes";
  return s + (e.cpu ? "; CPU: " + system::summary(*e.cpu) : "");
}

/// The line under the table that says how to read the intervals and verdicts.
std::string legend(const Results& r) {
  const Row* first = nullptr;
  for (const auto& row : r.rows)
    if (row.m && (row.prev_ci.valid() || row.m->samples_per_s_ci.valid())) {
      first = &row;
      break;
    }
  if (!first) return "";
  const auto& rule = first->rule;
  return "± and [lo, hi] are confidence intervals: " + stats::level_text(stats::kRowLevel) +
         " for samples/s (the first row's own rate times vs base, so every ratio of two rates is a speedup "
         "printed between them), " +
         stats::level_text(stats::kSpeedupLevel) + " for speedups (" +
         stats::level_text(stats::kSpeedupLevelUnderLoad) +
         " where measured under competing load; neighbours timed in alternating windows); faster/slower: the "
         "whole interval lies beyond 1.00x ±" +
         fixed(rule.floor_pct, 0) + "%; within noise: it lies inside 1.00x ±" + fixed(rule.target_pct, 0) +
         "%; undecided: neither, when the row's time ran out";
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// A JSON value as one CSV cell: "" for null, numbers as JSON writes them, strings as they
/// are, lists of strings joined with "; ", objects as JSON.
std::string csv_cell(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); })) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "; ") + x.get<std::string>();
    return s;
  }
  return v.dump();
}

}  // namespace

const std::vector<std::string>& formats() {
  static const std::vector<std::string> kFormats = {"table", "json", "csv", "md"};
  return kFormats;
}

namespace {
/// Samples one step of `r` processes (all ranks): speedups compare time per sample.
double samples_per_step(const Row& r) {
  const double sps = r.m->samples_per_s * r.m->ms_per_step / 1000.0;
  return sps > 0 ? sps : 1.0;
}
}  // namespace

stats::Interval printed_rate(const Row& row) {
  if (row.rate.point > 0) return row.rate;
  if (!row.m) return {};
  if (row.m->samples_per_s_ci.point > 0) return row.m->samples_per_s_ci;
  const double v = row.m->samples_per_s;  // a measurement without an interval: its point only
  return stats::Interval{v, v, v, 0, 0, {}};
}

double printed_ms_per_step(const Row& row) {
  const double rate = printed_rate(row).point;
  return row.m && row.m->ms_per_step > 0 && rate > 0 ? 1000.0 * samples_per_step(row) / rate : 0.0;
}

std::optional<double> achieved_flops(const Row& row) {
  if (!row.m || !row.m->model_flops_per_sample) return std::nullopt;
  const double rate = printed_rate(row).point;
  if (!(rate > 0)) return std::nullopt;
  return *row.m->model_flops_per_sample * rate;
}

std::optional<double> pct_of_peak(const Row& row) {
  const auto achieved = achieved_flops(row);
  if (!achieved || !row.m->peak_flops_per_s || !(*row.m->peak_flops_per_s > 0)) return std::nullopt;
  // A peak calibrated under competing load bounds nothing: load pulls it down by any amount.
  if (row.m->peak_under_load) return std::nullopt;
  const double pct = 100.0 * *achieved / *row.m->peak_flops_per_s;
  // A calibrated peak below what the row achieved bounds nothing (bf16 where it is not native:
  // the matrix product's fallback is slower than the convolutions' kernels): no figure.
  if (pct > 100.0) return std::nullopt;
  return pct;
}

std::string flops_text(double v) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  size_t p = 0;
  while (std::abs(v) >= 999.5 && p + 1 < std::size(kPrefix)) v /= 1000.0, ++p;
  const int digits = std::abs(v) >= 99.95 ? 0 : std::abs(v) >= 9.995 ? 1 : 2;
  return fixed(v, digits) + kPrefix[p];
}

std::string peak_line(const Results& r) {
  std::vector<std::string> seen;
  std::string s;
  for (const auto& row : r.rows) {
    if (!row.m || !row.m->peak_flops_per_s) continue;
    const std::string text = row.m->peak_precision + " " + flops_text(*row.m->peak_flops_per_s) +
                             " FLOP/s, " + row.m->peak_source +
                             (row.m->peak_under_load ? kPeakUnderLoadNote : "");
    if (std::find(seen.begin(), seen.end(), text) != seen.end()) continue;
    seen.push_back(text);
    s += (s.empty() ? "% peak against: " : "; ") + text;
  }
  return s;
}

namespace {

constexpr const char* kSpeedChangePrefix = "its own windows ran at ";

/// The note on a row whose own windows ran at a rate outside the interval of the samples/s it
/// prints (its base's rate times vs base): the speed of the process changed since the base row
/// (its page-fault state, the clock, load). For rows timed in pairs the note adds how fast the
/// previous row's settings ran in this row's pairs against their own row, the step of that change
/// at this row. The speedups hold, since each compares windows timed together. "" where the
/// windows' rate lies inside the printed interval.
std::string speed_change_note(const Row& last, const Row& before) {
  if (!last.m || !last.rate.valid() || !(last.m->samples_per_s > 0)) return "";
  const double own = last.m->samples_per_s;
  if (own >= last.rate.lo && own <= last.rate.hi) return "";
  std::string s =
      std::string(kSpeedChangePrefix) + fixed(own, 1) + " samples/s, not the " + fixed(last.rate.point, 1) +
      interval_text(last.rate) +
      " printed (its base's rate times vs base): the process's speed changed since the base row, and "
      "the speedups hold (each compares windows timed together)";
  if (before.m && last.prev_ms.size() >= 2 && before.m->repeat_ms.size() >= 2) {
    try {
      const bool loaded = last.m->load.under_load || before.m->load.under_load;
      const stats::Interval iv =
          stats::speedup_interval(before.m->repeat_ms, before.m->repeat_process, last.prev_ms,
                                  last.prev_process, false, stats::speedup_level(loaded));
      if (iv.point > 0)
        s += "; the previous row's settings ran " + fixed(iv.point, 2) + "x" + interval_text(iv) +
             " as fast in its pairs as in their own row";
    } catch (const std::invalid_argument&) {
      // process lists of another length: no comparison to offer
    }
  }
  return s;
}

}  // namespace

void compute_speedups(std::vector<Row>& rows) {
  if (rows.empty() || !rows.back().m) return;
  Row& last = rows.back();
  const size_t k = rows.size() - 1;
  last.compared_with.reset();
  last.verdict_prev.clear();
  last.verdict_base.clear();
  last.rate = stats::Interval{};
  last.rate = printed_rate(last);
  std::vector<size_t> chain;  // the ok rows of this mode and model.arch before it, in order
  for (size_t i = 0; i < k; ++i)
    if (rows[i].m && rows[i].mode == last.mode && rows[i].arch == last.arch) chain.push_back(i);
  if (chain.empty()) {
    last.speedup_vs_prev = last.speedup_vs_base = 1.0;
    last.prev_ci = last.base_ci = stats::Interval{1.0, 1.0, 1.0, 0, 0, {}};
    last.prev_ms.clear();
    return;
  }
  last.compared_with = chain.back();
  if (last.prev_ms.size() != last.m->repeat_ms.size()) last.prev_ms.clear();  // not paired: apart
  if (last.prev_process.size() != last.prev_ms.size()) last.prev_process.clear();
  std::vector<ChainRow> links(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].m) continue;
    const auto& m = *rows[i].m;
    links[i] = ChainRow{samples_per_step(rows[i]),
                        m.repeat_ms,
                        m.repeat_process.size() == m.repeat_ms.size() ? m.repeat_process : std::vector<int>{},
                        rows[i].prev_ms,
                        rows[i].prev_process,
                        rows[i].compared_with,
                        m.load.under_load};
  }
  const int64_t pairs = static_cast<int64_t>(last.m->repeat_ms.size());
  bool prev_loaded = false, base_loaded = false;
  const auto prev_terms = link_terms(links, k, &prev_loaded);
  last.prev_ci = stats::sum_interval(prev_terms, stats::speedup_level(prev_loaded), pairs);
  last.speedup_vs_prev = last.prev_ci.point;
  last.verdict_prev = stats::verdict_name(stats::verdict_of(last.prev_ci, last.rule));
  // Where the previous row is the base, vs base is the same measurement.
  if (chain.size() == 1) {
    last.base_ci = last.prev_ci;
  } else {
    base_terms(links, k, &base_loaded);
    last.base_ci = base_interval(links, k, stats::speedup_level(base_loaded), pairs);
  }
  last.speedup_vs_base = last.base_ci.point;
  last.verdict_base = stats::verdict_name(stats::verdict_of(last.base_ci, last.rule));
  const auto rate = stats::sum_interval(rate_terms(links, k), stats::kRowLevel, pairs);
  if (rate.point > 0) last.rate = rate;
  // Once per row, however often its speedups are computed again.
  last.notes.erase(std::remove_if(last.notes.begin(), last.notes.end(),
                                  [](const std::string& n) { return n.rfind(kSpeedChangePrefix, 0) == 0; }),
                   last.notes.end());
  if (std::string n = speed_change_note(last, rows[chain.back()]); !n.empty())
    last.notes.push_back(std::move(n));
}

void note_semantics(Row& row, const std::optional<double>& base_loss) {
  static const std::vector<std::string> kSemantic = {"loader.batch_size", "optim.amp",  "optim.lr",
                                                     "optim.kind",        "model.arch", "data.image_size",
                                                     "dist.accumulate"};
  if (!row.m || !row.m->loss || !base_loss) return;
  for (const auto& key : kSemantic) {
    if (!row.changes.contains(key)) continue;
    // Rows run as many steps as their time allows: their last losses do not compare.
    row.notes.push_back(
        key +
        " changes training semantics: its loss is not the first row's to compare (rows run "
        "different numbers of steps); measure.convergence_steps trains each row's fresh model the "
        "same steps and compares the loss curves");
  }
}

std::string format_of_path(const std::string& path) {
  const std::string p = lower(path);
  if (ends_with(p, ".csv")) return "csv";
  if (ends_with(p, ".md")) return "md";
  if (ends_with(p, ".html") || ends_with(p, ".htm")) return "html";
  return "json";
}

std::string csv_companion_path(const std::string& csv_path) {
  const size_t slash = csv_path.find_last_of('/');
  const size_t dot = csv_path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (has_ext ? csv_path.substr(0, dot) : csv_path) + ".env.json";
}

Json csv_companion(const Results& r, const std::string& csv_path) {
  Json doc = to_json(r);
  doc.erase("rows");
  const size_t slash = csv_path.find_last_of('/');
  doc["csv"] = slash == std::string::npos ? csv_path : csv_path.substr(slash + 1);
  return doc;
}

void write_results(const std::string& path, const Results& r) {
  const std::string fmt = format_of_path(path);
  if (fmt == "html") {
    files::write_atomically(path, "--out", to_html({from_results(r)}));
    return;
  }
  files::write_atomically(path, "--out", render_results(r, fmt));
  if (fmt == "csv")
    files::write_atomically(csv_companion_path(path), "--out", csv_companion(r, path).dump(2) + "\n");
}

namespace {

/// The results as CSV: the columns of csv_columns(), then a line per row of the JSON.
std::string render_csv(const Results& r) {
  table::Table t;
  for (const auto& c : csv_columns()) t.columns.push_back({c});
  const Json doc = to_json(r);
  for (size_t i = 0; i < doc["rows"].size(); ++i) {
    const Json& row = doc["rows"][i];
    std::vector<std::string> cells;
    for (const auto& c : t.columns)
      cells.push_back(c.header == "index" && row["index"].is_null() ? std::to_string(i)
                                                                    : csv_cell(row[c.header]));
    t.rows.push_back(std::move(cells));
  }
  return table::csv(t);
}

/// The results as a Markdown table, with the device, peak and legend lines and the row notes.
std::string render_markdown(const Results& r, std::vector<std::vector<std::string>> body,
                            const std::vector<table::Column>& cols) {
  // A row not measured says how it ended in its batch column.
  for (size_t i = 0; i < body.size(); ++i)
    if (!r.rows[i].m) body[i][3] = r.rows[i].status.text();
  std::ostringstream os;
  os << table::markdown({cols, std::move(body)});
  os << "\nDevice: " << table::markdown_escape(device_line(r.environment)) << "\n";
  if (const std::string p = peak_line(r); !p.empty()) os << "\n" << table::markdown_escape(p) << "\n";
  if (const std::string l = legend(r); !l.empty()) os << "\n" << table::markdown_escape(l) << "\n";
  const auto lines = trail_lines(r);
  if (!lines.empty()) os << "\n";
  for (const auto& l : lines)
    os << "- " << l.index << " " << table::markdown_escape(l.name) << ": " << table::markdown_escape(l.text)
       << "\n";
  return os.str();
}

/// `text` in the ANSI colour `code`.
std::string paint(const std::string& text, const char* code) {
  return std::string("\033[") + code + "m" + text + "\033[0m";
}

/// The terminal's colours: verdicts green (faster), red (slower) or yellow (undecided), the
/// load column yellow when the row competed, a row not measured yellow (skipped) or red.
void paint_cells(const Results& r, std::vector<std::vector<std::string>>& body) {
  for (size_t i = 0; i < body.size(); ++i) {
    const Row& row = r.rows[i];
    if (!row.m) {  // its state, coloured as its line under the table
      const bool skipped = row.status.is(RowStatus::State::kSkipped);
      body[i][6] = paint(body[i][6], skipped ? "33" : "31");
      continue;
    }
    for (size_t k : {size_t{7}, size_t{8}}) {
      const std::string& verdict = k == 7 ? row.verdict_prev : row.verdict_base;
      std::string& cell = body[i][k];
      if (verdict == "faster")
        cell = paint(cell, "32");
      else if (verdict == "slower")
        cell = paint(cell, "31");
      else if (verdict == "undecided")
        cell = paint(cell, "33");
    }
    if (row.m->load.under_load || !row.m->load.gpu_notes.empty()) body[i][9] = paint(body[i][9], "33");
  }
}

/// The lines under the table, skipped rows yellow and failed rows red when `color`.
std::string painted_trail(const Results& r, bool color) {
  std::string t = trail(r);
  if (!color) return t;
  std::istringstream lines(t);
  std::string line, painted;
  while (std::getline(lines, line)) {
    if (line.find(": skipped: ") != std::string::npos)
      line = paint(line, "33");
    else if (line.find(": failed: ") != std::string::npos)
      line = paint(line, "31");
    painted += line + "\n";
  }
  return painted;
}

/// The aligned terminal table, with the device, peak and legend lines and the row notes.
std::string render_terminal(const Results& r, std::vector<std::vector<std::string>> body,
                            const std::vector<table::Column>& cols, bool color) {
  // A row not measured says how it ended where its rate would be ("skipped"); why is under the table.
  for (size_t i = 0; i < body.size() && i < r.rows.size(); ++i)
    if (!r.rows[i].m) body[i][6] = r.rows[i].status.word();
  if (color) paint_cells(r, body);
  std::ostringstream os;
  os << table::text({cols, std::move(body)});
  os << "device: " << device_line(r.environment) << "\n";
  if (const std::string p = peak_line(r); !p.empty()) os << p << "\n";
  if (const std::string l = legend(r); !l.empty()) os << l << "\n";
  os << painted_trail(r, color);
  return os.str();
}

}  // namespace

std::string render_results(const Results& r, const std::string& format, bool color) {
  if (format == "json") return to_json(r).dump(2) + "\n";
  if (format == "csv") return render_csv(r);
  const bool gpu = any_gpu(r);
  std::vector<std::vector<std::string>> body;
  for (size_t i = 0; i < r.rows.size(); ++i)
    body.push_back(cells(r.rows[i], r.rows[i].index.value_or(i), gpu));
  const auto cols = columns(gpu, counts_steps(r));
  if (format == "md") return render_markdown(r, body, cols);
  return render_terminal(r, std::move(body), cols, color);
}

std::string changes_text(const Json& changes) {
  if (!changes.is_object() || changes.empty()) return "-";
  std::string s;
  for (auto it = changes.begin(); it != changes.end(); ++it)
    s += (s.empty() ? "" : ", ") + it.key() + "=" +
         (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return s;
}

}  // namespace ptune::report
