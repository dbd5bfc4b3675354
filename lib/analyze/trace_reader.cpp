#include "analyze/trace_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "errors.hpp"

namespace ptune::analyze {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("'" + path + "': " + what);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// The most trace text read (a file, or gzip data once inflated): the parsed document takes
/// several times this in memory, and a profiler trace of a few steps is tens of megabytes.
constexpr uint64_t kMaxTraceBytes = uint64_t{1} << 30;

[[noreturn]] void too_large(const std::string& path, const char* how) {
  fail(path, std::string("more than 1 GiB of trace text") + how +
                 "; record fewer steps (torch.profiler's schedule(active=N), measure.profile_steps)");
}

/// The file's bytes; gzip data (by its magic bytes) inflated. At most kMaxTraceBytes.
std::string read_bytes(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a folder, not a trace file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot read: ") + std::strerror(errno ? errno : EIO));
  const auto size = fs::file_size(path, ec);
  if (!ec && size > kMaxTraceBytes) too_large(path, "");
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  if (raw.empty()) fail(path, "empty file, not a trace");
  const bool gz = raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f &&
                  static_cast<unsigned char>(raw[1]) == 0x8b;
  if (!gz) {
    if (ends_with(path, ".gz")) fail(path, "not gzip data, though its name ends in .gz");
    return raw;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail(path, "cannot start gzip decompression");
  zs.next_in = reinterpret_cast<Bytef*>(raw.data());
  size_t fed = 0;  // input handed to zlib so far (its counters are 32-bit: fed in pieces)
  std::string out;
  char buf[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && fed < raw.size()) {
      zs.avail_in = static_cast<uInt>(std::min<size_t>(raw.size() - fed, 1u << 30));
      fed += zs.avail_in;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
    if (out.size() > kMaxTraceBytes) {
      inflateEnd(&zs);
      too_large(path, " once decompressed");
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == raw.size()) break;  // input ended inside the stream
    if (rc == Z_BUF_ERROR) rc = Z_OK;  // more input to feed
  }
  const std::string msg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (rc == Z_BUF_ERROR) fail(path, "truncated gzip data (the compressed stream ends early)");
  if (rc != Z_STREAM_END) fail(path, "damaged gzip data" + (msg.empty() ? std::string() : " (" + msg + ")"));
  return out;
}

Kind kind_of(const std::string& cat, bool* keep) {
  *keep = true;
  if (cat == "cpu_op" || cat == "operator" || cat == "Operator") return Kind::kCpuOp;
  if (cat == "user_annotation" || cat == "python_function" || cat == "python_function_call") return Kind::kAnnotation;
  if (cat == "kernel" || cat == "Kernel") return Kind::kKernel;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return Kind::kMemcpy;
  if (cat == "gpu_memset" || cat == "Memset") return Kind::kMemset;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime") return Kind::kRuntime;
  *keep = false;  // gpu_user_annotation (device-side copies of host ranges), Trace, overhead, ...
  return Kind::kOther;
}

/// `obj[key]` when it is a string, else "" (a hostile trace may put any type anywhere).
std::string str(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// An id or count: integers in int64's range as they are, other numbers truncated when they
/// fit in int64 (`fallback` when not), strings hashed.
int64_t as_int(const nlohmann::json& v, int64_t fallback) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(u) : fallback;
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // [-2^63, 2^63): the doubles whose truncation an int64 holds.
    return d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? static_cast<int64_t>(d) : fallback;
  }
  if (v.is_string()) return static_cast<int64_t>(std::hash<std::string>{}(v.get<std::string>()) & 0x7fffffff);
  return fallback;
}

/// Deepest nesting a trace may have (objects and lists): Kineto's are five or six levels deep
/// (traceEvents, an event, its args, "Input Dims" lists of lists).
constexpr int kMaxDepth = 64;

/// The JSON of `text`, read from `path`. Throws DataError: not JSON, truncated, nesting deeper
/// than kMaxDepth (before the depth costs anything), a number that overflows a double.
nlohmann::json parse(const std::string& text, const std::string& path) {
  using ParseEvent = nlohmann::json::parse_event_t;
  auto callback = [&](int depth, ParseEvent event, nlohmann::json&) {
    if ((event == ParseEvent::object_start || event == ParseEvent::array_start) && depth >= kMaxDepth)
      fail(path, "nesting deeper than " + std::to_string(kMaxDepth) + " levels; a profiler trace is a few levels deep");
    return true;
  };
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    if (e.byte >= text.size()) {
      fail(path, "truncated: the JSON ends at byte " + std::to_string(text.size()) + " before it is complete");
    }
    std::string what = e.what();
    const auto at = what.find("parse error");
    fail(path, "not JSON (" + (at == std::string::npos ? what : what.substr(at)) + ")");
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number that overflows a double, e.g. 1e309 (the message quotes it).
    std::string what = e.what();
    const size_t q = what.find('\'');
    fail(path, (q == std::string::npos ? std::string("a number") : what.substr(q)) +
                   " overflows a double (largest about 1.8e308)");
  }
}

