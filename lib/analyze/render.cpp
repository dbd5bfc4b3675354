#include "analyze/render.hpp"

#include <cmath>
#include <cstdio>

#include "analyze/compare.hpp"
#include "analyze/events.hpp"
#include "core/numbers.hpp"
#include "core/table.hpp"

namespace ptune::analyze {
namespace {

using Json = nlohmann::ordered_json;
using numbers::fmt;
using table::shorten;

double r2(double v) { return std::round(v * 100.0) / 100.0; }

Json step_json(const Breakdown& b, const StepBreakdown& s) {
  const double len = s.end - s.start;
  auto share = [&](double us) { return len > 0 ? r2(100.0 * us / len) : 0.0; };
  Json split = Json::object();
  for (int c = 0; c < kCategories; ++c) split[category_name(c)] = share(s.us[c]);
  return Json{{"name", s.name},
              {"ms", r2(len / 1000.0)},
              {"split_pct", split},
              {"gpu_util_pct", b.has_gpu ? Json(share(s.kernel_us)) : Json(nullptr)},
              {"comm_pct", share(s.comm_us)},
              {"comm_overlap_pct", s.comm_us > 0 ? r2(100.0 * s.comm_overlap_us / s.comm_us) : 0.0},
              {"sync_ms", r2(s.sync_us / 1000.0)},
              {"syncs", s.syncs}};
}

Json names_json(const std::vector<NameTime>& v, bool self) {
  Json out = Json::array();
  for (const auto& n : v) {
    Json j{{"name", n.name}, {"count", n.count}, {"total_ms", r2(n.total_us / 1000.0)}};
    if (self) j["self_ms"] = r2(n.self_us / 1000.0);
    out.push_back(j);
  }
  return out;
}

Json opt(const std::optional<double>& v) { return v ? Json(r2(*v)) : Json(nullptr); }

/// The host syncs by name, each with where its calls came from ("from": [{where, count}]).
Json syncs_json(const Breakdown& b) {
  Json out = names_json(b.syncs, false);
  for (auto& s : out) {
    Json from = Json::array();
    for (const auto& o : b.sync_origins)
      if (o.name == s["name"].get<std::string>())
        from.push_back(Json{{"where", o.where}, {"count", o.count}});
    s["from"] = from;
  }
  return out;
}

std::string pad(std::string s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string steps_from(const Breakdown& b) { return b.from_steps ? "ProfilerStep#N" : "whole trace"; }

/// The split table's rows: the steps and the mean, as text cells.
std::vector<std::vector<std::string>> split_rows(const Breakdown& b) {
  std::vector<std::vector<std::string>> rows;
  auto row = [&](const StepBreakdown& s) {
    const double len = s.end - s.start;
    std::vector<std::string> r{s.name, fmt("%.1f", len / 1000.0)};
    for (int c = 0; c < kCategories; ++c) r.push_back(fmt("%.1f", len > 0 ? 100.0 * s.us[c] / len : 0.0));
    r.push_back(b.has_gpu ? fmt("%.1f", len > 0 ? 100.0 * s.kernel_us / len : 0.0) : "-");
    r.push_back(std::to_string(s.syncs));
    rows.push_back(r);
  };
  for (const auto& s : b.steps) row(s);
  if (b.steps.size() > 1) row(b.mean());
  return rows;
}

/// The split table: the step's name, then its figures (right-aligned).
table::Table split_table(const Breakdown& b) {
  std::vector<table::Column> h{{"step"}, {"ms", true}};
  for (int c = 0; c < kCategories; ++c)
    h.push_back({std::string(c == kCommunication ? "comm" : category_name(c)) + "%", true});
  h.push_back({"gpu_util%", true});
  h.push_back({"syncs", true});
  return {h, split_rows(b)};
}

/// A GPU class's kernel time by the precision the kernels' names say, in % ("" as "unknown").
Json kernel_precision_json(const ClassRate& c) {
  double all = 0;
  for (const auto& [p, us] : c.us_by_precision) all += us;
  if (all <= 0) return nullptr;
  Json j = Json::object();
  for (const auto& [p, us] : c.us_by_precision) j[p.empty() ? "unknown" : p] = r2(100.0 * us / all);
  return j;
}

Json ceilings_json(const Throughput& th) {
  if (!th.ceilings) return nullptr;
  const auto& c = *th.ceilings;
  return Json{{"peak_flops_per_s", c.peak.flops_per_s},
              {"precision", c.peak.precision},
              {"peak_source", c.peak.source},
              {"bytes_per_s", c.bandwidth.bytes_per_s > 0 ? Json(c.bandwidth.bytes_per_s) : Json(nullptr)},
              {"bandwidth_source", c.bandwidth.source}};
}

}  // namespace

Json throughput_json(const Throughput& th) {
  Json classes = Json::array();
  for (const auto& c : th.classes) {
    std::optional<double> roof;
    if (c.over.empty()) roof = roof_of(c, th.ceilings);
    const auto ai = c.intensity();
    const auto peak = peak_pct(c);
    classes.push_back(
        Json{{"class", c.name},
             {"calls_per_step", r2(c.calls)},
             {"flops_per_step", c.flops},
             {"ms_per_step", r2(c.us / 1000.0)},
             {"flops_per_s", c.flops_per_s()},
             {"peak_pct", peak ? Json(r2(*peak)) : Json(nullptr)},
             {"ceiling_flops_per_s", c.ceiling > 0 ? Json(c.ceiling) : Json(nullptr)},
             {"ceiling", c.ceiling_text.empty() ? Json(nullptr) : Json(c.ceiling_text)},
             {"kernel_precision_pct", kernel_precision_json(c)},
             {"over_ceiling", c.over.empty() ? Json(nullptr) : Json(c.over)},
             {"bytes_per_step", c.bytes ? Json(*c.bytes) : Json(nullptr)},
             {"flops_per_byte", ai ? Json(r2(*ai)) : Json(nullptr)},
             {"bound", bound_of(c, th.ceilings).empty() ? Json(nullptr) : Json(bound_of(c, th.ceilings))},
             {"roof_pct", roof && *roof > 0 ? Json(r2(100.0 * c.flops_per_s() / *roof)) : Json(nullptr)},
             {"precision", c.precision}});
  }
  const auto step_peak = step_peak_pct(th);
  return Json{{"source", th.source},
              {"missing", th.missing.empty() ? Json(nullptr) : Json(th.missing)},
              {"flops_per_step", th.flops},
              {"flops_per_s", th.source == "none" ? Json(nullptr) : Json(th.flops_per_s())},
              {"peak_pct", step_peak && th.source != "none" ? Json(r2(*step_peak)) : Json(nullptr)},
              {"ceiling_flops_per_s", th.step_ceiling > 0 ? Json(th.step_ceiling) : Json(nullptr)},
              {"over_ceiling", th.step_over.empty() ? Json(nullptr) : Json(th.step_over)},
              {"precision", th.precision.empty() ? Json(nullptr) : Json(th.precision)},
              {"ceilings", ceilings_json(th)},
              {"no_ceilings", th.no_ceilings.empty() ? Json(nullptr) : Json(th.no_ceilings)},
              {"classes", classes}};
}

table::Table throughput_cells(const Throughput& th) {
  table::Table t{{{"class"},
                  {"calls", true},
                  {"GFLOP", true},
                  {"ms", true},
                  {"GFLOP/s", true},
                  {"peak%", true},
                  {"MB", true},
                  {"FLOP/B", true},
                  {"bound", true},
                  {"roof%", true}},
                 {}};
  auto& rows = t.rows;
  auto opt_fmt = [](const char* f, std::optional<double> v) { return v ? fmt(f, *v) : std::string("-"); };
  for (const auto& c : th.classes) {
    std::optional<double> roof;
    if (c.over.empty()) roof = roof_of(c, th.ceilings);
    const std::string bound = bound_of(c, th.ceilings);
    rows.push_back({c.name, fmt("%.0f", c.calls), fmt("%.3f", c.flops / 1e9), fmt("%.2f", c.us / 1000.0),
                    fmt("%.2f", c.flops_per_s() / 1e9), opt_fmt("%.1f", peak_pct(c)),
                    opt_fmt("%.1f", c.bytes ? std::optional<double>(*c.bytes / 1e6) : std::nullopt),
                    opt_fmt("%.2f", c.intensity()), bound.empty() ? "-" : bound,
                    roof && *roof > 0 ? fmt("%.1f", 100.0 * c.flops_per_s() / *roof) : "-"});
  }
  rows.push_back({"step", "", fmt("%.3f", th.flops / 1e9), fmt("%.2f", th.step_us / 1000.0),
                  fmt("%.2f", th.flops_per_s() / 1e9), opt_fmt("%.1f", step_peak_pct(th)), "", "", "", ""});
  return t;
}

std::string throughput_table(const Throughput& th) {
  if (th.source == "none") return th.missing.empty() ? "" : "\nFLOP/s: none; " + th.missing + "\n";
  std::string out = "\nFLOP/s per operator class (per step; FLOPs from the " +
                    std::string(th.source == "trace" ? "trace" : "input shapes") + "):\n";
  const table::Table t = throughput_cells(th);
  out += table::text(t, {"  ", " "});
  if (!th.peaks.empty()) out += "  ceilings: " + ceilings_text(th) + "\n";
  if (!th.no_ceilings.empty()) out += "  no ceilings: " + th.no_ceilings + "\n";
  for (const auto& c : th.classes)
    if (c.ceiling_text.find('%') != std::string::npos)
      out += "  " + c.name + " against " + c.ceiling_text + ", time-weighted: " + rate_text(c.ceiling) + "\n";
  for (const auto& n : over_notes(th)) out += "  " + n + "\n";
  return out;
}

const std::vector<std::string>& formats() {
  static const std::vector<std::string> f{"table", "json", "md", "csv"};
  return f;
}

Json gpu_json(const Breakdown& b) {
  if (!b.has_gpu) return nullptr;
  const double span = b.gpu_span_us;
  auto p = [&](double us) { return span > 0 ? r2(100.0 * us / span) : 0.0; };
  Json kernels = Json::array();
  for (const auto& k : b.all_kernels) {
    if (kernels.size() >= 20) break;
    kernels.push_back(Json{{"name", k.name}, {"count", k.count}, {"total_us", r2(k.total_us)}});
  }
  const auto& h = b.hta;
  auto q = [&](double us) { return h.span_us > 0 ? r2(100.0 * us / h.span_us) : 0.0; };
  Json hk = Json::array();
  for (const auto& k : h.kernels)
    hk.push_back(Json{{"name", k.name}, {"count", k.count}, {"total_us", r2(k.total_us)}});
  Json trace{{"span_ms", r2(h.span_us / 1000.0)},
             {"idle_pct", q(h.span_us - h.busy_us)},
             {"compute_pct", q(h.compute_us)},
             {"non_compute_pct", q(h.busy_us - h.compute_us)},
             {"comm_overlap_pct", h.comm_us > 0 ? Json(r2(100.0 * h.overlap_us / h.comm_us)) : Json(nullptr)},
             {"kernels", hk}};
  return Json{{"span_ms", r2(span / 1000.0)},
              {"idle_pct", p(span - b.gpu_busy_total_us)},
              {"compute_pct", p(b.gpu_compute_total_us)},
              {"non_compute_pct", p(b.gpu_busy_total_us - b.gpu_compute_total_us)},
              {"kernels", kernels},
              {"trace", trace}};
}

/// profile_memory=True: the operators that allocated most, per step; null without samples.
Json allocations_json(const Breakdown& b) {
  if (b.allocators.empty()) return nullptr;
  Json ops = Json::array();
  for (const auto& x : b.allocations_per_step())
    ops.push_back(Json{{"name", x.name}, {"count_per_step", r2(x.count)}, {"mb_per_step", r2(x.mb)}});
  return Json{{"device", b.allocators_gpu ? "gpu" : "cpu"}, {"operators", ops}};
}

/// One line: "allocated most (GPU, per step): aten::conv2d 512 MB (4x), ...".
std::string allocations_line(const Breakdown& b) {
  if (b.allocators.empty()) return "";
  std::string s =
      std::string("allocated most (") + (b.allocators_gpu ? "GPU" : "host") + " memory, per step): ";
  const auto per_step = b.allocations_per_step();
  for (size_t i = 0; i < per_step.size(); ++i)
    s += (i ? ", " : "") + per_step[i].name + " " + fmt("%.0f MB", per_step[i].mb) + " (" +
         fmt("%.3g", per_step[i].count) + "x)";
  return s;
}

namespace {

/// The "distributed" section: every rank's figures and the straggler, or null for one rank.
Json distributed_json(const Analysis& a) {
  if (!a.distributed) return nullptr;
  auto rank_of = [&](size_t i) { return a.ranks[i].rank ? Json(*a.ranks[i].rank) : Json(i); };
  const auto& d = *a.distributed;
  Json ranks = Json::array();
  for (const auto& r : a.ranks) {
    const auto m = r.mean();
    ranks.push_back(
        Json{{"rank", r.rank ? Json(*r.rank) : Json(nullptr)},
             {"pid", r.host_pid},
             {"files", r.files},
             {"ms_per_step", r2(m.ms())},
             {"comm_pct", m.end > 0 ? r2(100.0 * m.comm_us / m.end) : 0.0},
             {"comm_overlap_pct", m.comm_us > 0 ? r2(100.0 * m.comm_overlap_us / m.comm_us) : 0.0},
             {"gpu_util_pct", r.has_gpu && m.end > 0 ? Json(r2(100.0 * m.kernel_us / m.end)) : Json(nullptr)},
             {"gpu", gpu_json(r)}});
  }
  Json straggler = nullptr;
  if (a.straggler) {
    const auto& st = *a.straggler;
    for (const auto& t : st.ranks) {
      auto& r = ranks[t.index];
      r["step_ms"] = r2(t.step_us / 1000.0), r["compute_ms"] = r2(t.compute_us / 1000.0);
      r["input_ms"] = r2(t.input_us / 1000.0), r["wait_ms"] = r2(t.wait_us / 1000.0);
      r["work_per_step"] = t.work, r["work_unit"] = t.work_unit;
    }
    straggler = Json{{"rank", st.slow ? rank_of(st.ranks[*st.slow].index) : Json(nullptr)},
                     {"why", st.why.empty() ? Json(nullptr) : Json(st.why)},
                     {"text", st.text}};
  }
  return Json{{"world_size", d.world_size},
              {"slowest_rank", rank_of(d.slowest)},
              {"fastest_rank", rank_of(d.fastest)},
              {"comm_pct", r2(d.comm_pct)},
              {"comm_overlap_pct", r2(d.comm_overlap_pct)},
              {"ranks", ranks},
              {"straggler", straggler}};
}

/// The "top_kernels" section: each kernel's count, time and whether it uses Tensor Cores.
Json kernels_json(const Breakdown& b) {
  Json top_kernels = Json::array();
  for (const auto& k : b.kernels)
    top_kernels.push_back(Json{{"name", k.name},
                               {"count", k.count},
                               {"total_ms", r2(k.total_us / 1000.0)},
                               {"tensor_core", is_tensor_core_kernel(k.name)}});
  return top_kernels;
}

/// "device 0", or "host" for device -1.
std::string device_name(int64_t device) { return device < 0 ? "host" : "device " + std::to_string(device); }

/// The "memory" section: the peaks on average and per step, or null without memory events.
Json memory_json(const Breakdown& b) {
  const auto mean = b.mean();
  if (!mean.peak_allocated_mb && b.memory_peaks.empty()) return nullptr;
  Json per = Json::array();
  for (const auto& s : b.steps)
    per.push_back(
        Json{{"name", s.name},
             {"peak_allocated_mb", s.peak_allocated_mb ? Json(r2(*s.peak_allocated_mb)) : Json(nullptr)},
             {"peak_reserved_mb", s.peak_reserved_mb ? Json(r2(*s.peak_reserved_mb)) : Json(nullptr)}});
  Json devices = Json::array();
  for (const auto& p : b.memory_peaks)
    devices.push_back(Json{{"device", p.device},
                           {"peak_allocated_mb", r2(p.allocated_mb)},
                           {"reserved_mb_at_peak", p.reserved_mb ? Json(r2(*p.reserved_mb)) : Json(nullptr)},
                           {"operator_at_peak", p.op},
                           {"step", p.step},
                           {"ms_into_step", r2(p.at_ms)}});
  Json timeline = Json::array();
  for (const auto& [ms, mb] : b.memory_timeline) timeline.push_back(Json::array({r2(ms), r2(mb)}));
  if (!mean.peak_allocated_mb)  // the host's memory alone (a CPU trace): its highest, no GPU steps
    return Json{{"peak_allocated_mb", nullptr},
                {"peak_reserved_mb", nullptr},
                {"steps", Json::array()},
                {"devices", devices},
                {"timeline_ms_mb", timeline}};
  return Json{{"peak_allocated_mb", r2(*mean.peak_allocated_mb)},
              {"peak_reserved_mb", mean.peak_reserved_mb ? Json(r2(*mean.peak_reserved_mb)) : Json(nullptr)},
              {"steps", per},
              {"devices", devices},
              {"timeline_ms_mb", timeline}};
}

}  // namespace

Json to_json(const Analysis& a, const Version* v) {
  const Breakdown& b = a.ranks[a.primary];
  Json steps = Json::array();
  for (const auto& s : b.steps) steps.push_back(step_json(b, s));
  Json files = Json::array();
  for (const auto& r : a.ranks)
    for (const auto& f : r.files) files.push_back(f);
  const auto mean = b.mean();
  std::optional<int64_t> batch = v && v->batch_size ? v->batch_size : b.batch_size;
  std::optional<double> sps;
  if (batch && mean.end > 0)
    sps = static_cast<double>(*batch) * static_cast<double>(a.ranks.size()) * 1e6 / mean.end;
  Json out{
      {"path", a.path},
      {"writer", b.writer},
      {"device", b.has_gpu ? "cuda" : "cpu"},
      {"devices", b.devices},
      {"steps_from", steps_from(b)},
      {"verdict", Json{{"rule", a.verdict.rule},
                       {"evidence", a.verdict.evidence},
                       {"move", a.verdict.move},
                       {"text", a.verdict.text()}}},
      {"notes", a.notes},
      {"rank", b.rank ? Json(*b.rank) : Json(nullptr)},
      {"steps", steps},
      {"mean", step_json(b, mean)},
      {"tensor_core_pct", opt(b.tensor_core_pct)},
      {"half_precision_pct", opt(b.half_pct)},
      {"top_kernels", kernels_json(b)},
      {"top_operators", names_json(b.operators, true)},
      {"dataloader", names_json(b.dataloader, false)},
      {"h2d", Json{{"count", b.h2d.count},
                   {"pinned", b.h2d.pinned},
                   {"pageable", b.h2d.pageable},
                   {"ms", r2(b.h2d.us / 1000.0)},
                   {"bytes", b.h2d.bytes}}},
      {"syncs", syncs_json(b)},
      {"distributed", distributed_json(a)},
      {"files", files},
  };
  // Added after the first layout's keys (docs/analyze.md).
  out["label"] = v ? Json(v->label) : Json(nullptr);
  out["schema_version"] = b.schema_version ? Json(*b.schema_version) : Json(nullptr);
  out["batch_size"] = batch ? Json(*batch) : Json(nullptr);
  out["samples_per_s"] = sps ? Json(r2(*sps)) : Json(nullptr);
  out["cuda_graphs"] = b.cuda_graphs;
  out["streams"] = b.streams;
  out["processes"] = b.processes;
  out["gpu"] = gpu_json(b);
  out["memory"] = memory_json(b);
  out["allocations"] = allocations_json(b);
  out["under_load"] = b.under_load;
  out["load"] = b.load_summary.empty() ? Json(nullptr) : Json(b.load_summary);
  out["throughput"] =
      a.primary < a.throughput.size() ? throughput_json(a.throughput[a.primary]) : Json(nullptr);
  return out;
}

namespace {

/// The ranks of a distributed run as a table: per step, the step, compute, input, waiting in
/// collectives, communication and its overlapped share.
table::Table ranks_cells(const Analysis& a) {
  table::Table t{{{"rank"},
                  {"step ms", true},
                  {"compute ms", true},
                  {"input ms", true},
                  {"waiting ms", true},
                  {"communication %", true},
                  {"overlapped %", true}},
                 {}};
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const auto& r = a.ranks[i];
    const auto m = r.mean();
    const bool timed = a.straggler && i < a.straggler->ranks.size();
    const RankTimes none;
    const RankTimes& times = timed ? a.straggler->ranks[i] : none;
    auto ms = [&](double us) { return timed ? fmt("%.1f", us / 1000.0) : std::string("-"); };
    t.rows.push_back({r.who(), fmt("%.1f", m.ms()), ms(times.compute_us), ms(times.input_us),
                      ms(times.wait_us), fmt("%.1f", m.end > 0 ? 100.0 * m.comm_us / m.end : 0.0),
                      fmt("%.0f", m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0.0)});
  }
  return t;
}

/// The analysis as Markdown: the verdict, notes, the step split and the largest operators,
/// kernels and host syncs.
std::string render_markdown(const Analysis& a, const std::string& intro, const table::Table& split) {
  using table::markdown_escape;
  const Breakdown& b = a.ranks[a.primary];
  std::string out = "## ptune analyze: " + markdown_escape(a.path) + "\n\n" + markdown_escape(intro) + "\n\n";
  out += "**Verdict:** " + a.verdict.text() + "\n\n";
  for (const auto& n : a.notes) out += "- " + n + "\n";
  if (!a.notes.empty()) out += "\n";
  out += table::markdown(split);
  auto list = [&](const std::string& title, const std::vector<NameTime>& v, bool self) {
    if (v.empty()) return;
    out += "\n" + title + "\n\n| name | calls | " + (self ? "self ms | " : "") + "total ms |\n|---|---:|" +
           (self ? "---:|" : "") + "---:|\n";
    for (const auto& n : v)
      out += "| " + markdown_escape(n.name) + " | " + std::to_string(n.count) + " | " +
             (self ? fmt("%.2f", n.self_us / 1000.0) + " | " : "") + fmt("%.2f", n.total_us / 1000.0) +
             " |\n";
  };
  list("Largest operators (host, by self time):", b.operators, true);
  list("Largest kernels:", b.kernels, false);
  list("Host syncs:", b.syncs, false);
  if (!b.sync_origins.empty()) {
    out += "\nWhere the host syncs came from:\n\n";
    for (const auto& o : b.sync_origins)
      out += "- " + markdown_escape(o.name) + " x" + std::to_string(o.count) + " from " + o.where + "\n";
  }
  if (const std::string line = allocations_line(b); !line.empty()) out += "\n" + markdown_escape(line) + "\n";
  if (a.distributed) out += "\nRanks (per step):\n\n" + table::markdown(ranks_cells(a));
  if (a.primary < a.throughput.size() && a.throughput[a.primary].source != "none")
    out += "\nFLOP/s per operator class (per step):\n\n" +
           table::markdown(throughput_cells(a.throughput[a.primary]));
  return out;
}

/// The terminal's lines above the table: samples/s, peak GPU memory, allocations.
std::string terminal_figures(const Analysis& a, const Version* v) {
  std::string out;
  const auto j = to_json(a, v);
  if (j["samples_per_s"].is_number())
    out += "batch " + std::to_string(j["batch_size"].get<int64_t>()) +
           fmt(": %.1f samples/s", j["samples_per_s"].get<double>()) +
           (a.ranks.size() > 1 ? " (all ranks)" : "") + "\n";
  const Breakdown& b = a.ranks[a.primary];
  if (j["memory"].is_object() && j["memory"]["peak_allocated_mb"].is_number()) {
    out += fmt("peak GPU memory: %.0f MB allocated", j["memory"]["peak_allocated_mb"].get<double>()) +
           (j["memory"]["peak_reserved_mb"].is_number()
                ? fmt(", %.0f MB reserved", j["memory"]["peak_reserved_mb"].get<double>())
                : "") +
           "\n";
  } else if (b.has_gpu && b.writer != "ptune") {
    out +=
        "peak GPU memory: no memory events; `profile_memory=True` in `torch.profiler.profile(...)` records "
        "them\n";
  }
  for (const auto& p : b.memory_peaks)
    out += "  " + device_name(p.device) + ": highest " + fmt("%.0f MB allocated", p.allocated_mb) +
           (p.reserved_mb && *p.reserved_mb > 0 ? fmt(" (%.0f MB reserved)", *p.reserved_mb) : "") +
           ", in `" + p.op + "`, " + p.step + fmt(" at %.1f ms", p.at_ms) + "\n";
  if (const std::string line = allocations_line(a.ranks[a.primary]); !line.empty()) out += line + "\n";
  return out;
}

/// The terminal's section on the ranks of a distributed run: per step, compute, input and
/// waiting in collectives.
std::string terminal_ranks(const Analysis& a) {
  if (!a.distributed) return "";
  std::string out = "\nranks (per step: compute, input, waiting in collectives):\n";
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const auto& r = a.ranks[i];
    const auto m = r.mean();
    out += "  " + r.who() + "  " + fmt("%.1f ms/step", m.ms());
    if (a.straggler && i < a.straggler->ranks.size()) {
      const auto& t = a.straggler->ranks[i];
      out += "  compute " + fmt("%.1f ms", t.compute_us / 1000.0) + "  input " +
             fmt("%.1f ms", t.input_us / 1000.0) + "  waiting " + fmt("%.1f ms", t.wait_us / 1000.0);
    }
    out += "  communication " + fmt("%.1f%%", m.end > 0 ? 100.0 * m.comm_us / m.end : 0.0) + " (" +
           fmt("%.0f%% overlapped)", m.comm_us > 0 ? 100.0 * m.comm_overlap_us / m.comm_us : 0.0) + "\n";
  }
  return out;
}

/// The analysis as the terminal shows it.
std::string render_terminal(const Analysis& a, const Version* v, const std::string& intro,
                            const table::Table& split) {
  const Breakdown& b = a.ranks[a.primary];
  std::string out = "ptune analyze: " + a.path + "\n" + intro + "\n" + terminal_figures(a, v) + "\n";
  out += table::text(split);
  auto list = [&](const std::string& title, const std::vector<NameTime>& v, bool self) {
    if (v.empty()) return;
    out += "\n" + title + "\n";
    for (const auto& n : v)
      out += "  " + pad(fmt("%.2f ms", (self ? n.self_us : n.total_us) / 1000.0), 11, true) + "  " +
             pad(std::to_string(n.count) + "x", 6, true) + "  " + shorten(table::one_line(n.name), 90) + "\n";
  };
  list("largest operators (host, self time over the steps):", b.operators, true);
  list("largest kernels:", b.kernels, false);
  if (b.has_gpu) {
    out += "\nTensor Cores: " + fmt("%.0f%%", b.tensor_core_pct.value_or(0)) +
           " of kernel time; fp16/bf16: " + fmt("%.0f%%", b.half_pct.value_or(0)) + "\n";
    out += "host-to-device copies: " + std::to_string(b.h2d.count) + " (" + std::to_string(b.h2d.pinned) +
           " pinned, " + std::to_string(b.h2d.pageable) + " pageable), " + fmt("%.2f ms", b.h2d.us / 1000.0) +
           "\n";
  }
  list("host syncs:", b.syncs, false);
  for (const auto& o : b.sync_origins)
    out += "  " + pad(std::to_string(o.count) + "x", 19, true) + "  " + o.name + " from " + o.where + "\n";
  out += terminal_ranks(a);
  if (a.primary < a.throughput.size()) out += throughput_table(a.throughput[a.primary]);
  out += "\nverdict: " + a.verdict.text() + "\n";
  for (const auto& n : a.notes) out += "note: " + n + "\n";
  return out;
}

}  // namespace

std::string render_analysis(const Analysis& a, const std::string& format, const Version* v) {
  // Paths (the one given, a folder's file names) need not be UTF-8: bad bytes become U+FFFD.
  if (format == "json") return to_json(a, v).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  const Breakdown& b = a.ranks[a.primary];
  const table::Table split = split_table(b);
  if (format == "csv") return table::csv(split);
  const size_t n_steps = b.steps.size();
  std::string device = b.has_gpu ? (b.devices.empty() ? "cuda" : "cuda (" + b.devices.front() + ")") : "cpu";
  std::string intro =
      "writer " + b.writer + ", " + device + ", " + std::to_string(n_steps) + " step" +
      (n_steps == 1 ? "" : "s") + " from " + steps_from(b) +
      (a.distributed ? ", " + std::to_string(a.ranks.size()) + " ranks (" + shown_rank(a) + " shown)" : "");
  if (format == "md") return render_markdown(a, intro, split);
  return render_terminal(a, v, intro, split);
}

}  // namespace ptune::analyze
