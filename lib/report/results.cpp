#include "report/results.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "errors.hpp"
#include "files.hpp"

namespace ptune::report {
namespace {

using Json = nlohmann::ordered_json;

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string changes_text(const Json& changes) {
  if (changes.empty()) return "-";
  std::string s;
  for (auto it = changes.begin(); it != changes.end(); ++it) {
    if (!s.empty()) s += ", ";
    s += it.key() + "=" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  }
  return s;
}

double round_to(double v, int digits) {
  double p = std::pow(10.0, digits);
  return std::round(v * p) / p;
}

struct Column {
  std::string header;
  bool right;
};

std::string mib(int64_t bytes) { return fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 0) + " MiB"; }

/// The cells of one row in table/csv/md order; `gpu` adds GPU busy and peak memory.
std::vector<std::string> cells(const Row& row, size_t index, bool gpu) {
  std::vector<std::string> c = {std::to_string(index), row.name, changes_text(row.changes)};
  if (!row.m) {
    c.insert(c.end(), {"", std::to_string(row.num_workers), "", "", "", "", "", "", ""});
    if (gpu) c.insert(c.end(), {"", ""});
    return c;
  }
  const auto& m = *row.m;
  c.push_back(std::to_string(m.batch_size));
  c.push_back(std::to_string(row.num_workers));
  c.push_back(fixed(m.ms_per_step, 1) + (m.repeat_ms.size() > 1 ? " ±" + fixed(m.spread_pct, 0) + "%" : ""));
  c.push_back(fixed(m.samples_per_s, 1));
  c.push_back(fixed(row.speedup_vs_prev, 2) + "x");
  c.push_back(fixed(row.speedup_vs_base, 2) + "x");
  c.push_back(fixed(m.data_wait_pct, 0) + "%");
  c.push_back(fixed(m.h2d_pct, 0) + "%");
  c.push_back(m.loss ? fixed(*m.loss, 3) : "-");
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

std::vector<Column> columns(bool gpu) {
  std::vector<Column> cols = {
      {"#", true},        {"row", false},      {"change", false},   {"batch", true},
      {"workers", true},  {"ms/step", true},   {"samples/s", true}, {"vs prev", true},
      {"vs base", true},  {"data wait", true}, {"h2d", true},       {"loss", true}};
  if (gpu) cols.insert(cols.end(), {{"GPU busy", true}, {"peak mem", true}});
  return cols;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

std::string trail(const Results& r) {
  std::string s;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& row = r.rows[i];
    if (row.status != "ok") s += "  " + std::to_string(i) + " " + row.name + ": " + row.status + "\n";
    else if (!row.diagnosis.empty()) s += "  " + std::to_string(i) + " " + row.name + ": " + row.diagnosis + "\n";
    for (const auto& n : row.notes) s += "  " + std::to_string(i) + " " + row.name + ": note: " + n + "\n";
    if (row.m && !row.m->trace_path.empty())
      s += "  " + std::to_string(i) + " " + row.name + ": trace " + row.m->trace_path + "\n";
  }
  return s;
}

}  // namespace

const std::vector<std::string>& formats() {
  static const std::vector<std::string> kFormats = {"table", "json", "csv", "md"};
  return kFormats;
}

void compute_speedups(std::vector<Row>& rows) {
  if (rows.empty() || !rows.back().m) return;
  Row& last = rows.back();
  const Row* base = nullptr;
  const Row* prev = nullptr;
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    if (!rows[i].m || rows[i].mode != last.mode) continue;
    if (!base) base = &rows[i];
    prev = &rows[i];
  }
  const double s = last.m->samples_per_s;
  last.speedup_vs_prev = prev && prev->m->samples_per_s > 0 ? s / prev->m->samples_per_s : 1.0;
  last.speedup_vs_base = base && base->m->samples_per_s > 0 ? s / base->m->samples_per_s : 1.0;
}

