#include "report/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "core/errors.hpp"
#include "core/numbers.hpp"
#include "core/stats.hpp"
#include "core/table.hpp"
#include "report/changes.hpp"
#include "report/figures.hpp"
#include "report/results.hpp"
#include "report/status.hpp"
#include "report/svg.hpp"

namespace ptune::report {
namespace {

using table::html_escape;

using Json = nlohmann::ordered_json;

// Okabe-Ito: distinguishable with every common colour-vision deficiency, and in greyscale print.
const char* const kRunColors[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                  "#56B4E9", "#D55E00", "#7F7F7F", "#000000"};
const char* const kWaitColor = "#E69F00";
const char* const kCopyColor = "#56B4E9";
const char* const kComputeColor = "#009E73";
const char* const kBusyColor = "#0072B2";
const char* const kIdleColor = "#D9D9D9";

// Chart geometry (px of the SVG's viewBox; the page scales it down to fit).
constexpr double kWidth = 960, kLabel = 250, kBars = 410;

std::string run_color(size_t k) { return kRunColors[k % (sizeof kRunColors / sizeof *kRunColors)]; }

using numbers::fixed;
using numbers::grouped;

std::string rate_text(double v) { return grouped(v, v >= 1000 ? 0 : 1); }

std::string bytes_text(double b) {
  const double gib = b / (1024.0 * 1024 * 1024);
  if (gib >= 10) return fixed(gib, 0) + " GiB";
  if (gib >= 1) return fixed(gib, 1) + " GiB";
  return fixed(b / (1024.0 * 1024), 0) + " MiB";
}

std::string ratio_text(double v) { return "×" + fixed(v, 2); }

/// A row's samples/s as its file holds it; 0 for a row without numbers.
double rate_of(const Row& row) { return row.m ? row.m->samples_per_s : 0; }

/// A row's samples/s with its interval, as every table prints it: "1,234/s ±1.8%" (no "/s"
/// unless `unit`).
std::string rate_cell_text(const Row& row, bool unit = false) {
  return rate_text(rate_of(row)) + (unit ? "/s" : "") + interval_text(row.m->samples_per_s_ci);
}

/// At most `n` code points of `s`, with "…" when cut; newlines as spaces.
std::string shorten(const std::string& s, size_t n) {
  std::string o;
  size_t points = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && points++ == n) return o + "…";
    o += c == '\n' || c == '\r' || c == '\t' ? ' ' : static_cast<char>(c);
  }
  return o;
}

std::string status_class(const RowStatus& s) {
  if (s.is(RowStatus::State::kFailed)) return "failed";
  if (s.is(RowStatus::State::kSkipped)) return "skipped";
  if (!s.ok_state()) return "note";
  return "ok";
}

/// One row of the report: the rows of every run with that name (nullptr where a run has none).
struct Line {
  std::string key;
  int occurrence = 0;
  std::string name, mode, arch;
  std::vector<const Row*> rows;  // per run
  size_t index = 0;              // its position in the report
};

/// Every run's rows matched by match_key (the k-th of a name with the k-th): the first run's
/// rows in order, each later run's new rows after the row they follow there.
std::vector<Line> match_lines(const std::vector<RunFile>& runs) {
  std::vector<Line> lines;
  for (size_t r = 0; r < runs.size(); ++r) {
    std::map<std::string, int> seen;
    size_t pos = 0;  // insert after the last line matched in this run
    for (const Row& row : runs[r].results.rows) {
      const std::string& name = row.name;
      const std::string key = match_key(name);
      const int occ = seen[key]++;
      auto it = std::find_if(lines.begin(), lines.end(),
                             [&](const Line& l) { return l.key == key && l.occurrence == occ; });
      if (it == lines.end()) {
        Line l;
        l.key = key;
        l.occurrence = occ;
        l.name = name;
        l.mode = config::name(row.mode);
        l.arch = row.arch;
        l.rows.assign(runs.size(), nullptr);
        it = lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(std::min(pos, lines.size())), l);
      }
      it->rows[r] = &row;
      pos = static_cast<size_t>(it - lines.begin()) + 1;
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) lines[i].index = i;
  return lines;
}

/// The smallest of 1, 2, 2.5, 5 x 10^k at least `x`.
double nice_step(double x) {
  if (x <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= x * (1 - 1e-9)) return m * p;
  return 10 * p;
}

std::string tick_text(double v, double step) { return grouped(v, step >= 1 ? 0 : step >= 0.1 ? 1 : 2); }

/// A horizontal axis over [0, max] from x0 across `width` px at the top (y) and grid lines down
/// to `bottom`; returns the SVG.
std::string axis(double x0, double width, double max, double step, double y, double bottom,
                 const std::string& unit) {
  std::ostringstream os;
  os << "<g class=\"axis\">";
  for (double v = 0; v <= max * (1 + 1e-9); v += step) {
    const double x = x0 + width * v / max;
    os << svg::element("line", {{"class", "grid"},
                                {"x1", fixed(x, 2)},
                                {"x2", fixed(x, 2)},
                                {"y1", fixed(y + 4, 1)},
                                {"y2", fixed(bottom, 1)}});
    os << svg::element("text", {{"x", fixed(x, 2)}, {"y", fixed(y, 1)}, {"text-anchor", "middle"}},
                       html_escape(tick_text(v, step)));
  }
  os << svg::element("text", {{"x", fixed(x0 - 8, 1)}, {"y", fixed(y, 1)}, {"text-anchor", "end"}},
                     html_escape(unit))
     << "</g>";
  return os.str();
}

std::string row_label(const Line& l, double x, double y) {
  return svg::element("text",
                      {{"class", "label"}, {"x", fixed(x, 1)}, {"y", fixed(y, 1)}, {"text-anchor", "end"}},
                      svg::title(l.name) + "<tspan class=\"idx\">#" + std::to_string(l.index) + "</tspan> " +
                          html_escape(shorten(l.name, 32)));
}

// ---- the sections -------------------------------------------------------------------------

