#include "analyze/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/errors.hpp"
#include "core/numbers.hpp"
#include "report/figures.hpp"
#include "core/table.hpp"

namespace ptune::analyze {
namespace {

using Json = nlohmann::ordered_json;
using numbers::fmt;
using table::shorten;

double r2(double v) { return std::round(v * 100.0) / 100.0; }
double r4(double v) { return std::round(v * 10000.0) / 10000.0; }

/// The label of a path: the file or folder name without .json/.json.gz and torch's
/// ".pt.trace" (a folder's own name for a folder of ranks; the folder's name for a file named
/// trace.json).
std::string label_of(const std::string& path) {
  std::filesystem::path p(path);
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();
  for (const char* tail : {".gz", ".json", ".pt.trace"})
    if (name.size() > std::strlen(tail) &&
        name.compare(name.size() - std::strlen(tail), std::strlen(tail), tail) == 0)
      name.resize(name.size() - std::strlen(tail));
  // export_chrome_trace("trace.json") in a folder per version: the folder names it.
  if ((name == "trace" || name.empty()) && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return name;
}

/// The labels of `paths` (label_of), those that repeat prefixed with their parent folder's name
/// ("run1/trace1", "run2/trace1").
std::vector<std::string> default_labels(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  std::map<std::string, int> count;
  for (const auto& p : paths) ++count[out.emplace_back(label_of(p))];
  for (size_t i = 0; i < paths.size(); ++i) {
    if (count[out[i]] < 2) continue;
    // The nearest folder above the path whose name is not the label itself (a label taken from a
    // folder's name: "run1/tb/", "a/log/trace.json").
    std::filesystem::path p = std::filesystem::path(paths[i]).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    for (p = p.parent_path(); !p.empty() && p.filename() == out[i]; p = p.parent_path()) {
    }
    const std::string parent = p.filename().string();
    if (!parent.empty() && parent != "." && parent != "..") out[i] = parent + "/" + out[i];
  }
  return out;
}

/// name -> per-step figure (ms, or calls) of a list.
std::map<std::string, double> per_step(const std::vector<NameTime>& v, size_t steps, bool self, bool calls) {
  std::map<std::string, double> m;
  const double n = static_cast<double>(std::max<size_t>(steps, 1));
  for (const auto& x : v)
    m[x.name] = (calls ? static_cast<double>(x.count) : (self ? x.self_us : x.total_us) / 1000.0) / n;
  return m;
}

/// The `k` names whose figure changed most between `a` and `b` (at least `min_delta`).
std::vector<Change> largest(const std::map<std::string, double>& a, const std::map<std::string, double>& b,
                            const char* what, size_t k, double min_delta) {
  std::map<std::string, std::pair<double, double>> both;
  for (const auto& [n, v] : a) both[n].first = v;
  for (const auto& [n, v] : b) both[n].second = v;
  std::vector<Change> out;
  for (const auto& [n, v] : both) {
    if (std::fabs(v.second - v.first) < min_delta) continue;
    Change c;
    c.what = what;
    c.name = n;
    c.before_ms = v.first;
    c.after_ms = v.second;
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), [](const Change& x, const Change& y) {
    return std::fabs(x.after_ms - x.before_ms) > std::fabs(y.after_ms - y.before_ms);
  });
  if (out.size() > k) out.resize(k);
  return out;
}

std::string ms_text(double ms) {
  return ms >= 100 ? fmt("%.0f ms", ms) : ms >= 1 ? fmt("%.1f ms", ms) : fmt("%.2f ms", ms);
}

std::string calls_text(double n) { return fmt("%.3g", n); }

PairChanges changes_between(const Version& a, const Version& b, size_t i) {
  PairChanges p;
  p.from = i - 1;
  p.to = i;
  const Breakdown& x = a.analysis.ranks[a.analysis.primary];
  const Breakdown& y = b.analysis.ranks[b.analysis.primary];
  const size_t nx = x.steps.size(), ny = y.steps.size();
  // The data loader: its time per step, and which iterator (num_workers=0 or workers).
  {
    const double dx = x.mean().us[kDataLoader] / 1000.0, dy = y.mean().us[kDataLoader] / 1000.0;
    const std::string lx = x.dataloader.empty() ? "" : x.dataloader.front().name;
    const std::string ly = y.dataloader.empty() ? "" : y.dataloader.front().name;
    if (std::fabs(dy - dx) >= 0.05 * std::max(a.step_ms, b.step_ms) || lx != ly) {
      Change c{"data loader", ly.empty() ? lx : ly, dx, dy, ""};
      c.text = "data loading " + ms_text(dx) + " -> " + ms_text(dy) + " per step" +
               (lx != ly && !lx.empty() && !ly.empty() ? " (`" + lx + "` -> `" + ly + "`)" : "");
      p.changes.push_back(c);
    }
  }
  // Syncs added or removed.
  for (auto& c :
       largest(per_step(x.syncs, nx, false, true), per_step(y.syncs, ny, false, true), "sync", 3, 0.01)) {
    c.text = (c.before_ms == 0  ? "sync added: `"
              : c.after_ms == 0 ? "sync removed: `"
                                : "sync `") +
             c.name + "` " + calls_text(c.before_ms) + " -> " + calls_text(c.after_ms) + " per step";
    p.changes.push_back(c);
  }
  // Copies that appeared or vanished (or changed count).
  for (auto& c :
       largest(per_step(x.copies, nx, false, true), per_step(y.copies, ny, false, true), "copy", 3, 0.01)) {
    c.text = (c.before_ms == 0  ? "copies appeared: `"
              : c.after_ms == 0 ? "copies vanished: `"
                                : "copies `") +
             c.name + "` " + calls_text(c.before_ms) + " -> " + calls_text(c.after_ms) + " per step";
    p.changes.push_back(c);
  }
  // Kernels and operators whose time changed most.
  const double floor_ms = 0.01 * std::max(a.step_ms, b.step_ms);
  for (auto& c : largest(per_step(x.all_kernels, nx, false, false), per_step(y.all_kernels, ny, false, false),
                         "kernel", 3, floor_ms)) {
    c.text = "kernel `" + shorten(c.name, 60) + "` " + ms_text(c.before_ms) + " -> " + ms_text(c.after_ms) +
             " per step";
    p.changes.push_back(c);
  }
  for (auto& c : largest(per_step(x.all_operators, nx, true, false),
                         per_step(y.all_operators, ny, true, false), "operator", 3, floor_ms)) {
    c.text = "operator `" + shorten(c.name, 60) + "` " + ms_text(c.before_ms) + " -> " + ms_text(c.after_ms) +
             " per step (self time)";
    p.changes.push_back(c);
  }
  if (a.analysis.verdict.rule != b.analysis.verdict.rule) {
    Change c{"verdict", b.analysis.verdict.rule, 0, 0, ""};
    c.text = "verdict " + a.analysis.verdict.rule + " -> " + b.analysis.verdict.rule;
    p.changes.push_back(c);
  }
  return p;
}

Json opt_json(const std::optional<double>& v) { return v ? Json(r2(*v)) : Json(nullptr); }

Json speedup_json(const std::optional<Speedup>& s) {
  if (!s) return nullptr;
  const auto& i = s->interval;
  return Json{{"speedup", r4(i.point)},
              {"lo", i.valid() ? Json(r4(i.lo)) : Json(nullptr)},
              {"hi", i.valid() ? Json(r4(i.hi)) : Json(nullptr)},
              {"level", i.valid() ? Json(i.level) : Json(nullptr)},
              {"verdict", stats::verdict_name(s->verdict)},
              {"reason", s->reason.empty() ? Json(nullptr) : Json(s->reason)},
              {"steps", Json::array({s->steps_before, s->steps_after})},
              {"samples_per_step",
               s->samples_before > 0 ? Json::array({s->samples_before, s->samples_after}) : Json(nullptr)},
              {"text", speedup_text(*s)}};
}

/// The versions' table: the label, the figures (right-aligned), the verdict's rule.
std::vector<table::Column> header() {
  std::vector<table::Column> h{{"label"}};
  for (const char* figure : {"step ms", "samples/s", "vs prev", "vs first", "data%", "copy%", "kernel%",
                             "host%", "idle%", "gpu busy%", "peak MB"})
    h.push_back({figure, true});
  h.push_back({"verdict"});
  return h;
}

std::vector<std::vector<std::string>> rows(const Comparison& c) {
  std::vector<std::vector<std::string>> out;
  for (const auto& v : c.versions) {
    const Breakdown& b = v.analysis.ranks[v.analysis.primary];
    const auto m = b.mean();
    const Split s = split_of(m);
    const double len = m.end > 0 ? m.end : 1;
    out.push_back({v.label, fmt("%.1f", v.step_ms), v.samples_per_s ? fmt("%.1f", *v.samples_per_s) : "-",
                   v.prev ? speedup_text(*v.prev) : "-", v.first ? speedup_text(*v.first) : "-",
                   fmt("%.1f", s.data), fmt("%.1f", s.copies), fmt("%.1f", s.kernels), fmt("%.1f", s.host),
                   fmt("%.1f", s.idle), b.has_gpu ? fmt("%.1f", 100.0 * m.gpu_busy_us / len) : "-",
                   m.peak_allocated_mb ? fmt("%.0f", *m.peak_allocated_mb) : "-", v.analysis.verdict.rule});
  }
  return out;
}

}  // namespace

Split split_of(const StepBreakdown& m) {
  Split s;
  const double len = m.end > 0 ? m.end : 0;
  if (len <= 0) return s;
  auto p = [&](double us) { return 100.0 * us / len; };
  s.data = p(m.us[kDataLoader]);
  s.copies = p(m.us[kMemcpy] + m.us[kMemset]);
  s.kernels = p(m.us[kKernel] + m.us[kCommunication]);
  s.host = p(m.us[kRuntime] + m.us[kCpuExec]);
  s.idle = p(m.us[kOther]);
  return s;
}

std::string speedup_text(const Speedup& s) {
  return fmt("x%.2f", s.interval.point) + report::interval_text(s.interval) + " " +
         stats::verdict_name(s.verdict);
}

stats::NoiseRule noise_rule(double noise_pct) {
  stats::NoiseRule r;
  r.floor_pct = noise_pct;
  r.target_pct = std::max(r.target_pct, noise_pct);
  return r;
}

std::string speedup_detail(const Speedup& s) {
  const std::string per = s.samples_before > 0 ? "log times per sample" : "log step times";
  std::string d = s.interval.valid()
                      ? stats::level_text(s.interval.level) + " interval (Welch's t on " + per + ", " +
                            std::to_string(s.steps_before) + " and " + std::to_string(s.steps_after) +
                            " steps)"
                      : "no interval (" + std::to_string(s.steps_before + s.steps_after) + " steps in all)";
  if (s.samples_before > 0)
    d += "; " + std::to_string(s.samples_before) + " and " + std::to_string(s.samples_after) +
         " samples a step: compared per sample";
  if (!s.reason.empty()) d += "; undecided: " + s.reason;
  return d;
}

namespace {

/// Samples per step of a version: its batch size times its ranks; 0 where the batch is unknown.
int64_t samples_per_step(const Version& v) {
  return v.batch_size ? *v.batch_size * static_cast<int64_t>(v.analysis.ranks.size()) : 0;
}

/// `ms` divided by `n` each.
std::vector<double> per_sample(std::vector<double> ms, int64_t n) {
  for (double& x : ms) x /= static_cast<double>(n);
  return ms;
}

}  // namespace

Speedup speedup_between(const Version& before, const Version& after, double noise_pct) {
  Speedup s;
  s.steps_before = before.step_ms_each.size();
  s.steps_after = after.step_ms_each.size();
  s.noise_pct = noise_pct;
  const bool load = before.under_load || after.under_load;
  const int64_t nb = samples_per_step(before), na = samples_per_step(after);
  if (nb > 0 && na > 0 && nb != na) {
    // A batch change: time per sample is what the change is for.
    s.samples_before = nb;
    s.samples_after = na;
    s.interval = stats::welch_speedup(per_sample(before.step_ms_each, nb), per_sample(after.step_ms_each, na),
                                      stats::speedup_level(load));
  } else {
    s.interval = stats::welch_speedup(before.step_ms_each, after.step_ms_each, stats::speedup_level(load));
  }
  std::string few;
  for (const Version* v : {&before, &after}) {
    const size_t n = v->step_ms_each.size();
    if (n < kMinSteps && few.find("`" + v->label + "`") == std::string::npos)
      few += (few.empty() ? "" : ", ") + std::to_string(n) + (n == 1 ? " step in `" : " steps in `") +
             v->label + "`";
  }
  if (!few.empty()) {
    s.reason = few + ": " + std::to_string(kMinSteps) + " or more per trace are needed";
  } else {
    for (const Version* v : {&before, &after})
      if (v->under_load && s.reason.empty())
        s.reason = "`" + v->label + "` was recorded under load" +
                   (v->load_summary.empty() ? "" : " (" + v->load_summary + ")");
  }
  s.verdict =
      s.reason.empty() ? stats::verdict_of(s.interval, noise_rule(noise_pct)) : stats::Verdict::kUndecided;
  return s;
}

Comparison compare_analyses(std::vector<Version> versions, double noise_pct) {
  Comparison c;
  c.noise_pct = noise_pct;
  for (size_t i = 0; i < versions.size(); ++i) {
    auto& v = versions[i];
    const Breakdown& b = v.analysis.slowest();
    v.step_ms = b.mean().ms();
    v.step_ms_each.clear();
    for (const auto& s : b.steps) v.step_ms_each.push_back(s.ms());
    for (const auto& r : v.analysis.ranks)
      if (r.under_load && !v.under_load) v.under_load = true, v.load_summary = r.load_summary;
    if (!v.batch_size) v.batch_size = b.batch_size;
    if (samples_per_step(v) > 0 && v.step_ms > 0)
      v.samples_per_s = static_cast<double>(samples_per_step(v)) * 1000.0 / v.step_ms;
  }
  for (size_t i = 1; i < versions.size(); ++i) {
    auto& v = versions[i];
    if (v.step_ms <= 0) continue;
    v.prev = speedup_between(versions[i - 1], v, noise_pct);
    v.first = speedup_between(versions[0], v, noise_pct);
    v.vs_prev = v.prev->interval.point;
    v.vs_first = v.first->interval.point;
  }
  c.versions = std::move(versions);
  for (size_t i = 1; i < c.versions.size(); ++i)
    c.pairs.push_back(changes_between(c.versions[i - 1], c.versions[i], i));
  return c;
}

Comparison compare_versions(const std::vector<std::string>& paths, const AnalyzeOptions& opt,
                            const CompareOptions& copt) {
  if (!copt.labels.empty() && copt.labels.size() != paths.size()) {
    throw DataError("--label given " + std::to_string(copt.labels.size()) + " time" +
                    (copt.labels.size() == 1 ? "" : "s") + " for " + std::to_string(paths.size()) + " trace" +
                    (paths.size() == 1 ? "" : "s") + ": give one per trace, in order");
  }
  for (const auto& l : copt.labels)
    if (l.empty()) throw DataError("--label: an empty label; give each trace a name the table can show");
  if (!(copt.noise_pct >= 0 && copt.noise_pct <= 100))
    throw DataError("--noise-pct " + fmt("%g", copt.noise_pct) + ": give a percent from 0 to 100");
  std::vector<std::string> labels = copt.labels;
  if (labels.empty()) labels = default_labels(paths);
  std::vector<Version> versions;
  for (size_t i = 0; i < paths.size(); ++i) {
    Version v;
    v.label = labels[i];
    v.analysis = analyze(paths[i], opt);
    v.batch_size = copt.batch_size;
    versions.push_back(std::move(v));
  }
  return compare_analyses(std::move(versions), copt.noise_pct);
}

Json comparison_json(const Comparison& c) {
  Json versions = Json::array();
  for (const auto& v : c.versions) {
    const Breakdown& b = v.analysis.ranks[v.analysis.primary];
    const auto m = b.mean();
    const Split s = split_of(m);
    const double len = m.end > 0 ? m.end : 1;
    versions.push_back(Json{
        {"label", v.label},
        {"path", v.analysis.path},
        {"step_ms", r2(v.step_ms)},
        {"batch_size", v.batch_size ? Json(*v.batch_size) : Json(nullptr)},
        {"samples_per_s", opt_json(v.samples_per_s)},
        {"speedup_vs_prev", opt_json(v.vs_prev)},
        {"speedup_vs_first", opt_json(v.vs_first)},
        {"split_pct", Json{{"data", r2(s.data)},
                           {"copies", r2(s.copies)},
                           {"kernels", r2(s.kernels)},
                           {"host", r2(s.host)},
                           {"idle", r2(s.idle)}}},
        {"gpu_busy_pct", b.has_gpu ? Json(r2(100.0 * m.gpu_busy_us / len)) : Json(nullptr)},
        {"peak_allocated_mb", opt_json(m.peak_allocated_mb)},
        {"peak_reserved_mb", opt_json(m.peak_reserved_mb)},
        {"ranks", v.analysis.ranks.size()},
        {"steps", b.steps.size()},
        {"verdict", Json{{"rule", v.analysis.verdict.rule}, {"text", v.analysis.verdict.text()}}},
        {"notes", v.analysis.notes},
        {"step_ms_each",
         [&] {
           Json e = Json::array();
           for (double ms : v.step_ms_each) e.push_back(r2(ms));
           return e;
         }()},
        {"under_load", v.under_load},
        {"load", v.load_summary.empty() ? Json(nullptr) : Json(v.load_summary)},
        {"vs_prev", speedup_json(v.prev)},
        {"vs_first", speedup_json(v.first)},
    });
  }
  Json pairs = Json::array();
  for (const auto& p : c.pairs) {
    Json ch = Json::array();
    for (const auto& x : p.changes)
      ch.push_back(Json{{"what", x.what},
                        {"name", x.name},
                        {"before", r2(x.before_ms)},
                        {"after", r2(x.after_ms)},
                        {"text", x.text}});
    const auto& to = c.versions[p.to];
    pairs.push_back(Json{{"from", c.versions[p.from].label},
                         {"to", to.label},
                         {"speedup", speedup_json(to.prev)},
                         {"speedup_detail", to.prev ? Json(speedup_detail(*to.prev)) : Json(nullptr)},
                         {"changes", ch}});
  }
  const stats::NoiseRule rule = noise_rule(c.noise_pct);
  return Json{{"versions", versions},
              {"changes", pairs},
              {"noise", Json{{"level", stats::kSpeedupLevel},
                             {"level_under_load", stats::kSpeedupLevelUnderLoad},
                             {"min_steps", kMinSteps},
                             {"target_pct", rule.target_pct},
                             {"floor_pct", rule.floor_pct}}}};
}

std::string render_versions(const Comparison& c, const std::string& format) {
  if (format == "json") return comparison_json(c).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  const table::Table t{header(), rows(c)};
  std::string out;
  if (format == "csv") return table::csv(t);
  if (format == "md") {
    using table::markdown_escape;
    out += "## ptune analyze: " + std::to_string(c.versions.size()) + " versions\n\n" + table::markdown(t);
    for (const auto& p : c.pairs) {
      out += "\n**" + markdown_escape(c.versions[p.from].label) + " → " +
             markdown_escape(c.versions[p.to].label) + "**\n\n";
      if (const auto& s = c.versions[p.to].prev)
        out += "- speedup " + markdown_escape(speedup_text(*s)) + ": " + speedup_detail(*s) + "\n";
      if (p.changes.empty()) out += "- no change above 1% of the step\n";
      for (const auto& x : p.changes) out += "- " + x.text + "\n";
    }
    out += "\n";
    for (const auto& v : c.versions)
      out += "- **" + markdown_escape(v.label) + "**: " + v.analysis.verdict.text() + "\n";
    return out;
  }
  out += "ptune analyze: " + std::to_string(c.versions.size()) + " versions\n\n" + table::text(t);
  for (const auto& p : c.pairs) {
    out += "\n" + c.versions[p.from].label + " -> " + c.versions[p.to].label + ":\n";
    if (const auto& s = c.versions[p.to].prev)
      out += "  speedup " + speedup_text(*s) + ": " + speedup_detail(*s) + "\n";
    if (p.changes.empty()) out += "  no change above 1% of the step\n";
    for (const auto& x : p.changes) out += "  " + x.text + "\n";
  }
  out += "\nverdicts:\n";
  for (const auto& v : c.versions) out += "  " + v.label + ": " + v.analysis.verdict.text() + "\n";
  return out;
}

}  // namespace ptune::analyze
