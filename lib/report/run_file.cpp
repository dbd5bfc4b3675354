#include "report/run_file.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/errors.hpp"
#include "report/status.hpp"

namespace ptune::report {
namespace {

using Json = nlohmann::ordered_json;

/// Whether a row of a normalized document has numbers (its samples_per_s is not null).
bool has_numbers(const Json& row) {
  return row.contains("samples_per_s") && row["samples_per_s"].is_number();
}

Json number_or_null(const Json& v) { return v.is_number() ? v : Json(nullptr); }

Json numbers_or_null(const Json& v) {
  if (!v.is_array()) return nullptr;
  for (const auto& x : v)
    if (!x.is_number()) return nullptr;
  return v;
}

Json strings_or_null(const Json& v) {
  if (!v.is_array()) return nullptr;
  for (const auto& x : v)
    if (!x.is_string()) return nullptr;
  return v;
}

Json text_or_null(const Json& v) {
  if (v.is_null()) return nullptr;
  if (v.is_string()) return v.get<std::string>().empty() ? Json(nullptr) : v;
  return v.dump();
}

/// The figures and window times a run can write: finite, not negative, below 1e15 (a hand-edited
/// 1e308 would overflow every ratio the report takes).
constexpr const char* kPlausible = "a number from 0 to 1e15";
bool plausible(double v) { return std::isfinite(v) && v >= 0 && v < 1e15; }

/// Throws UsageError "<where>.<k>: <value> is not ..." where `v`, the value of a row's key `k` of
/// `kind`, is not what a run writes there: a figure of another type than a number, a figure's
/// point outside plausible(), a bound negative or not finite, a window that is not a time.
void check_value(const std::string& k, KeyKind kind, const Json& v, const std::string& where) {
  // The figures a report stands on are never dropped in silence; other fields of another type
  // are read as absent.
  const bool figure = kind == KeyKind::kFigure || kind == KeyKind::kBound;
  if (figure && !v.is_null() && !v.is_number())
    throw UsageError(where + "." + k + ": " + v.dump() +
                     " is not a number (a results file holds numbers or null there)");
  // A figure's point: what a run measures; its interval's bounds may be anything finite and not
  // negative (a row of two pairs under load reads [1.2e-70, 8.8e+62]).
  const bool bound = kind == KeyKind::kBound;
  if (figure && v.is_number() &&
      (bound ? !(std::isfinite(v.get<double>()) && v.get<double>() >= 0) : !plausible(v.get<double>())))
    throw UsageError(where + "." + k + ": " + v.dump() + " is not a figure a run gives (" +
                     (bound ? "a finite number from 0" : kPlausible) + ")");
  if (kind == KeyKind::kWindows && v.is_array())
    for (const auto& x : v)
      if (!x.is_number() || !plausible(x.get<double>()))
        throw UsageError(where + "." + k + ": " + x.dump() + " is not a window's time (" + kPlausible + ")");
}

/// `v` as a key of `kind` holds it: null where it is absent or of another type.
Json value_of(KeyKind kind, const Json& v) {
  switch (kind) {
    case KeyKind::kNumber:
    case KeyKind::kFigure:
    case KeyKind::kBound:
      return number_or_null(v);
    case KeyKind::kNumbers:
    case KeyKind::kWindows:
      return numbers_or_null(v);
    case KeyKind::kFlag:
      return v.is_boolean() ? v : Json(nullptr);
    case KeyKind::kTexts:
      return strings_or_null(v);
    case KeyKind::kObject:
      return v.is_object() ? v : Json::object();
    case KeyKind::kNotes: {
      Json notes = Json::array();
      if (v.is_array())
        for (const auto& n : v) notes.push_back(n.is_string() ? n : Json(n.dump()));
      else if (v.is_string())
        notes.push_back(v);
      return notes;
    }
    case KeyKind::kText:
      break;
  }
  return text_or_null(v);
}

/// A row of any results file in the one shape.
Json normalize_row(const Json& in, const std::string& where) {
  if (!in.is_object()) throw UsageError(where + ": not an object");
  if (!in.contains("name") || !in["name"].is_string()) throw UsageError(where + ": no \"name\"");
  Json row;
  for (const auto& [k, kind] : row_key_kinds()) {
    const Json v = in.contains(k) ? in[k] : Json(nullptr);
    check_value(k, kind, v, where);
    row[k] = value_of(kind, v);
  }
  if (row["mode"].is_null()) row["mode"] = "train";
  if (row["status"].is_null())
    row["status"] = row["samples_per_s"].is_null() ? "failed: no samples_per_s" : "ok";
  return row;
}

/// The older layout's row ("pytorch_samples_per_s", one number): its samples/s, or why it has
/// none (ptune's side skipped, or no PyTorch number).
void add_single_number(const Json& in, Json& row) {
  if (in["pytorch_samples_per_s"].is_number()) {
    row["samples_per_s"] = in["pytorch_samples_per_s"];
    row["status"] = "ok";
    return;
  }
  const std::string ptune_status = in.contains("ptune_status") && in["ptune_status"].is_string()
                                       ? in["ptune_status"].get<std::string>()
                                       : "";
  row["status"] = RowStatus::from_text(ptune_status).is(RowStatus::State::kSkipped)
                      ? ptune_status
                      : "failed: no PyTorch number";
}

/// PyTorch's variants of a row: the fastest that ran, how many ran, and the first failure.
struct Variants {
  const Json* best = nullptr;
  size_t ran = 0;
  std::string first_failure;  // "variant: status"
};

Variants variants_of(const Json& in) {
  Variants out;
  if (!in.contains("pytorch") || !in["pytorch"].is_array()) return out;
  for (const auto& v : in["pytorch"]) {
    if (!v.is_object()) continue;
    const bool ok = v.value("status", std::string("ok")) == "ok" && v.contains("samples_per_s") &&
                    v["samples_per_s"].is_number();
    if (!ok) {
      if (out.first_failure.empty() && v.contains("status") && v["status"].is_string())
        out.first_failure =
            v.value("variant", std::string("variant")) + ": " + v["status"].get<std::string>();
      continue;
    }
    ++out.ran;
    if (!out.best || v["samples_per_s"].get<double>() > (*out.best)["samples_per_s"].get<double>())
      out.best = &v;
  }
  return out;
}

/// The row's notes on the fastest variant `best` of `ran`, and the ratio of that comparison.
Json variant_notes(const Json& in, const Json& best, size_t ran) {
  Json notes = Json::array();
  notes.push_back("PyTorch variant: " + best.value("variant", std::string("?")) + " (the fastest of " +
                  std::to_string(ran) + " that ran)");
  if (in.contains("ratio") && in["ratio"].is_number()) {
    std::ostringstream os;
    os << "ptune / PyTorch in that comparison: " << in["ratio"].get<double>() << "x";
    notes.push_back(os.str());
  }
  return notes;
}

/// scripts/bench/case_study_vs_pytorch.py's row: PyTorch's fastest variant that ran ("pytorch":
/// a list of variants), or its one number (the older layout: "row", "pytorch_samples_per_s").
Json bench_row(const Json& in, const std::string& where) {
  if (!in.is_object()) throw UsageError(where + ": not an object");
  Json row = Json::object();
  for (const char* k : {"name", "changes", "mode", "status"})
    if (in.contains(k)) row[k] = in[k];
  if (!row.contains("name") && in.contains("row")) row["name"] = in["row"];
  if (!row.contains("name") || !row["name"].is_string()) throw UsageError(where + ": no \"name\"");
  if (in.contains("pytorch_samples_per_s") && !in.contains("pytorch")) {
    add_single_number(in, row);
    return row;
  }
  const Variants v = variants_of(in);
  const std::string status = row.value("status", std::string("ok"));
  Json notes = Json::array();
  if (v.best) {
    row["samples_per_s"] = (*v.best)["samples_per_s"];
    if (v.best->contains("spread_pct")) row["spread_pct"] = (*v.best)["spread_pct"];
    notes = variant_notes(in, *v.best, v.ran);
    row["status"] = "ok";
  } else if (status == "ok") {
    row["status"] =
        "failed: " + (v.first_failure.empty() ? std::string("no PyTorch variant ran") : v.first_failure);
  }
  row["notes"] = notes;
  return row;
}

bool is_bench(const Json& doc) {
  for (const auto& r : doc["rows"])
    if (r.is_object() &&
        ((r.contains("pytorch") && r["pytorch"].is_array()) || r.contains("pytorch_samples_per_s")))
      return true;
  return !doc.contains("environment") && doc.contains("machine") && doc["machine"].is_object();
}

/// Fills absent speedups as compute_speedups does: against the previous and the first row of
/// the same mode and arch with numbers (a file without "arch", from an older ptune or another
/// program, is one arch).
void fill_speedups(Json& rows) {
  std::map<std::pair<std::string, std::string>, double> first, prev;
  for (auto& row : rows) {
    if (!has_numbers(row)) continue;
    const std::pair<std::string, std::string> key{
        row["mode"].get<std::string>(), row["arch"].is_string() ? row["arch"].get<std::string>() : ""};
    const double s = row["samples_per_s"].get<double>();
    if (row["speedup_vs_prev"].is_null())
      row["speedup_vs_prev"] = prev.count(key) && prev[key] > 0 ? s / prev[key] : 1.0;
    if (row["speedup_vs_base"].is_null())
      row["speedup_vs_base"] = first.count(key) && first[key] > 0 ? s / first[key] : 1.0;
    if (!first.count(key)) first[key] = s;
    prev[key] = s;
  }
}

Json environment_of(const Json& doc, bool bench) {
  Json e =
      Json{{"torch", nullptr},       {"device", nullptr},     {"device_kind", nullptr}, {"cuda", nullptr},
           {"cpu_threads", nullptr}, {"world_size", nullptr}, {"cpu", nullptr}};
  if (bench && !(doc.contains("machine") && doc["machine"].is_object()) && doc.contains("environment") &&
      doc["environment"].is_object()) {  // the older layout: ptune's environment, PyTorch's torch version
    Json e2 = environment_of(doc, false);
    if (doc.contains("torch")) e2["torch"] = text_or_null(doc["torch"]);
    return e2;
  }
  if (bench) {
    const Json m = doc.contains("machine") && doc["machine"].is_object() ? doc["machine"] : Json::object();
    e["torch"] = text_or_null(m.value("torch", Json(nullptr)));
    e["device"] = text_or_null(m.value("name", Json(nullptr)));
    e["device_kind"] = text_or_null(m.value("device", Json(nullptr)));
    e["cuda"] = text_or_null(m.value("cuda", Json(nullptr)));
    if (doc.contains("settings") && doc["settings"].is_object())
      e["cpu_threads"] = number_or_null(doc["settings"].value("threads", Json(nullptr)));
    e["world_size"] = 1;
    return e;
  }
  if (!doc.contains("environment") || !doc["environment"].is_object()) return e;
  const Json& in = doc["environment"];
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (!in.contains(it.key())) continue;
    const bool number = it.key() == "cpu_threads" || it.key() == "world_size";
    if (it.key() == "cpu")
      it.value() = in["cpu"].is_object() ? in["cpu"] : Json(nullptr);
    else
      it.value() = number ? number_or_null(in[it.key()]) : text_or_null(in[it.key()]);
  }
  return e;
}

}  // namespace