std::string legend_html(const std::vector<RunFile>& runs) {
  std::ostringstream os;
  os << "<ul class=\"runs\">";
  for (size_t k = 0; k < runs.size(); ++k) {
    const Environment& e = runs[k].results.environment;
    const size_t rows = runs[k].results.rows.size();
    const std::string status = run_status_text(runs[k].results.status);
    os << "<li><span class=\"swatch\" style=\"background:" << run_color(k) << "\"></span><b>"
       << html_escape(runs[k].label) << "</b>"
       << (k == 0 && runs.size() > 1 ? " <span class=\"muted\">(reference)</span>" : "");
    if (!runs[k].path.empty()) os << " <span class=\"muted\">" << html_escape(runs[k].path) << "</span>";
    os << " — " << html_escape(e.device.empty() ? "unknown device" : e.device);
    if (!e.device_kind.empty()) os << " (" << html_escape(e.device_kind) << ")";
    os << ", " << rows << (rows == 1 ? " row" : " rows");
    if (status != "complete") os << " <span class=\"status-skipped\">[" << html_escape(status) << "]</span>";
    os << "</li>";
  }
  os << "</ul>";
  for (const auto& r : runs) {
    if (r.results.status == RunStatus::kRunning)
      os << "<p class=\"banner\">" << html_escape(r.label) << ": the sweep is still running; "
         << r.results.rows.size() << " row(s) so far (the page is rewritten after every row).</p>";
    else if (r.results.status == RunStatus::kInterrupted)
      os << "<p class=\"banner\">" << html_escape(r.label)
         << ": the sweep was interrupted; its finished rows are shown.</p>";
  }
  return os.str();
}

/// The geometry of the samples/s charts: a bar per run, a group of bars per line.
struct ThroughputLayout {
  double bar_h, bar_gap = 3, group_gap = 12, top = 30;
  explicit ThroughputLayout(bool multi) : bar_h(multi ? 14 : 18) {}
};

/// The samples/s charts: a (mode, model.arch) pair per chart in the order the lines first give
/// them, and the model.arch names.
std::pair<std::vector<std::pair<std::string, std::string>>, std::vector<std::string>> throughput_charts(
    const std::vector<Line>& lines) {
  std::vector<std::pair<std::string, std::string>> charts;  // mode, arch
  std::vector<std::string> archs;
  for (const auto& l : lines) {
    if (std::find(charts.begin(), charts.end(), std::make_pair(l.mode, l.arch)) == charts.end())
      charts.emplace_back(l.mode, l.arch);
    if (std::find(archs.begin(), archs.end(), l.arch) == archs.end()) archs.push_back(l.arch);
  }
  return {charts, archs};
}

/// Run `k`'s bar of line `l` at `y`, with its text: samples/s, against the row before, the first
/// row and the reference run; the row's status in words where it has no number.
std::string throughput_bar(const std::vector<RunFile>& runs, const Line& l, size_t k, double y, double bar_h,
                           double axis_max) {
  const bool multi = runs.size() > 1;
  const Row* r = l.rows[k];
  const double text_y = y + bar_h / 2 + 4;
  if (!r)
    return svg::element("text",
                        {{"class", "nobar muted"}, {"x", svg::num(kLabel + 4)}, {"y", fixed(text_y, 1)}},
                        (multi ? html_escape(runs[k].label) + ": " : "") + "not in this run");
  if (!r->m) {
    const std::string status = r->status.text();
    return svg::element("text",
                        {{"class", "nobar status-" + status_class(r->status)},
                         {"x", svg::num(kLabel + 4)},
                         {"y", fixed(text_y, 1)}},
                        svg::title(status) + (multi ? html_escape(runs[k].label) + ": " : "") +
                            html_escape(shorten(status, 90)));
  }
  const double v = rate_of(*r);
  const double w = axis_max > 0 ? kBars * v / axis_max : 0;
  std::string text = rate_cell_text(*r, true);
  text += " · " + ratio_text(r->speedup_vs_prev) + " prev";
  text += " · " + ratio_text(r->speedup_vs_base) + " base";
  if (k > 0 && l.rows[0] && rate_of(*l.rows[0]) > 0)
    text += " · " + ratio_text(v / rate_of(*l.rows[0])) + " " + shorten(runs[0].label, 16);
  return svg::element("rect",
                      {{"class", "bar"},
                       {"x", svg::num(kLabel)},
                       {"y", fixed(y, 1)},
                       {"width", fixed(w, 2)},
                       {"height", svg::num(bar_h)},
                       {"fill", run_color(k)},
                       {"data-run", std::to_string(k)},
                       {"data-row", l.name},
                       {"data-value", Json(v).dump()}},
                      svg::title(runs[k].label + ": " + l.name + ": " + rate_text(v) + " samples/s")) +
         svg::element("text", {{"class", "value"}, {"x", fixed(kLabel + w + 6, 1)}, {"y", fixed(text_y, 1)}},
                      html_escape(text));
}

/// The samples/s chart of the lines of one mode and model.arch, `caption` its caption.
std::string throughput_chart(const std::vector<RunFile>& runs, const std::vector<Line>& lines,
                             const std::string& mode, const std::string& arch, const std::string& caption) {
  const ThroughputLayout g(runs.size() > 1);
  std::vector<const Line*> ls;
  double max = 0;
  for (const auto& l : lines) {
    if (l.mode != mode || l.arch != arch) continue;
    ls.push_back(&l);
    for (const Row* r : l.rows)
      if (r && r->m) max = std::max(max, rate_of(*r));
  }
  const double step = nice_step(max > 0 ? max / 4 : 1);
  const double axis_max = max > 0 ? std::ceil(max / step - 1e-9) * step : step;
  const double group_h = runs.size() * (g.bar_h + g.bar_gap) - g.bar_gap;
  double height = g.top;
  for (size_t i = 0; i < ls.size(); ++i) height += group_h + g.group_gap;
  height += 4;
  std::ostringstream os;
  os << "<figure><figcaption>" << html_escape(caption) << "</figcaption>"
     << svg::open("svg", {{"class", "chart throughput"},
                          {"data-mode", mode},
                          {"data-arch", arch},
                          {"viewBox", "0 0 " + svg::num(kWidth) + " " + fixed(height, 0)},
                          {"width", svg::num(kWidth)},
                          {"height", fixed(height, 0)},
                          {"role", "img"},
                          {"aria-label", "samples per second, " + caption}});
  os << axis(kLabel, kBars, axis_max, step, 14, height - 4, "samples/s");
  double y = g.top;
  for (const Line* l : ls) {
    os << row_label(*l, kLabel - 8, y + group_h / 2 + 4);
    for (size_t k = 0; k < runs.size(); ++k, y += g.bar_h + g.bar_gap)
      os << throughput_bar(runs, *l, k, y, g.bar_h, axis_max);
    y += g.group_gap - g.bar_gap;
  }
  os << "</svg></figure>";
  return os.str();
}