/// Times beyond this many microseconds from 0 (about 31,700 years) are not a profiler's: an
/// event that starts or ends beyond is skipped, so that every sum of times stays finite.
constexpr double kMaxTimeUs = 1e18;

}  // namespace

std::string writer_of(bool has_ptune_key, const std::string& process_name) {
  if (has_ptune_key) return "ptune";
  if (process_name == "ptune" || process_name.rfind("ptune_", 0) == 0) return "ptune";
  return "pytorch";
}

Trace read_trace(const std::string& path) {
  const std::string text = read_bytes(path);
  const nlohmann::json doc = parse(text, path);
  const nlohmann::json* list = nullptr;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it != doc.end() && it->is_array()) list = &*it;
  } else if (doc.is_array()) {
    list = &doc;  // Chrome's array form
  }
  if (list == nullptr) {
    fail(path, "not a profiler trace: no \"traceEvents\" list (torch.profiler's export_chrome_trace and "
               "tensorboard_trace_handler write one)");
  }
  Trace t;
  t.path = path;
  std::string process_name;
  for (const auto& e : *list) {
    if (!e.is_object()) continue;
    const auto ph = str(e, "ph");
    if (ph == "M") {
      if (str(e, "name") == "process_name" && e.contains("args") && process_name.empty())
        process_name = str(e["args"], "name");
      continue;
    }
    if (ph != "X") continue;
    const auto ts = e.find("ts"), dur = e.find("dur");
    if (ts == e.end() || dur == e.end() || !ts->is_number() || !dur->is_number()) continue;
    bool keep = false;
    Event ev;
    ev.kind = kind_of(str(e, "cat"), &keep);
    if (!keep) continue;
    ev.name = str(e, "name");
    ev.ts = ts->get<double>();
    ev.dur = std::max(0.0, dur->get<double>());
    if (std::fabs(ev.ts) > kMaxTimeUs || std::fabs(ev.end()) > kMaxTimeUs) continue;
    ev.pid = e.contains("pid") ? as_int(e["pid"], 0) : 0;
    ev.tid = e.contains("tid") ? as_int(e["tid"], 0) : 0;
    if (e.contains("args") && e["args"].is_object()) {
      const auto& a = e["args"];
      if (a.contains("correlation")) ev.correlation = as_int(a["correlation"], -1);
      if (a.contains("bytes")) ev.bytes = as_int(a["bytes"], -1);
    }
    if (ev.kind == Kind::kKernel || ev.kind == Kind::kMemcpy || ev.kind == Kind::kMemset ||
        ev.kind == Kind::kRuntime)
      t.has_gpu = true;
    t.events.push_back(std::move(ev));
  }
  if (t.events.empty()) {
    fail(path, "no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in its traceEvents: nothing to analyze");
  }
  bool ptune_key = false;
  if (doc.is_object()) {
    ptune_key = doc.contains("ptune");
    if (auto it = doc.find("ptune"); it != doc.end() && it->is_object()) {
      if (auto amp = it->find("amp"); amp != it->end() && amp->is_string()) t.amp = amp->get<std::string>();
    }
    if (auto it = doc.find("distributedInfo"); it != doc.end() && it->is_object()) {
      if (it->contains("rank")) t.rank = as_int((*it)["rank"], 0);
      if (it->contains("world_size")) t.world_size = as_int((*it)["world_size"], 1);
    }
    if (auto it = doc.find("deviceProperties"); it != doc.end() && it->is_array()) {
      for (const auto& d : *it)
        if (d.is_object() && d.contains("name") && d["name"].is_string()) t.devices.push_back(d["name"]);
    }
  }
  t.writer = writer_of(ptune_key, process_name);
  return t;
}

std::vector<Trace> read_traces(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file or folder");
  if (!fs::is_directory(path, ec)) return {read_trace(path)};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec)) continue;
    if (ends_with(name, ".json") || ends_with(name, ".json.gz")) files.push_back(entry.path().string());
  }
  if (ec) fail(path, "cannot list the folder: " + ec.message());
  if (files.empty()) fail(path, "no trace files (*.json, *.json.gz) in this folder");
  std::sort(files.begin(), files.end());
  std::vector<Trace> traces;
  for (const auto& f : files) traces.push_back(read_trace(f));
  return traces;
}

}  // namespace ptune::analyze