std::string match_key(const std::string& name) {
  std::string k;
  bool space = false;
  for (unsigned char c : name) {
    if (std::isspace(c)) {
      space = !k.empty();
      continue;
    }
    if (space) k += ' ';
    space = false;
    k += static_cast<char>(std::tolower(c));
  }
  return k;
}

Json normalize(const Json& doc, const std::string& what, std::string* source) {
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array())
    throw UsageError(what +
                     ": not a results file: expected a JSON object with a \"rows\" list (ptune sweep --out "
                     "FILE.json, or scripts/bench/case_study_vs_pytorch.py --json FILE.json)");
  const bool bench = is_bench(doc);
  if (source) *source = bench ? "PyTorch" : "ptune";
  Json rows = Json::array();
  for (size_t i = 0; i < doc["rows"].size(); ++i) {
    const std::string where = what + ": rows[" + std::to_string(i) + "]";
    const Json& in = doc["rows"][i];
    rows.push_back(normalize_row(bench ? bench_row(in, where) : in, where));
  }
  fill_speedups(rows);
  return Json{
      {"ptune_version", text_or_null(doc.value("ptune_version", Json(nullptr)))},
      {"config", doc.contains("config") && doc["config"].is_object() ? doc["config"] : Json::object()},
      {"environment", environment_of(doc, bench)},
      {"rows", rows},
      {"status", doc.contains("status") && doc["status"].is_string() ? doc["status"] : Json("complete")}};
}