/// Samples/s: one chart per mode (train, data, synthetic have their own scales) and, in a
/// sweep of several models, per model.arch (a MobileNet's rate would flatten a ViT's bars).
std::string throughput_html(const std::vector<RunFile>& runs, const std::vector<Line>& lines) {
  const auto [charts, archs] = throughput_charts(lines);
  const bool multi = runs.size() > 1;
  std::ostringstream os;
  os << "<section id=\"throughput\"><h2>Samples per second</h2>"
     << "<p class=\"muted\">Geometric mean over the timed windows, with its "
     << stats::level_text(stats::kRowLevel)
     << " interval; ×prev: against the row before it of the same mode and model.arch, ×base: against the "
        "first row of the same mode and model.arch"
     << (multi ? "; ×" + html_escape(runs[0].label) + ": against the reference run's row of the same name"
               : std::string())
     << ".</p>";
  for (const auto& [mode, arch] : charts) {
    const std::string caption = "mode: " + (mode.empty() ? std::string("train") : mode) +
                                (archs.size() > 1 && !arch.empty() ? ", " + arch : "");
    os << throughput_chart(runs, lines, mode, arch, caption);
  }
  return os.str() + "</section>";
}

/// A row's second line in the step split, at `gy`: the thin GPU busy/idle bar (`gpu_h` high)
/// and its text, with the peak memory.
std::string gpu_line_svg(const measure::Measurement& m, double gy, double gpu_h) {
  std::ostringstream os;
  std::string gpu_text;
  if (const auto busy = m.gpu_busy_pct) {
    const double b = std::clamp(*busy, 0.0, 100.0);
    os << svg::element("rect",
                       {{"class", "gpu-busy"},
                        {"x", svg::num(kLabel)},
                        {"y", fixed(gy, 1)},
                        {"width", fixed(kBars * b / 100, 2)},
                        {"height", svg::num(gpu_h)},
                        {"fill", kBusyColor},
                        {"data-pct", fixed(b, 2)}},
                       svg::title("GPU busy " + fixed(b, 1) + "%"));
    os << svg::element("rect",
                       {{"class", "gpu-idle"},
                        {"x", fixed(kLabel + kBars * b / 100, 2)},
                        {"y", fixed(gy, 1)},
                        {"width", fixed(kBars * (100 - b) / 100, 2)},
                        {"height", svg::num(gpu_h)},
                        {"fill", kIdleColor}},
                       svg::title("GPU idle " + fixed(100 - b, 1) + "%"));
    gpu_text = "GPU busy " + fixed(b, 0) + "%";
  }
  if (m.peak_mem_bytes) {
    const auto peak = static_cast<double>(*m.peak_mem_bytes);
    gpu_text += (gpu_text.empty() ? "" : " · ") + std::string("peak ") + bytes_text(peak);
    if (m.device_mem_bytes && *m.device_mem_bytes > 0) {
      const auto dev = static_cast<double>(*m.device_mem_bytes);
      gpu_text += " (" + fixed(100 * peak / dev, 0) + "% of " + bytes_text(dev) + ")";
    }
  }
  os << svg::element(
      "text",
      {{"class", "value small"}, {"x", fixed(kLabel + kBars + 8, 1)}, {"y", fixed(gy + gpu_h + 1, 1)}},
      html_escape(gpu_text));
  return os.str();
}

/// The step split's legend: a swatch and a name per part (and GPU busy/idle where measured).
std::string split_legend_svg(bool any_gpu) {
  std::ostringstream os;
  double lx = kLabel;
  auto key = [&](const char* color, const char* text) {
    os << svg::element("rect",
                       {{"x", fixed(lx, 1)}, {"y", "6"}, {"width", "12"}, {"height", "12"}, {"fill", color}})
       << svg::element("text", {{"x", fixed(lx + 16, 1)}, {"y", "16"}}, html_escape(text));
    lx += 16 + 7.0 * static_cast<double>(std::string(text).size()) + 18;
  };
  key(kWaitColor, "data wait");
  key(kCopyColor, "copy");
  key(kComputeColor, "compute");
  if (any_gpu) key(kBusyColor, "GPU busy"), key(kIdleColor, "GPU idle");
  return os.str();
}

/// The geometry of the step split chart: a bar per run's row, a group of bars per line.
constexpr double kSplitBarH = 14, kSplitGpuH = 5, kSplitGap = 4, kSplitGroupGap = 10, kSplitTop = 36;

/// Whether a row has a step split (a results file of another program may hold samples/s alone).
bool has_split(const Row* r) { return r && r->m && r->m->split; }

/// A row with GPU busy or peak memory gets a second line: the thin busy/idle bar and its text.
bool has_gpu_line(const Row* r) { return r->m->gpu_busy_pct || r->m->peak_mem_bytes; }

/// The height of a row's entry in the step split.
double split_entry_h(const Row* r) { return kSplitBarH + (has_gpu_line(r) ? 14 : 0); }

/// The height of line `l`'s group of entries in the step split.
double split_group_h(const Line& l) {
  double h = 0;
  for (const Row* r : l.rows)
    if (has_split(r)) h += split_entry_h(r) + kSplitGap;
  return h - kSplitGap;
}

