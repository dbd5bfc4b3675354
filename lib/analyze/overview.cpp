#include "analyze/overview.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "analyze/render.hpp"
#include "core/numbers.hpp"
#include "core/table.hpp"
#include "report/html.hpp"

namespace ptune::analyze {
namespace {

using numbers::fmt;
using table::html_escape;

// The split's categories, in the plugin's order, with colours (Okabe-Ito, then greys).
const char* const kCatColor[kCategories] = {"#009E73", "#56B4E9", "#0072B2", "#CC79A7",
                                            "#D55E00", "#E69F00", "#F0E442", "#D9D9D9"};
const char* const kCatLabel[kCategories] = {"kernel",  "memcpy",      "memset",   "communication",
                                            "runtime", "data loader", "CPU exec", "other (idle)"};

constexpr double kW = 960, kLabelW = 170, kBarW = 700;
constexpr double kSpeedupW = 400;  // the longest speedup bar (or interval): room for its text after it

std::string legend() {
  std::string s = "<ul class=\"runs\">";
  for (int c = 0; c < kCategories; ++c)
    s += std::string(
             "<li style=\"display:inline-block;margin-right:12px\"><span class=\"swatch\" "
             "style=\"background:") +
         kCatColor[c] + "\"></span>" + kCatLabel[c] + "</li>";
  return s + "</ul>";
}

/// Stacked bars: one per step, the split of its time.
std::string steps_svg(const Breakdown& b) {
  double longest = 0;
  for (const auto& s : b.steps) longest = std::max(longest, s.end - s.start);
  if (longest <= 0) longest = 1;
  const double row = 22, top = 6;
  const double height = top + row * static_cast<double>(b.steps.size()) + 26;
  std::ostringstream os;
  os << "<svg class=\"chart steps\" viewBox=\"0 0 " << kW << " " << height << "\" width=\"" << kW
     << "\" height=\"" << height << "\" role=\"img\" aria-label=\"step time split per step\">";
  double y = top;
  for (const auto& s : b.steps) {
    const double len = s.end - s.start;
    os << "<g class=\"step-bar\" data-step=\"" << html_escape(s.name) << "\" data-ms=\""
       << fmt("%.3f", len / 1000.0) << "\"><text x=\"" << kLabelW - 6 << "\" y=\"" << y + 14
       << "\" text-anchor=\"end\">" << html_escape(s.name) << "</text>";
    double x = kLabelW;
    for (int c = 0; c < kCategories; ++c) {
      const double w = kBarW * s.us[c] / longest;
      if (w <= 0) continue;
      os << "<rect class=\"seg\" data-cat=\"" << category_name(c) << "\" x=\"" << fmt("%.2f", x) << "\" y=\""
         << y << "\" width=\"" << fmt("%.2f", w) << "\" height=\"" << row - 6 << "\" fill=\"" << kCatColor[c]
         << "\"><title>" << kCatLabel[c] << fmt(": %.2f ms", s.us[c] / 1000.0) << "</title></rect>";
      x += w;
    }
    os << "<text class=\"small\" x=\"" << fmt("%.2f", x + 6) << "\" y=\"" << y + 14 << "\">"
       << fmt("%.1f ms", len / 1000.0) << "</text></g>";
    y += row;
  }
  os << "<text class=\"small muted\" x=\"" << kLabelW << "\" y=\"" << y + 14
     << "\">bar length: step time (the longest step spans the width)</text></svg>";
  return os.str();
}

std::string names_table(const std::string& title, const std::vector<NameTime>& v, bool self, size_t steps) {
  if (v.empty()) return "";
  const double n = static_cast<double>(std::max<size_t>(steps, 1));
  table::Table t{{{"name"}, {"calls per step", true}, {"ms per step", true}}, {}};
  for (const auto& x : v)
    t.rows.push_back({x.name, fmt("%.3g", static_cast<double>(x.count) / n),
                      fmt("%.3f", (self ? x.self_us : x.total_us) / 1000.0 / n)});
  return "<h3>" + html_escape(title) + "</h3>" + table::html(table::html_table(t));
}

/// Allocated memory over the step of the highest peak: one line, MB over ms; "" without points.
std::string memory_svg(const Breakdown& b) {
  const auto& pts = b.memory_timeline;
  if (pts.size() < 2) return "";
  const double w = 480, h = 120, pad = 4;
  double t_max = 0, mb_max = 0;
  for (const auto& [ms, mb] : pts) t_max = std::max(t_max, ms), mb_max = std::max(mb_max, mb);
  if (!(t_max > 0) || !(mb_max > 0)) return "";
  // A step line: the allocated total holds from one sample until the next.
  auto x = [&](double ms) { return fmt("%.1f,", pad + (w - 2 * pad) * ms / t_max); };
  auto y = [&](double mb) { return fmt("%.1f ", h - pad - (h - 2 * pad) * mb / mb_max); };
  std::string line;
  for (size_t i = 0; i < pts.size(); ++i) {
    if (i > 0) line += x(pts[i].first) + y(pts[i - 1].second);
    line += x(pts[i].first) + y(pts[i].second);
  }
  const MemoryPeak* top = nullptr;  // the timeline's: a GPU's highest, else the host's
  for (const auto& p : b.memory_peaks)
    if (!top || (p.device >= 0) > (top->device >= 0) ||
        ((p.device >= 0) == (top->device >= 0) && p.allocated_mb > top->allocated_mb))
      top = &p;
  const std::string caption =
      top ? "Allocated memory over " + top->step + " on " +
                (top->device < 0 ? std::string("the host") : "device " + std::to_string(top->device)) +
                " (0 to " + fmt("%.0f MB, 0 to ", mb_max) + fmt("%.1f ms)", t_max)
          : std::string("Allocated memory over a step");
  return "<figure><figcaption>" + html_escape(caption) + "</figcaption><svg class=\"memory\" width=\"" +
         fmt("%.0f", w) + "\" height=\"" + fmt("%.0f", h) + "\" viewBox=\"0 0 " + fmt("%.0f ", w) +
         fmt("%.0f", h) + "\"><line x1=\"" + fmt("%.0f", pad) + "\" y1=\"" + fmt("%.0f", h - pad) +
         "\" x2=\"" + fmt("%.0f", w - pad) + "\" y2=\"" + fmt("%.0f", h - pad) +
         "\" stroke=\"#999\"/><polyline fill=\"none\" stroke=\"#4c72b0\" stroke-width=\"1.5\" points=\"" +
         line + "\"/></svg></figure>";
}

/// FLOP/s per operator class against the ceilings (a roofline), one table; or what to record.
std::string throughput_html(const Throughput& th) {
  if (th.source == "none")
    return th.missing.empty() ? "" : "<h3>FLOP/s</h3><p class=\"muted\">" + html_escape(th.missing) + "</p>";
  // The terminal's cells; the page's headers say the percentages in words, its bound is text.
  table::HtmlTable t = table::html_table(throughput_cells(th), "flops");
  t.columns[5].header = "% of peak";
  t.columns[8] = {"bound"};
  t.columns[9].header = "% of roof";
  for (size_t i = 0; i < th.classes.size(); ++i) t.rows[i].attributes = {{"data-class", th.classes[i].name}};
  std::string s = "<h3>FLOP/s per operator class</h3>" + table::html(t);
  if (!th.peaks.empty()) s += "<p class=\"muted\">Ceilings: " + html_escape(ceilings_text(th)) + "</p>";
  if (!th.no_ceilings.empty()) s += "<p class=\"muted\">No ceilings: " + html_escape(th.no_ceilings) + "</p>";
  for (const auto& n : over_notes(th)) s += "<p class=\"muted\">" + html_escape(n) + "</p>";
  return s;
}

/// Per rank: step, compute, input and the wait in collectives; the straggler named.
std::string straggler_html(const Analysis& a) {
  if (!a.straggler) return "";
  const auto& st = *a.straggler;
  table::HtmlTable h;
  h.cls = "stragglers";
  h.scroll = false;
  h.columns = {{"rank"}, {"step ms", true}, {"compute ms", true}, {"input ms", true}, {"waiting ms", true}};
  for (size_t i = 0; i < st.ranks.size(); ++i) {
    const auto& t = st.ranks[i];
    const auto& r = a.ranks[t.index];
    const std::string name = r.who();
    h.rows.push_back({{name, fmt("%.1f", t.step_us / 1000.0), fmt("%.1f", t.compute_us / 1000.0),
                       fmt("%.1f", t.input_us / 1000.0), fmt("%.1f", t.wait_us / 1000.0)},
                      false,
                      st.slow && *st.slow == i ? "straggler" : ""});
  }
  return "<h3>Stragglers</h3>" + table::html(h) + "<p>" + html_escape(st.text) + "</p>";
}

std::string ranks_svg(const Analysis& a) {
  double longest = 0;
  for (const auto& r : a.ranks) longest = std::max(longest, r.mean().end);
  if (longest <= 0) longest = 1;
  const double row = 22;
  const double height = row * static_cast<double>(a.ranks.size()) + 26;
  std::ostringstream os;
  os << "<svg class=\"chart ranks\" viewBox=\"0 0 " << kW << " " << height << "\" width=\"" << kW
     << "\" height=\"" << height << "\" role=\"img\" aria-label=\"step time per rank\">";
  double y = 4;
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const auto& r = a.ranks[i];
    const auto m = r.mean();
    const std::string name = r.who();
    (void)i;
    const double comm = m.comm_us, over = m.comm_overlap_us;
    os << "<g class=\"rank-bar\" data-rank=\"" << html_escape(name) << "\"><text x=\"" << kLabelW - 6
       << "\" y=\"" << y + 14 << "\" text-anchor=\"end\">" << html_escape(name) << "</text>";
    const double w = kBarW * m.end / longest, wc = kBarW * (comm - over) / longest,
                 wo = kBarW * over / longest;
    os << "<rect x=\"" << kLabelW << "\" y=\"" << y << "\" width=\"" << fmt("%.2f", w)
       << "\" height=\"16\" fill=\"" << kCatColor[kKernel] << "\"><title>" << fmt("%.2f ms per step", m.ms())
       << "</title></rect>";
    os << "<rect x=\"" << kLabelW << "\" y=\"" << y + 4 << "\" width=\"" << fmt("%.2f", wc)
       << "\" height=\"8\" fill=\"" << kCatColor[kCommunication] << "\"><title>communication not overlapped"
       << fmt(": %.2f ms", (comm - over) / 1000.0) << "</title></rect>";
    os << "<rect x=\"" << fmt("%.2f", kLabelW + wc) << "\" y=\"" << y + 4 << "\" width=\"" << fmt("%.2f", wo)
       << "\" height=\"8\" fill=\"#7F7F7F\"><title>communication overlapped with compute"
       << fmt(": %.2f ms", over / 1000.0) << "</title></rect>";
    os << "<text class=\"small\" x=\"" << fmt("%.2f", kLabelW + w + 6) << "\" y=\"" << y + 14 << "\">"
       << fmt("%.1f ms", m.ms()) << fmt(", communication %.0f%%", m.end > 0 ? 100.0 * comm / m.end : 0.0)
       << fmt(" (%.0f%% overlapped)", comm > 0 ? 100.0 * over / comm : 0.0) << "</text></g>";
    y += row;
  }
  os << "</svg>";
  return os.str();
}

/// A version's heading: its label, file, steps, device and ranks, its verdict and notes.
std::string version_head_html(const Version& v) {
  const Analysis& a = v.analysis;
  const Breakdown& b = a.ranks[a.primary];
  std::ostringstream os;
  os << "<h2>" << html_escape(v.label) << "</h2>";
  os << "<p class=\"muted\">" << html_escape(a.path) << " · " << b.steps.size() << " step"
     << (b.steps.size() == 1 ? "" : "s") << (b.from_steps ? " (ProfilerStep#N)" : " (whole trace)") << " · "
     << (b.has_gpu ? html_escape(b.devices.empty() ? std::string("cuda") : b.devices.front())
                   : std::string("cpu"))
     << (a.ranks.size() > 1 ? " · " + std::to_string(a.ranks.size()) + " ranks, " + shown_rank(a) + " shown"
                            : "")
     << "</p>";
  os << "<p><b>Verdict:</b> " << html_escape(a.verdict.text()) << "</p>";
  if (!a.notes.empty()) {
    os << "<ul class=\"notes\">";
    for (const auto& n : a.notes) os << "<li>" << html_escape(n) << "</li>";
    os << "</ul>";
  }
  return os.str();
}

/// A version's figures per step, a key and its value per row.
std::string figures_html(const Version& v) {
  const Breakdown& b = v.analysis.ranks[v.analysis.primary];
  const auto m = b.mean();
  const double len = m.end > 0 ? m.end : 1;
  table::HtmlTable figures;
  figures.columns = {{""}, {"", true}};
  figures.head = figures.scroll = false;
  auto row = [&](const std::string& k, const std::string& val) { figures.rows.push_back({{k, val}, true}); };
  row("step time", fmt("%.2f ms", m.ms()));
  if (v.samples_per_s) row("samples/s", fmt("%.1f", *v.samples_per_s));
  if (b.has_gpu) {
    row("GPU busy (kernels, copies, memsets)", fmt("%.1f%%", 100.0 * m.gpu_busy_us / len));
    row("Tensor Cores (share of kernel time)", fmt("%.0f%%", b.tensor_core_pct.value_or(0)));
    row("fp16/bf16 kernels (share of kernel time)", fmt("%.0f%%", b.half_pct.value_or(0)));
    row("host-to-device copies", std::to_string(b.h2d.count) + " (" + std::to_string(b.h2d.pageable) +
                                     " pageable), " + fmt("%.2f ms", b.h2d.us / 1000.0));
  }
  int64_t syncs = 0;
  for (const auto& s : b.steps) syncs += s.syncs;
  row("host syncs", std::to_string(syncs) + fmt(", %.2f ms waited per step", m.sync_us / 1000.0));
  if (m.peak_allocated_mb) row("peak GPU memory allocated", fmt("%.0f MB", *m.peak_allocated_mb));
  if (m.peak_reserved_mb) row("peak GPU memory reserved", fmt("%.0f MB", *m.peak_reserved_mb));
  return table::html(figures);
}

/// The memory of a rank: its peak per step (or why there is none), each device's highest, the
/// timeline, and the operators that allocated most.
std::string memory_html(const Breakdown& b) {
  std::ostringstream os;
  if (b.mean().peak_allocated_mb) {
    table::Table t{{{"step"}, {"peak allocated MB", true}, {"peak reserved MB", true}}, {}};
    for (const auto& s : b.steps)
      t.rows.push_back({s.name, s.peak_allocated_mb ? fmt("%.0f", *s.peak_allocated_mb) : "-",
                        s.peak_reserved_mb ? fmt("%.0f", *s.peak_reserved_mb) : "-"});
    table::HtmlTable h = table::html_table(t);
    h.scroll = false;
    os << "<h3>Memory per step</h3>" << table::html(h);
  } else if (b.has_gpu && b.writer != "ptune") {
    os << "<h3>Memory per step</h3><p class=\"muted\">No memory events: <code>profile_memory=True</code> in "
          "<code>torch.profiler.profile(...)</code> records them.</p>";
  } else if (!b.memory_peaks.empty()) {
    os << "<h3>Memory</h3>";
  }
  for (const auto& p : b.memory_peaks)
    os << "<p class=\"muted\">"
       << html_escape((p.device < 0 ? std::string("Host") : "Device " + std::to_string(p.device)) +
                      ": highest " + fmt("%.0f MB allocated", p.allocated_mb) + ", in `" + p.op + "`, " +
                      p.step + fmt(" at %.1f ms", p.at_ms))
       << "</p>";
  os << memory_svg(b);
  if (!b.allocators.empty()) {
    table::Table t{{{"operator"}, {"allocations per step", true}, {"MB per step", true}}, {}};
    for (const auto& x : b.allocations_per_step())
      t.rows.push_back({x.name, fmt("%.3g", x.count), fmt("%.0f", x.mb)});
    os << "<h3>Operators that allocated most (" << (b.allocators_gpu ? "GPU" : "host") << " memory)</h3>"
       << table::html(table::html_table(t));
  }
  return os.str();
}

/// The largest kernels, operators and host syncs, where the syncs come from, and the load.
std::string lists_html(const Breakdown& b) {
  std::ostringstream os;
  os << names_table("Largest kernels", b.kernels, false, b.steps.size())
     << names_table("Largest operators (host, self time)", b.operators, true, b.steps.size())
     << names_table("Host syncs", b.syncs, false, b.steps.size());
  if (!b.sync_origins.empty()) {
    os << "<ul class=\"sync-origins\">";
    for (const auto& o : b.sync_origins)
      os << "<li>" << html_escape(o.name) << " ×" << o.count << " from " << html_escape(o.where) << "</li>";
    os << "</ul>";
  }
  if (b.under_load)
    os << "<p class=\"muted\">Recorded under load"
       << (b.load_summary.empty() ? "" : ": " + html_escape(b.load_summary))
       << "; its speedups are undecided.</p>";
  return os.str();
}

std::string version_html(const Version& v, size_t index) {
  const Analysis& a = v.analysis;
  const Breakdown& b = a.ranks[a.primary];
  std::ostringstream os;
  os << "<section class=\"version\" id=\"v" << index << "\">" << version_head_html(v) << figures_html(v);
  os << "<figure><figcaption>Step time, split as the PyTorch profiler's overview</figcaption>" << legend()
     << steps_svg(b) << "</figure>";
  if (a.ranks.size() > 1)
    os << "<figure><figcaption>Ranks: step time, communication (not overlapped / overlapped)</figcaption>"
       << ranks_svg(a) << "</figure>";
  os << straggler_html(a);
  if (a.primary < a.throughput.size()) os << throughput_html(a.throughput[a.primary]);
  os << memory_html(b) << lists_html(b) << "</section>";
  return os.str();
}

std::string speedup_svg(const Comparison& c) {
  double best = 0;
  for (const auto& v : c.versions) {
    best = std::max(best, v.vs_first.value_or(1.0));
    if (v.first && v.first->interval.valid()) best = std::max(best, v.first->interval.hi);
  }
  if (best <= 0) best = 1;
  const double row = 24;
  const double height = row * static_cast<double>(c.versions.size()) + 10;
  std::ostringstream os;
  os << "<svg class=\"chart speedup\" viewBox=\"0 0 " << kW << " " << height << "\" width=\"" << kW
     << "\" height=\"" << height << "\" role=\"img\" aria-label=\"speedup over the first version\">";
  double y = 4;
  for (size_t i = 0; i < c.versions.size(); ++i) {
    const auto& v = c.versions[i];
    const double s = v.vs_first.value_or(1.0);
    const double w = kSpeedupW * s / best;  // room for the figures after the longest bar
    os << "<text x=\"" << kLabelW - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\">"
       << html_escape(v.label) << "</text><rect class=\"speedup\" data-label=\"" << html_escape(v.label)
       << "\" data-value=\"" << fmt("%.4f", s) << "\" x=\"" << kLabelW << "\" y=\"" << y << "\" width=\""
       << fmt("%.2f", w) << "\" height=\"16\" fill=\""
       << "#0072B2\"></rect>";
    double right = kLabelW + w;
    if (v.first && v.first->interval.valid()) {
      // The interval as a whisker across the bar's end.
      const double x0 = kLabelW + kSpeedupW * v.first->interval.lo / best;
      const double x1 = kLabelW + kSpeedupW * v.first->interval.hi / best;
      os << "<g class=\"ci\" data-lo=\"" << fmt("%.4f", v.first->interval.lo) << "\" data-hi=\""
         << fmt("%.4f", v.first->interval.hi) << "\" stroke=\"#000\" stroke-width=\"1.5\"><line x1=\""
         << fmt("%.2f", x0) << "\" y1=\"" << y + 8 << "\" x2=\"" << fmt("%.2f", x1) << "\" y2=\"" << y + 8
         << "\"/><line x1=\"" << fmt("%.2f", x0) << "\" y1=\"" << y + 3 << "\" x2=\"" << fmt("%.2f", x0)
         << "\" y2=\"" << y + 13 << "\"/><line x1=\"" << fmt("%.2f", x1) << "\" y1=\"" << y + 3 << "\" x2=\""
         << fmt("%.2f", x1) << "\" y2=\"" << y + 13 << "\"/></g>";
      right = std::max(right, x1);
    }
    os << "<text class=\"small\" x=\"" << fmt("%.2f", right + 6) << "\" y=\"" << y + 14 << "\">"
       << html_escape(v.first ? speedup_text(*v.first) : fmt("×%.2f", s)) << fmt(" · %.1f ms", v.step_ms)
       << "</text>";
    y += row;
  }
  os << "</svg>";
  return os.str();
}

std::string table_html(const Comparison& c) {
  std::ostringstream os;
  table::Table t{{{"version"},
                  {"step ms", true},
                  {"samples/s", true},
                  {"vs prev", true},
                  {"vs first", true},
                  {"data%", true},
                  {"copy%", true},
                  {"kernel%", true},
                  {"host%", true},
                  {"idle%", true},
                  {"GPU busy%", true},
                  {"peak MB", true},
                  {"verdict"}},
                 {}};
  for (const auto& v : c.versions) {
    const Breakdown& b = v.analysis.ranks[v.analysis.primary];
    const auto m = b.mean();
    const Split s = split_of(m);
    const double len = m.end > 0 ? m.end : 1;
    t.rows.push_back({v.label, fmt("%.1f", v.step_ms), v.samples_per_s ? fmt("%.1f", *v.samples_per_s) : "-",
                      v.prev ? speedup_text(*v.prev) : "-", v.first ? speedup_text(*v.first) : "-",
                      fmt("%.1f", s.data), fmt("%.1f", s.copies), fmt("%.1f", s.kernels), fmt("%.1f", s.host),
                      fmt("%.1f", s.idle), b.has_gpu ? fmt("%.1f", 100.0 * m.gpu_busy_us / len) : "-",
                      m.peak_allocated_mb ? fmt("%.0f", *m.peak_allocated_mb) : "-",
                      v.analysis.verdict.rule});
  }
  os << table::html(table::html_table(t, "versions"));
  for (const auto& p : c.pairs) {
    os << "<h3>" << html_escape(c.versions[p.from].label) << " → " << html_escape(c.versions[p.to].label)
       << "</h3><ul class=\"changes\">";
    if (const auto& sp = c.versions[p.to].prev)
      os << "<li class=\"speedup-verdict\" data-verdict=\"" << stats::verdict_name(sp->verdict)
         << "\">speedup " << html_escape(speedup_text(*sp)) << ": " << html_escape(speedup_detail(*sp))
         << "</li>";
    if (p.changes.empty()) os << "<li class=\"muted\">no change above 1% of the step</li>";
    for (const auto& x : p.changes) os << "<li>" << html_escape(x.text) << "</li>";
    os << "</ul>";
  }
  return os.str();
}

}  // namespace

std::string overview_html(const Comparison& c) {
  std::ostringstream body;
  if (c.versions.size() > 1) {
    body << "<section class=\"comparison\"><h2>Versions</h2><figure><figcaption>Speedup over the first "
            "version (whiskers: its interval)</figcaption>"
         << speedup_svg(c) << "</figure>" << table_html(c) << "</section>";
  }
  for (size_t i = 0; i < c.versions.size(); ++i) body << version_html(c.versions[i], i);
  const std::string title = c.versions.size() == 1
                                ? "ptune analyze: " + c.versions[0].label
                                : "ptune analyze: " + std::to_string(c.versions.size()) + " versions";
  return report::html_page(title, body.str(), "Written by ptune analyze -o (the profiler trace overview).");
}

}  // namespace ptune::analyze