void note_semantics(Row& row, const std::optional<double>& base_loss) {
  static const std::vector<std::string> kSemantic = {"loader.batch_size", "optim.amp",       "optim.lr",
                                                     "optim.kind",        "model.arch",      "data.image_size",
                                                     "dist.accumulate"};
  if (!row.m || !row.m->loss || !base_loss) return;
  for (const auto& key : kSemantic) {
    if (!row.changes.contains(key)) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s changes training semantics; loss %.3f vs %.3f in the first row", key.c_str(),
                  *row.m->loss, *base_loss);
    row.notes.push_back(buf);
  }
}

Json to_json(const Results& r) {
  Json rows = Json::array();
  for (const auto& row : r.rows) {
    Json j;
    j["name"] = row.name;
    j["changes"] = row.changes.is_null() ? Json::object() : row.changes;
    j["mode"] = row.mode;
    j["num_workers"] = row.num_workers;
    if (row.m) {
      const auto& m = *row.m;
      j["batch_size"] = m.batch_size;
      j["steps"] = m.steps;
      j["ms_per_step"] = round_to(m.ms_per_step, 3);
      j["repeat_ms_per_step"] = Json::array();
      for (double v : m.repeat_ms) j["repeat_ms_per_step"].push_back(round_to(v, 3));
      j["spread_pct"] = round_to(m.spread_pct, 2);
      j["samples_per_s"] = round_to(m.samples_per_s, 2);
      j["speedup_vs_prev"] = round_to(row.speedup_vs_prev, 4);
      j["speedup_vs_base"] = round_to(row.speedup_vs_base, 4);
      j["data_wait_pct"] = round_to(m.data_wait_pct, 2);
      j["h2d_pct"] = round_to(m.h2d_pct, 2);
      j["compute_pct"] = round_to(m.compute_pct, 2);
      j["peak_mem_bytes"] = m.peak_mem_bytes ? Json(*m.peak_mem_bytes) : Json(nullptr);
      j["gpu_busy_pct"] = m.gpu_busy_pct ? Json(round_to(*m.gpu_busy_pct, 2)) : Json(nullptr);
      j["trace"] = m.trace_path.empty() ? Json(nullptr) : Json(m.trace_path);
      j["loss"] = m.loss ? Json(round_to(*m.loss, 6)) : Json(nullptr);
    }
    j["diagnosis"] = row.diagnosis;
    j["notes"] = row.notes;
    if (!row.loss_curve.empty()) {
      j["loss_curve"] = Json::array();
      for (double v : row.loss_curve) j["loss_curve"].push_back(round_to(v, 6));
    }
    j["status"] = row.status;
    rows.push_back(j);
  }
  const Environment& e = r.environment;
  return Json{{"ptune_version", kVersion},
              {"config", r.config},
              {"environment",
               Json{{"torch", e.torch}, {"device", e.device}, {"device_kind", e.device_kind},
                    {"cuda", e.cuda.empty() ? Json(nullptr) : Json(e.cuda)},
                    {"cpu_threads", e.cpu_threads}, {"world_size", e.world_size}}},
              {"rows", rows},
              {"status", r.status}};
}