/// Run `k`'s entry of line `l` in the step split at `y`: its run's swatch (of several runs), the
/// bar of data wait, copy and compute with their shares, and its GPU line.
std::string split_entry_svg(const std::vector<RunFile>& runs, const Line& l, size_t k, double y) {
  const Row* r = l.rows[k];
  const double wait = std::max(0.0, r->m->split->data_wait_pct);
  const double copy = std::max(0.0, r->m->split->h2d_pct);
  const double compute = std::max(0.0, r->m->split->compute_pct);
  const double total = wait + copy + compute;
  std::ostringstream os;
  if (runs.size() > 1)
    os << svg::element("rect",
                       {{"x", svg::num(kLabel - 8)},
                        {"y", fixed(y, 1)},
                        {"width", "4"},
                        {"height", svg::num(kSplitBarH)},
                        {"fill", run_color(k)}},
                       svg::title(runs[k].label));
  double x = kLabel;
  const std::pair<const char*, double> parts[] = {{"data", wait}, {"copy", copy}, {"compute", compute}};
  const char* const colors[] = {kWaitColor, kCopyColor, kComputeColor};
  for (size_t p = 0; p < 3; ++p) {
    const double w = total > 0 ? kBars * parts[p].second / total : 0;
    os << svg::element("rect",
                       {{"class", std::string("seg seg-") + parts[p].first},
                        {"x", fixed(x, 2)},
                        {"y", fixed(y, 1)},
                        {"width", fixed(w, 2)},
                        {"height", svg::num(kSplitBarH)},
                        {"fill", colors[p]},
                        {"data-run", std::to_string(k)},
                        {"data-row", l.name},
                        {"data-pct", fixed(parts[p].second, 2)}},
                       svg::title(l.name + ": " + parts[p].first + " " + fixed(parts[p].second, 1) + "%"));
    x += w;
  }
  const std::string text =
      "wait " + fixed(wait, 0) + "% · copy " + fixed(copy, 0) + "% · compute " + fixed(compute, 0) + "%";
  os << svg::element(
      "text",
      {{"class", "value"}, {"x", fixed(kLabel + kBars + 8, 1)}, {"y", fixed(y + kSplitBarH / 2 + 4, 1)}},
      html_escape(text));
  if (has_gpu_line(r)) os << gpu_line_svg(*r->m, y + kSplitBarH + 4, kSplitGpuH);
  return os.str();
}

/// The step split: data wait, copy, compute; GPU busy/idle and peak memory where measured.
std::string split_html(const std::vector<RunFile>& runs, const std::vector<Line>& lines) {
  bool any_gpu = false;
  std::vector<const Line*> ls;
  for (const auto& l : lines) {
    bool numbers = false;
    for (const Row* r : l.rows)
      if (has_split(r)) numbers = true, any_gpu |= r->m->gpu_busy_pct.has_value();
    if (numbers) ls.push_back(&l);
  }
  if (ls.empty()) return "";
  double height = kSplitTop;
  for (const Line* l : ls) height += split_group_h(*l) + kSplitGroupGap;
  height += 4;
  std::ostringstream os;
  os << "<section id=\"split\"><h2>Where each step goes</h2><p class=\"muted\">Share of the step: the wait "
        "for data, the copy to the device (and uint8 conversion), the compute. On a GPU the split comes from "
        "CUDA events on the compute stream; the thin bar under it is the GPU's kernel time (busy) and the "
        "rest (idle) per step, where the row was profiled.</p>";
  os << svg::open("svg", {{"class", "chart split"},
                          {"viewBox", "0 0 " + svg::num(kWidth) + " " + fixed(height, 0)},
                          {"width", svg::num(kWidth)},
                          {"height", fixed(height, 0)},
                          {"role", "img"},
                          {"aria-label", "step split"}});
  os << split_legend_svg(any_gpu);
  double y = kSplitTop;
  for (const Line* l : ls) {
    const double group_h = split_group_h(*l);
    os << row_label(*l, kLabel - (runs.size() > 1 ? 14 : 8), y + std::min(group_h, kSplitBarH) / 2 + 4);
    for (size_t k = 0; k < runs.size(); ++k) {
      if (!has_split(l->rows[k])) continue;
      os << split_entry_svg(runs, *l, k, y);
      y += split_entry_h(l->rows[k]) + kSplitGap;
    }
    y += kSplitGroupGap - kSplitGap;
  }
  os << "</svg></section>";
  return os.str();
}