namespace {

/// The run of a normalized document.
void read_into(RunFile& run, const nlohmann::ordered_json& doc) {
  const auto version = doc.find("ptune_version");
  run.ptune_version = version != doc.end() && version->is_string() ? version->get<std::string>() : "";
  run.results = results_from_json(doc);
}

}  // namespace

RunFile from_results(const Results& r) {
  RunFile run;
  read_into(run, normalize(to_json(r), "results"));
  run.label = r.config.contains("name") && r.config["name"].is_string() ? r.config["name"].get<std::string>()
                                                                        : std::string("this run");
  return run;
}

RunFile load_run(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UsageError("results '" + path + "' is a folder; name a results file (ptune sweep --out FILE.json)");
  std::ifstream in(path, std::ios::binary);
  // A FIFO waits for its writer; a stop signal then is the user's stop, not a bad file.
  if (!in && errno == EINTR) throw Interrupted();
  if (!in) throw UsageError("cannot read results '" + path + "': " + std::strerror(errno));
  Json doc;
  // Nesting bounded as a config's is: the document's destructor and every reader of it recurse.
  constexpr int kMaxDepth = 64;
  auto bounded = [&](int depth, nlohmann::json::parse_event_t event, Json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxDepth)
      throw UsageError(path + ": nesting deeper than " + std::to_string(kMaxDepth) +
                       " levels; a results file is a few levels deep");
    return true;
  };
  try {
    doc = Json::parse(in, bounded);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    const size_t tag = msg.find("] ");  // "[json.exception.parse_error.101] parse error at line 1, ..."
    throw UsageError(path + ": malformed JSON: " + (tag == std::string::npos ? msg : msg.substr(tag + 2)));
  }
  RunFile run;
  run.path = path;
  read_into(run, normalize(doc, path, &run.source));
  return run;
}

void label_runs(std::vector<RunFile>& runs) {
  auto stem = [](const std::string& path) {
    std::string base =
        path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    const size_t dot = base.find_last_of('.');
    return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
  };
  std::vector<std::string> labels;
  for (const auto& r : runs) labels.push_back(r.path.empty() ? r.label : stem(r.path));
  for (size_t i = 0; i < runs.size(); ++i) {
    bool clash = false;
    for (size_t j = 0; j < runs.size(); ++j) clash |= i != j && labels[i] == labels[j];
    std::string label = clash && !runs[i].path.empty() ? runs[i].path : labels[i];
    if (runs[i].source != "ptune") label += " (" + runs[i].source + ")";
    runs[i].label = label;
  }
  std::map<std::string, int> seen;  // still equal (the same file twice): numbered
  for (auto& r : runs) {
    const int k = ++seen[r.label];
    if (k > 1) r.label += " #" + std::to_string(k);
  }
}

}  // namespace ptune::report