std::string render(const Results& r, const std::string& format, bool color) {
  if (format == "json") return to_json(r).dump(2) + "\n";
  const bool gpu = any_gpu(r);
  std::vector<std::vector<std::string>> body;
  for (size_t i = 0; i < r.rows.size(); ++i) body.push_back(cells(r.rows[i], i, gpu));
  const auto cols = columns(gpu);
  std::ostringstream os;
  if (format == "csv") {
    std::vector<std::string> hdr = {"index", "name", "changes", "batch_size", "num_workers", "ms_per_step",
                                    "samples_per_s", "speedup_vs_prev", "speedup_vs_base",
                                    "data_wait_pct", "h2d_pct", "loss", "gpu_busy_pct", "peak_mem_bytes", "status"};
    for (size_t k = 0; k < hdr.size(); ++k) os << (k ? "," : "") << hdr[k];
    os << "\n";
    for (size_t i = 0; i < r.rows.size(); ++i) {
      const Row& row = r.rows[i];
      std::vector<std::string> v = {std::to_string(i), row.name, changes_text(row.changes),
                                    row.m ? std::to_string(row.m->batch_size) : "",
                                    std::to_string(row.num_workers)};
      if (row.m) {
        const auto& m = *row.m;
        v.insert(v.end(), {fixed(m.ms_per_step, 3), fixed(m.samples_per_s, 2), fixed(row.speedup_vs_prev, 4),
                           fixed(row.speedup_vs_base, 4), fixed(m.data_wait_pct, 2), fixed(m.h2d_pct, 2),
                           m.loss ? fixed(*m.loss, 6) : "", m.gpu_busy_pct ? fixed(*m.gpu_busy_pct, 2) : "",
                           m.peak_mem_bytes ? std::to_string(*m.peak_mem_bytes) : ""});
      } else {
        v.insert(v.end(), {"", "", "", "", "", "", "", "", ""});
      }
      v.push_back(row.status);
      for (size_t k = 0; k < v.size(); ++k) os << (k ? "," : "") << csv_escape(v[k]);
      os << "\n";
    }
    return os.str();
  }
  if (format == "md") {
    os << "|";
    for (const auto& c : cols) os << " " << c.header << " |";
    os << "\n|";
    for (const auto& c : cols) os << (c.right ? "---:|" : "---|");
    os << "\n";
    for (size_t i = 0; i < body.size(); ++i) {
      os << "|";
      for (size_t k = 0; k < body[i].size(); ++k) {
        std::string cell = body[i][k];
        if (k == 3 && r.rows[i].status != "ok") cell = r.rows[i].status;
        os << " " << cell << " |";
      }
      os << "\n";
    }
    return os.str();
  }
  // Aligned terminal table.
  std::vector<size_t> width(cols.size());
  for (size_t k = 0; k < cols.size(); ++k) width[k] = cols[k].header.size();
  auto display_len = [](const std::string& s) {  // UTF-8 code points, ANSI colours excluded
    size_t n = 0;
    bool escape = false;
    for (unsigned char ch : s) {
      if (ch == 0x1b) escape = true;
      else if (escape) escape = ch != 'm';
      else n += (ch & 0xC0) != 0x80;
    }
    return n;
  };
  auto paint = [&](const std::string& text, const char* code) {
    return color ? std::string("\033[") + code + "m" + text + "\033[0m" : text;
  };
  if (color) {
    for (size_t i = 0; i < body.size(); ++i) {
      const Row& row = r.rows[i];
      if (!row.m) continue;
      std::string& prev = body[i][7];
      if (row.speedup_vs_prev >= 1.05) prev = paint(prev, "32");
      else if (row.speedup_vs_prev < 0.95) prev = paint(prev, "31");
    }
  }
  for (auto& b : body)
    for (size_t k = 0; k < b.size(); ++k) width[k] = std::max(width[k], display_len(b[k]));
  auto line = [&](const std::vector<std::string>& v) {
    std::string s;
    for (size_t k = 0; k < v.size(); ++k) {
      std::string pad(width[k] - display_len(v[k]), ' ');
      s += (k ? "  " : "") + (cols[k].right ? pad + v[k] : v[k] + pad);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> hdr;
  for (const auto& c : cols) hdr.push_back(c.header);
  os << line(hdr);
  for (auto& b : body) os << line(b);
  const Environment& e = r.environment;
  os << "device: " << e.device << " (" << e.device_kind << "), LibTorch " << e.torch
     << (e.cuda.empty() ? "" : " (CUDA " + e.cuda + " build)") << ", " << e.cpu_threads << " CPU threads" << (e.world_size > 1 ? ", " + std::to_string(e.world_size) + " processes" : "") << "\n";
  std::string t = trail(r);
  if (color) {  // skipped rows yellow, failed rows red
    std::istringstream lines(t);
    std::string line, painted;
    while (std::getline(lines, line)) {
      if (line.find(": skipped: ") != std::string::npos) line = paint(line, "33");
      else if (line.find(": failed: ") != std::string::npos) line = paint(line, "31");
      painted += line + "\n";
    }
    t = painted;
  }
  if (!t.empty()) os << t;
  return os.str();
}

void write_atomic(const std::string& path, const std::string& text, const std::string& what) {
  files::write_text_atomically(path, what, text);
}

}  // namespace ptune::report