/// Loss curves of the convergence rows (measure.convergence_steps), all on one chart.
std::string curves_html(const std::vector<RunFile>& runs, const std::vector<Line>& lines) {
  struct Curve {
    const Line* line;
    size_t run;
    const std::vector<double>* points;
  };
  std::vector<Curve> curves;
  double lo = 1e300, hi = -1e300;
  size_t steps = 0;
  for (const auto& l : lines)
    for (size_t k = 0; k < runs.size(); ++k) {
      const Row* r = l.rows[k];
      if (!r || r->loss_curve.empty()) continue;
      curves.push_back({&l, k, &r->loss_curve});
      steps = std::max(steps, r->loss_curve.size());
      for (const double v : r->loss_curve) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  if (curves.empty()) return "";
  if (!(hi > lo)) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  const double left = 70, right = 250, top = 14, bottom = 34, height = 300;
  const double pw = kWidth - left - right, ph = height - top - bottom;
  auto px = [&](size_t i) {
    return left + (steps > 1 ? pw * static_cast<double>(i) / static_cast<double>(steps - 1) : 0);
  };
  auto py = [&](double v) { return top + ph * (hi - v) / (hi - lo); };
  std::ostringstream os;
  os << "<section id=\"convergence\"><h2>Loss curves</h2><p class=\"muted\">Rows with "
        "measure.convergence_steps: a fresh model trained that many steps, the loss of each step.</p>";
  os << svg::open("svg", {{"class", "chart curves"},
                          {"viewBox", "0 0 " + svg::num(kWidth) + " " + svg::num(height)},
                          {"width", svg::num(kWidth)},
                          {"height", svg::num(height)},
                          {"role", "img"},
                          {"aria-label", "loss curves"}})
     << "<g class=\"axis\">";
  const double ystep = nice_step((hi - lo) / 4);
  for (double v = std::ceil(lo / ystep) * ystep; v <= hi; v += ystep)
    os << svg::element("line", {{"class", "grid"},
                                {"x1", svg::num(left)},
                                {"x2", svg::num(left + pw)},
                                {"y1", fixed(py(v), 1)},
                                {"y2", fixed(py(v), 1)}})
       << svg::element("text",
                       {{"x", svg::num(left - 6)}, {"y", fixed(py(v) + 4, 1)}, {"text-anchor", "end"}},
                       html_escape(tick_text(v, ystep)));
  const double xstep = nice_step(static_cast<double>(steps) / 6);
  for (double s = 0; s < static_cast<double>(steps); s += xstep)
    os << svg::element("text",
                       {{"x", fixed(px(static_cast<size_t>(s)), 1)},
                        {"y", svg::num(height - bottom + 16)},
                        {"text-anchor", "middle"}},
                       std::to_string(static_cast<long long>(s) + 1));
  os << svg::element("text",
                     {{"x", svg::num(left + pw / 2)}, {"y", svg::num(height - 4)}, {"text-anchor", "middle"}},
                     "step")
     << svg::element("text",
                     {{"x", "14"},
                      {"y", svg::num(top + ph / 2)},
                      {"transform", "rotate(-90 14 " + svg::num(top + ph / 2) + ")"},
                      {"text-anchor", "middle"}},
                     "loss")
     << "</g>";
  const char* const dashes[] = {"", "6 3", "2 3", "8 3 2 3"};
  for (size_t c = 0; c < curves.size(); ++c) {
    const std::string color = kRunColors[(c + 1) % (sizeof kRunColors / sizeof *kRunColors)];
    std::string points;
    for (size_t i = 0; i < curves[c].points->size(); ++i)
      points += (i ? " " : "") + fixed(px(i), 1) + "," + fixed(py((*curves[c].points)[i]), 1);
    // Each run's curves dashed their own way, so that runs stay apart in greyscale print.
    std::vector<svg::Attr> dash;
    if (curves[c].run % 4) dash.emplace_back("stroke-dasharray", dashes[curves[c].run % 4]);
    std::vector<svg::Attr> curve = {
        {"class", "curve"}, {"fill", "none"}, {"stroke", color}, {"stroke-width", "1.6"}};
    curve.insert(curve.end(), dash.begin(), dash.end());
    curve.insert(curve.end(), {{"data-run", std::to_string(curves[c].run)},
                               {"data-row", curves[c].line->name},
                               {"points", points}});
    os << svg::element("polyline", curve,
                       svg::title(runs[curves[c].run].label + ": " + curves[c].line->name));
    const double ly = top + 8 + 16.0 * static_cast<double>(c);
    std::vector<svg::Attr> key = {{"x1", svg::num(left + pw + 16)},
                                  {"x2", svg::num(left + pw + 40)},
                                  {"y1", fixed(ly, 1)},
                                  {"y2", fixed(ly, 1)},
                                  {"stroke", color},
                                  {"stroke-width", "2"}};
    key.insert(key.end(), dash.begin(), dash.end());
    os << svg::element("line", key)
       << svg::element(
              "text", {{"x", svg::num(left + pw + 46)}, {"y", fixed(ly + 4, 1)}},
              html_escape(shorten(curves[c].line->name, 24) +
                          (runs.size() > 1 ? " (" + shorten(runs[curves[c].run].label, 10) + ")" : "")));
  }
  os << "</svg></section>";
  return os.str();
}

/// Words in a column of numbers ("not in this run", a row's status): left as text.
table::HtmlCell words(const std::string& text, const std::string& cls) {
  table::HtmlCell c(text, cls);
  c.words = true;
  return c;
}

/// A speedup cell: "1.45x ±4.0% faster", coloured by its verdict; "-" for a row without numbers.
table::HtmlCell speedup_cell(const Row& row, double speedup, const stats::Interval& ci,
                             const std::string& verdict) {
  if (!row.m) return "-";
  std::string text = fixed(speedup, 2) + "x" + interval_text(ci);
  if (!verdict.empty()) text += " " + verdict;
  const std::string cls = verdict == "faster"      ? "verdict-faster"
                          : verdict == "slower"    ? "verdict-slower"
                          : verdict == "undecided" ? "verdict-undecided"
                                                   : "";
  return {text, cls};
}

/// The load cell: "-" on a quiet machine, else what else ran ("+0.9 cores", "steal 7%", "GPU
/// shared"), and "GPU throttled" where the GPU slowed down (the notes, on hover, say how).
table::HtmlCell load_cell(const Row& row) {
  if (!row.m) return "-";
  const system::LoadReport& l = row.m->load;
  std::string text, notes;
  if (l.under_load) {
    if (l.gpu_other_processes && *l.gpu_other_processes > 0) {
      text = "GPU shared";
    } else {
      text = "under load";
      if (l.sampled && l.other_cpu_cores > 0) text = "+" + fixed(l.other_cpu_cores, 1) + " cores";
      if (l.sampled && l.steal_pct >= 5) text += ", steal " + fixed(l.steal_pct, 0) + "%";
    }
  }
  for (const auto& n : l.gpu_notes) notes += (notes.empty() ? "" : ", ") + n;
  if (!notes.empty()) text += (text.empty() ? "" : ", ") + std::string("GPU throttled");
  if (text.empty()) return "-";
  return {text, "status-note", notes};
}

table::HtmlCell status_cell(const Row& r) {
  return words(r.status.text(), "status-" + status_class(r.status));
}

/// With several runs, samples/s side by side: each run's row of the same name, and its ratio to
/// the reference run's.
std::string side_by_side_html(const std::vector<RunFile>& runs, const std::vector<Line>& lines) {
  table::HtmlTable t;
  t.cls = "side-by-side";
  t.columns = {{"#", true}, {"row"}};
  t.swatches = {"", ""};
  for (size_t k = 0; k < runs.size(); ++k) {
    t.columns.push_back({runs[k].label, true});
    t.swatches.push_back(run_color(k));
    if (k > 0) t.columns.push_back({"vs " + shorten(runs[0].label, 20), true});
    if (k > 0) t.swatches.emplace_back();
  }
  for (const auto& l : lines) {
    table::HtmlRow row({std::to_string(l.index), l.name});
    const Row* ref = l.rows[0];
    for (size_t k = 0; k < runs.size(); ++k) {
      const Row* r = l.rows[k];
      row.cells.push_back(!r      ? words("not in this run", "muted")
                          : !r->m ? status_cell(*r)
                                  : table::HtmlCell(rate_cell_text(*r)));
      if (k == 0) continue;
      const bool both = r && ref && r->m && ref->m && rate_of(*ref) > 0;
      row.cells.emplace_back(both ? ratio_text(rate_of(*r) / rate_of(*ref)) : "-");
    }
    t.rows.push_back(std::move(row));
  }
  return "<h3>Side by side (samples/s)</h3>" + table::html(t);
}

/// Row `i` of a run's table; `gpu` adds GPU busy and peak memory.
table::HtmlRow row_html(const Row& r, size_t i, bool gpu) {
  using Split = measure::Measurement::StepSplit;
  static const measure::Measurement kNotMeasured;  // every figure absent: "-"
  const measure::Measurement& m = r.m ? *r.m : kNotMeasured;
  auto n = [](std::optional<double> v, int digits, const char* suffix = "") {
    return v ? fixed(*v, digits) + suffix : "-";
  };
  auto positive = [](double v) { return v > 0 ? std::optional<double>(v) : std::nullopt; };
  auto share = [&](double Split::*part) {
    return m.split ? std::optional<double>((*m.split).*part) : std::nullopt;
  };
  const auto flops = achieved_flops(r), of_peak = pct_of_peak(r);
  table::HtmlRow row(
      {std::to_string(r.index.value_or(i)), r.name, changes_text(r.changes), config::name(r.mode),
       n(positive(static_cast<double>(m.batch_size)), 0),
       n(r.num_workers ? std::optional<double>(static_cast<double>(*r.num_workers)) : std::nullopt, 0),
       n(positive(m.ms_per_step), 1), r.m ? rate_cell_text(r) : "-",
       speedup_cell(r, r.speedup_vs_prev, r.prev_ci, r.verdict_prev),
       speedup_cell(r, r.speedup_vs_base, r.base_ci, r.verdict_base), load_cell(r),
       n(share(&Split::data_wait_pct), 0, "%"), n(share(&Split::h2d_pct), 0, "%"),
       n(share(&Split::compute_pct), 0, "%")});
  if (gpu) {
    row.cells.emplace_back(n(m.gpu_busy_pct, 0, "%"));
    row.cells.emplace_back(m.peak_mem_bytes ? bytes_text(static_cast<double>(*m.peak_mem_bytes)) : "-");
  }
  row.cells.emplace_back(n(m.loss, 3));
  row.cells.emplace_back(flops ? flops_text(*flops) : "-");
  row.cells.emplace_back(
      !of_peak && flops && m.peak_under_load ? "?" : n(of_peak, of_peak.value_or(100) < 10 ? 1 : 0, "%"));
  row.cells.push_back(status_cell(r));
  return row;
}

/// Run `k`'s table of numbers, with the peaks its % peak reads against.
std::string run_table_html(const RunFile& run, size_t k) {
  const std::vector<Row>& rows = run.results.rows;
  bool gpu = false;
  for (const auto& r : rows) gpu |= r.m && (r.m->gpu_busy_pct || r.m->peak_mem_bytes);
  std::vector<std::string> peaks;  // the peaks "% peak" reads against, each once
  for (const auto& r : rows)
    if (r.m && r.m->peak_flops_per_s) {
      const measure::Measurement& m = *r.m;
      const std::string p = m.peak_precision + " " + flops_text(*m.peak_flops_per_s) + " FLOP/s, " +
                            m.peak_source + (m.peak_under_load ? kPeakUnderLoadNote : "");
      if (std::find(peaks.begin(), peaks.end(), p) == peaks.end()) peaks.push_back(p);
    }
  table::HtmlTable t;
  t.cls = "rows";
  t.columns = {{"#", true},       {"row"},           {"change"},        {"mode"},
               {"batch", true},   {"workers", true}, {"ms/step", true}, {"samples/s", true},
               {"vs prev", true}, {"vs base", true}, {"load", true},    {"data wait", true},
               {"copy", true},    {"compute", true}};
  if (gpu) t.columns.insert(t.columns.end(), {{"GPU busy", true}, {"peak mem", true}});
  t.columns.insert(t.columns.end(), {{"loss", true}, {"FLOP/s", true}, {"% peak", true}, {"status"}});
  for (size_t i = 0; i < rows.size(); ++i) t.rows.push_back(row_html(rows[i], i, gpu));
  std::string out = "<h3><span class=\"swatch\" style=\"background:" + run_color(k) + "\"></span>" +
                    html_escape(run.label) + "</h3>" + table::html(t);
  for (const auto& p : peaks) out += "<p class=\"peak\">% peak against: " + html_escape(p) + "</p>";
  return out;
}

/// The numbers of each run as a table; with several runs, samples/s side by side first.
std::string tables_html(const std::vector<RunFile>& runs, const std::vector<Line>& lines) {
  std::string out = "<section id=\"numbers\"><h2>Numbers</h2>";
  if (runs.size() > 1) out += side_by_side_html(runs, lines);
  for (size_t k = 0; k < runs.size(); ++k) out += run_table_html(runs[k], k);
  return out + "</section>";
}

std::string diagnosis_html(const std::vector<RunFile>& runs) {
  std::ostringstream os;
  os << "<section id=\"diagnosis\"><h2>Diagnosis and notes</h2>";
  for (size_t k = 0; k < runs.size(); ++k) {
    if (runs.size() > 1)
      os << "<h3><span class=\"swatch\" style=\"background:" << run_color(k) << "\"></span>"
         << html_escape(runs[k].label) << "</h3>";
    os << "<ol class=\"diagnosis\" start=\"0\">";
    for (const Row& r : runs[k].results.rows) {
      os << "<li><b>" << html_escape(r.name) << "</b>";
      if (!r.status.is(RowStatus::State::kOk))
        os << " <span class=\"status-" << status_class(r.status) << "\">" << html_escape(r.status.text())
           << "</span>";
      if (!r.diagnosis.empty()) os << ": " << html_escape(r.diagnosis);
      std::vector<std::string> extra;
      for (const auto& n : r.notes) extra.push_back("note: " + n);
      if (r.m && !r.m->trace_path.empty()) extra.push_back("trace: " + r.m->trace_path);
      if (!extra.empty()) {
        os << "<ul>";
        for (const auto& e : extra) os << "<li>" << html_escape(e) << "</li>";
        os << "</ul>";
      }
      os << "</li>";
    }
    os << "</ol>";
  }
  return os.str() + "</section>";
}

std::string environment_html(const std::vector<RunFile>& runs) {
  auto count = [](int64_t n) { return n > 0 ? std::to_string(n) : std::string(); };
  const std::vector<std::pair<const char*, std::function<std::string(const Environment&)>>> keys = {
      {"device", [](const Environment& e) { return e.device; }},
      {"device kind", [](const Environment& e) { return e.device_kind; }},
      {"LibTorch / torch", [](const Environment& e) { return e.torch; }},
      {"CUDA build", [](const Environment& e) { return e.cuda; }},
      {"CPU threads", [&](const Environment& e) { return count(e.cpu_threads); }},
      {"world size", [&](const Environment& e) { return count(e.world_size); }}};
  table::HtmlTable t;
  t.cls = "environment";
  t.columns = {{""}};
  t.swatches = {""};
  for (size_t k = 0; k < runs.size(); ++k) {
    t.columns.push_back({runs[k].label});
    t.swatches.push_back(run_color(k));
  }
  auto line = [&](const std::string& title, auto value_of) {
    table::HtmlRow row({title}, true);
    const std::string first = value_of(runs[0]);
    for (size_t k = 0; k < runs.size(); ++k) {
      const std::string v = value_of(runs[k]);
      row.cells.emplace_back(v.empty() ? "-" : v, k > 0 && v != first ? "differs" : "");
    }
    t.rows.push_back(std::move(row));
  };
  line("file", [](const RunFile& r) { return r.path.empty() ? std::string("(this sweep)") : r.path; });
  line("written by", [](const RunFile& r) {
    return r.source == "ptune" ? "ptune " + r.ptune_version : "scripts/bench (PyTorch's side)";
  });
  line("status", [](const RunFile& r) { return std::string(run_status_text(r.results.status)); });
  for (const auto& [title, value] : keys)
    line(title, [&value = value](const RunFile& r) { return value(r.results.environment); });
  line("rows measured", [](const RunFile& r) {
    size_t n = 0;
    for (const auto& row : r.results.rows) n += row.m.has_value();
    return std::to_string(n) + " of " + std::to_string(r.results.rows.size());
  });
  return "<section id=\"environment\"><h2>Environment</h2>" + table::html(t) + "</section>";
}

// ---- configs ------------------------------------------------------------------------------

void flatten(const Json& j, const std::string& prefix, std::map<std::string, Json>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (prefix.empty() && it.key() == "sweep") continue;
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    }
  } else if (!prefix.empty()) {
    out[prefix] = j;
  }
}

std::string value_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

/// The resolved config of each row of a run: the file's config with the sweep's overrides up to
/// the row (found by its index in the config's sweep, else by name; else the rows' own changes,
/// cumulatively).
std::vector<std::map<std::string, Json>> row_configs(const RunFile& run) {
  std::map<std::string, Json> base;
  flatten(run.results.config, "", base);
  const Json& cfg = run.results.config;
  const Json sweep = cfg.contains("sweep") && cfg["sweep"].is_array() ? cfg["sweep"] : Json::array();
  std::vector<std::map<std::string, Json>> out;
  std::map<std::string, Json> own = base;  // fallback: the rows' own changes, cumulatively
  size_t next = 0;
  for (const Row& row : run.results.rows) {
    for (auto it = row.changes.begin(); it != row.changes.end(); ++it) own[it.key()] = it.value();
    // Its place in the sweep (two rows may share a name), where the sweep row there has its name; else by
    // name.
    size_t found = sweep.size();
    if (row.index && *row.index < sweep.size() && sweep[*row.index].is_object() &&
        sweep[*row.index].value("name", Json()) == Json(row.name))
      found = *row.index;
    for (size_t i = next; i < sweep.size() && found == sweep.size(); ++i)
      if (sweep[i].is_object() && sweep[i].value("name", Json()) == Json(row.name)) found = i;
    if (found == sweep.size()) {
      out.push_back(own);
      continue;
    }
    std::map<std::string, Json> c = base;
    for (size_t i = 0; i <= found; ++i)
      if (sweep[i].is_object() && sweep[i].contains("set") && sweep[i]["set"].is_object())
        for (auto it = sweep[i]["set"].begin(); it != sweep[i]["set"].end(); ++it) c[it.key()] = it.value();
    next = found + 1;
    out.push_back(c);
  }
  return out;
}

/// What row `i`'s resolved config changes against row 0's: "key: a → b; ...".
std::string config_diff(const std::map<std::string, Json>& first, const std::map<std::string, Json>& row) {
  std::map<std::string, Json> all = first;
  for (const auto& [key, v] : row) all.emplace(key, Json(nullptr));
  std::string diff;
  for (const auto& [key, v0] : all) {
    const auto a = first.find(key), b = row.find(key);
    const Json va = a == first.end() ? Json(nullptr) : a->second;
    const Json vb = b == row.end() ? Json(nullptr) : b->second;
    if (va != vb) diff += (diff.empty() ? "" : "; ") + key + ": " + value_text(va) + " → " + value_text(vb);
  }
  return diff.empty() ? "(same config)" : diff;
}

/// A run's rows, each as its diff against row 0, and row 0's resolved config.
std::string run_config_html(const std::vector<std::map<std::string, Json>>& configs,
                            const std::vector<Row>& rows) {
  table::HtmlTable t;
  t.cls = "config-diff";
  t.columns = {{"#", true}, {"row"}, {"differs from row 0"}};
  for (size_t i = 0; i < configs.size(); ++i)
    t.rows.emplace_back(
        std::vector<table::HtmlCell>{std::to_string(rows[i].index.value_or(i)), rows[i].name,
                                     i == 0 ? "(the reference)" : config_diff(configs[0], configs[i])});
  std::string out = table::html(t);
  if (configs[0].empty()) return out;
  table::HtmlTable first;
  first.cls = "config";
  first.head = first.scroll = false;
  for (const auto& [key, v] : configs[0])
    first.rows.emplace_back(std::vector<table::HtmlCell>{key, value_text(v)}, true);
  return out + "<details><summary>row 0's resolved config</summary>" + table::html(first) + "</details>";
}

/// The keys whose values differ between the runs' first rows; "" where none do.
std::string between_runs_html(const std::vector<RunFile>& runs,
                              const std::vector<std::map<std::string, Json>>& firsts) {
  std::map<std::string, bool> keys;
  for (const auto& f : firsts)
    for (const auto& kv : f) keys[kv.first] = true;
  table::HtmlTable t;
  t.cls = "config-runs";
  t.columns = {{""}};
  for (const auto& r : runs) t.columns.push_back({r.label});
  for (const auto& kv : keys) {
    const std::string& key = kv.first;
    auto at = [&](size_t k) {
      auto it = firsts[k].find(key);
      return it == firsts[k].end() ? std::string("-") : value_text(it->second);
    };
    bool differs = false;
    for (size_t k = 1; k < firsts.size(); ++k) differs |= at(k) != at(0);
    if (!differs || key == "cpu_threads") continue;
    table::HtmlRow row({key}, true);
    for (size_t k = 0; k < firsts.size(); ++k)
      row.cells.emplace_back(at(k), k && at(k) != at(0) ? "differs" : "");
    t.rows.push_back(std::move(row));
  }
  return t.rows.empty() ? "" : "<h3>Between the runs (row 0 of each)</h3>" + table::html(t);
}

std::string config_html(const std::vector<RunFile>& runs) {
  std::ostringstream os;
  os << "<section id=\"config\"><h2>Configuration</h2><p class=\"muted\">Each row's resolved config as a "
        "diff against the run's first row (the sweep is cumulative: a row keeps the changes of the rows "
        "before it).</p>";
  std::vector<std::map<std::string, Json>> firsts;
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto configs = row_configs(runs[k]);
    os << "<h3><span class=\"swatch\" style=\"background:" << run_color(k) << "\"></span>"
       << html_escape(runs[k].label) << "</h3>";
    if (configs.empty()) {
      os << "<p class=\"muted\">no rows</p>";
      firsts.emplace_back();
      continue;
    }
    firsts.push_back(configs[0]);
    os << run_config_html(configs, runs[k].results.rows);
  }
  if (runs.size() > 1) os << between_runs_html(runs, firsts);
  return os.str() + "</section>";
}

const char* const kStyle = R"(
:root{color-scheme:light}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1b1b1b;background:#fff;max-width:1000px;margin:24px auto;padding:0 16px}
h1{font-size:22px;margin:0 0 6px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 6px}
figure{margin:10px 0 16px}
figcaption{font-weight:600;font-size:13px;margin-bottom:2px}
svg{display:block;max-width:100%;height:auto}
svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:#1b1b1b}
svg .axis text{fill:#666;font-size:11px}
svg tspan.idx{fill:#888}
svg text.small{font-size:11px;fill:#444}
svg .grid{stroke:#e4e4e4;stroke-width:1}
svg text.muted{fill:#777}
svg text.status-skipped{fill:#8a6d00}
svg text.status-failed{fill:#b00020}
svg text.status-note{fill:#8a6d00}
ul.runs{list-style:none;padding:0;margin:6px 0}
ul.runs li{margin:2px 0}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.muted{color:#666}
.banner{background:#fff4d6;border:1px solid #e8c66a;border-radius:4px;padding:6px 10px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px;margin:4px 0 12px}
th,td{padding:3px 7px;border-bottom:1px solid #e6e6e6;text-align:left;vertical-align:top;overflow-wrap:break-word}
table.rows td:nth-child(2),table.rows td:nth-child(3){min-width:9em;max-width:18em}
table.config-diff td:nth-child(3){min-width:20em}
thead th{border-bottom:1px solid #bbb;white-space:nowrap}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.status-skipped,span.status-skipped,td.status-note,span.status-note{color:#8a6d00}
td.status-failed,span.status-failed{color:#b00020}
td.verdict-faster{color:#1b7a1b}
td.verdict-slower{color:#b00020}
td.verdict-undecided{color:#8a6d00}
td.differs{background:#fff4d6}
ol.diagnosis li{margin:3px 0}
details{margin:4px 0 12px}
summary{cursor:pointer;color:#444}
footer{margin:32px 0 8px;color:#888;font-size:12px}
@page{margin:12mm}
@media print{
body{margin:0;max-width:none;font-size:11px}
h2{break-after:avoid}
figure,tr,li{break-inside:avoid}
.scroll{overflow:visible}
table{font-size:10px}
details{display:none}
}
)";

/// Every page's head and the start of its body: one self-contained document (no script, no request:
/// its Content-Security-Policy allows only its own style), titled `title`.
std::string page_head(const std::string& title) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
        "'unsafe-inline'\">\n"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
     << "<meta name=\"generator\" content=\"ptune " << kVersion << "\">\n"
     << "<title>" << html_escape(title) << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  return os.str();
}

}  // namespace

std::string to_html(const std::vector<RunFile>& runs) {
  const auto lines = match_lines(runs);
  std::string title = "ptune report";
  if (!runs.empty()) {
    const Json& cfg = runs[0].results.config;
    if (const auto name = cfg.find("name");
        name != cfg.end() && name->is_string() && !name->get<std::string>().empty())
      title += ": " + name->get<std::string>();
  }
  std::ostringstream os;
  os << page_head(title) << "<header><h1>" << html_escape(title) << "</h1>" << legend_html(runs)
     << "</header>\n";
  if (!runs.empty()) {
    os << throughput_html(runs, lines) << "\n"
       << split_html(runs, lines) << "\n"
       << curves_html(runs, lines) << "\n"
       << tables_html(runs, lines) << "\n"
       << diagnosis_html(runs) << "\n"
       << environment_html(runs) << "\n"
       << config_html(runs) << "\n";
  }
  os << "<footer>Written by ptune " << kVersion
     << " (ptune report, or ptune sweep --out FILE.html).</footer>\n"
     << "</body>\n</html>\n";
  return os.str();
}

std::string html_page(const std::string& title, const std::string& body, const std::string& footer) {
  std::ostringstream os;
  os << page_head(title) << "<header><h1>" << html_escape(title) << "</h1></header>\n"
     << body << "\n<footer>" << html_escape(footer) << "</footer>\n</body>\n</html>\n";
  return os.str();
}

}  // namespace ptune::report
