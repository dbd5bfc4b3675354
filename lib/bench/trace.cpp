#include "bench/trace.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <nlohmann/json.hpp>

#include "runtime/compat.hpp"
#include "runtime/cuda_support.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"

namespace ptune::bench {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

/// Kineto, in a CUDA build of LibTorch on a machine without a GPU, prints an "ERROR ...
/// gpuGetDeviceCount failed" line that is harmless there; this hides stderr for such a call.
class QuietStderr {
 public:
  explicit QuietStderr(bool active) {
    if (!active) return;
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    int null = ::open("/dev/null", O_WRONLY);
    if (saved_ >= 0 && null >= 0) ::dup2(null, STDERR_FILENO);
    if (null >= 0) ::close(null);
  }
  ~QuietStderr() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }

 private:
  int saved_ = -1;
};

std::set<ActivityType> activities(bool cuda) {
  std::set<ActivityType> a{ActivityType::CPU};
  if (cuda) a.insert(ActivityType::CUDA);
  return a;
}

/// One key of a JSON object and its value, both as the text they are in the document.
struct Member {
  std::string key;    // the key as written, quotes included
  std::string value;  // the value's text
};

size_t skip_space(const std::string& t, size_t i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) ++i;
  return i;
}

/// The end of the string that starts at t[i] ('"'), or npos.
size_t skip_string(const std::string& t, size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\')
      ++i;
    else if (t[i] == '"')
      return i + 1;
  }
  return std::string::npos;
}

/// The end of the JSON value that starts at t[i], without parsing it (brackets are counted,
/// strings skipped), or npos.
size_t skip_value(const std::string& t, size_t i) {
  if (i >= t.size()) return std::string::npos;
  if (t[i] == '"') return skip_string(t, i);
  if (t[i] != '{' && t[i] != '[') {
    while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\n') ++i;
    return i;
  }
  int depth = 0;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '"') {
      i = skip_string(t, i);
      if (i == std::string::npos) return i;
      --i;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

/// The members of the top-level object of `t`; nullopt when it is not a well-formed object.
std::optional<std::vector<Member>> top_level_members(const std::string& t) {
  std::vector<Member> members;
  size_t i = skip_space(t, 0);
  if (i >= t.size() || t[i] != '{') return std::nullopt;
  i = skip_space(t, i + 1);
  if (i < t.size() && t[i] == '}') return members;
  while (i < t.size()) {
    if (t[i] != '"') return std::nullopt;
    const size_t key_end = skip_string(t, i);
    if (key_end == std::string::npos) return std::nullopt;
    Member m;
    m.key = t.substr(i, key_end - i);
    i = skip_space(t, key_end);
    if (i >= t.size() || t[i] != ':') return std::nullopt;
    i = skip_space(t, i + 1);
    const size_t value_end = skip_value(t, i);
    if (value_end == std::string::npos || value_end == i) return std::nullopt;
    m.value = t.substr(i, value_end - i);
    members.push_back(std::move(m));
    i = skip_space(t, value_end);
    if (i < t.size() && t[i] == ',') {
      i = skip_space(t, i + 1);
      continue;
    }
    if (i < t.size() && t[i] == '}') return members;
    return std::nullopt;
  }
  return std::nullopt;
}

prof::ProfilerConfig profiler_config() {
  return prof::ProfilerConfig(torch::profiler::impl::ProfilerState::KINETO, /*report_input_shapes=*/false,
                              /*profile_memory=*/false);
}

}  // namespace

void prepare_profiler_for_cuda_graphs() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      if (prof::profilerEnabled()) return;  // already running: CUPTI is up
      prof::prepareProfiler(profiler_config(), activities(true));
      prof::enableProfiler(profiler_config(), activities(true));
      prof::disableProfiler();  // Kineto's config thread: stopped by the recording that follows
    } catch (...) {
    }
  });
}

double busy_fraction(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t begin, int64_t end) {
  if (end <= begin) return 0.0;
  std::sort(intervals.begin(), intervals.end());
  int64_t covered = 0, cur_s = 0, cur_e = 0;
  bool open = false;
  for (auto [s, e] : intervals) {
    s = std::max(s, begin);
    e = std::min(e, end);
    if (e <= s) continue;
    if (open && s <= cur_e) {
      cur_e = std::max(cur_e, e);
    } else {
      if (open) covered += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
      open = true;
    }
  }
  if (open) covered += cur_e - cur_s;
  return static_cast<double>(covered) / static_cast<double>(end - begin);
}

TraceRecorder::TraceRecorder(bool cuda) : cuda_(cuda) {
  if (prof::profilerEnabled()) throw std::runtime_error("a profiler recording is already running");
  ::setenv("KINETO_LOG_LEVEL", "3", /*overwrite=*/0);  // keep Kineto's progress chatter off stderr
  QuietStderr quiet(!runtime::cuda::available());
  prof::prepareProfiler(profiler_config(), activities(cuda_));
  prof::enableProfiler(profiler_config(), activities(cuda_));
  running_ = true;
}

void TraceRecorder::add_metadata_json(const std::string& key, const std::string& json) {
  if (running_) runtime::compat::add_trace_metadata_json(key, json);
}

TraceRecorder::~TraceRecorder() {
  if (running_) {
    runtime::compat::stop_profiler_config_thread();
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }
}

namespace {

/// Why the trace Kineto wrote into `scratch` is missing or cut short: Kineto reports no error,
/// so the reason is read off the file system (full, or a file-size limit reached), else said.
std::string incomplete_reason(const std::string& scratch, uint64_t size) {
  if (const auto free = files::free_bytes(scratch); free && *free == 0) return std::strerror(ENOSPC);
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && size >= limit.rlim_cur)
    return std::strerror(EFBIG);
  return "the profiler wrote " +
         std::string(size == 0 ? "no trace" : "an incomplete trace (" + files::human_bytes(size) + ")");
}

/// Writes the recording's Chrome trace to `path`: Kineto writes it into a scratch file beside
/// `path` (removed afterwards, whatever happens), which is checked (not empty, a whole JSON
/// object with "traceEvents"), finalized (finalize_trace_text) and written to `path` by
/// files::write_atomically. Throws WriteError "cannot write measure.out_dir '<path>': <reason>".
void write_trace(prof::ProfilerResult& result, const std::string& path, bool cuda) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty()) std::filesystem::create_directories(folder, ec);
  if (ec) throw WriteError("cannot write measure.out_dir '" + path + "': " + ec.message());
  std::string text;
  {
    files::Scratch scratch(path, "measure.out_dir");
    {
      // Kineto's own complaints about a failed write are replaced by ptune's one line.
      QuietStderr quiet(true);
      result.save(scratch.path());
    }
    auto read = [](const std::string& file) {
      std::ifstream in(file, std::ios::binary);
      std::ostringstream buf;
      buf << in.rdbuf();
      return buf.str();
    };
    text = read(scratch.path());
    // A write that failed leaves Kineto's trace under the name it writes first: what it holds
    // tells why (a file-size limit).
    if (text.empty()) text = read(scratch.path() + ".tmp");
    const bool cut = files::injected_failure();  // the test hook: as a disk that filled up
    if (cut) text.resize(text.size() / 2);
    const auto members = top_level_members(text);
    const bool whole = members && std::any_of(members->begin(), members->end(),
                                              [](const Member& m) { return m.key == "\"traceEvents\""; });
    if (!whole)
      throw WriteError(
          "cannot write measure.out_dir '" + path + "': " +
          (cut ? std::string(std::strerror(ENOSPC)) : incomplete_reason(scratch.path(), text.size())));
  }
  // Kineto named the file it wrote (the scratch file) and, without a GPU, kept the CUDA
  // build's complaints about it: the trace says where it is and what it holds instead.
  files::write_atomically(path, "measure.out_dir", finalize_trace_text(text, path, /*drop_errors=*/!cuda));
}

}  // namespace

TraceSummary TraceRecorder::finish(const std::string& path) {
  // Kineto's config thread, started when the profiler was first prepared: by now (after the
  // recorded steps) it sleeps between its polls, and is woken and joined at once.
  runtime::compat::stop_profiler_config_thread();
  QuietStderr quiet(!runtime::cuda::available());
  auto result = prof::disableProfiler();
  running_ = false;
  TraceSummary s;
  std::vector<std::pair<int64_t, int64_t>> kernels;
  int64_t first = INT64_MAX, last = 0;
  constexpr auto kKernel = static_cast<uint8_t>(libkineto::ActivityType::CONCURRENT_KERNEL);
  for (const auto& e : result->events()) {
    if (e.deviceType() == c10::DeviceType::CUDA) {
      // Kernels only, as the TensorBoard plugin's GPU utilization: copies, memsets and the
      // GPU-side spans of annotations are not the SMs computing.
      if (e.activityType() != kKernel) continue;
      int64_t b = static_cast<int64_t>(e.startNs() / 1000), d = static_cast<int64_t>(e.durationNs() / 1000);
      kernels.emplace_back(b, b + d);
    } else {
      first = std::min<int64_t>(first, static_cast<int64_t>(e.startNs() / 1000));
      last = std::max<int64_t>(last, static_cast<int64_t>((e.startNs() + e.durationNs()) / 1000));
      ++s.cpu_ops;
    }
  }
  if (cuda_) {
    // The window: from the first recorded host op to the last kernel's end; no kernel at all
    // (a data row copying float batches) is an idle GPU.
    int64_t end = last;
    for (auto& k : kernels) end = std::max(end, k.second);
    const double busy = kernels.empty() || first >= end ? 0.0 : busy_fraction(kernels, first, end);
    s.gpu_busy_pct = 100.0 * busy;
    s.kernel_ms = busy * static_cast<double>(end - first) / 1000.0;
  }
  if (!path.empty()) write_trace(*result, path, cuda_);
  return s;
}

std::string slug(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "row" : out;
}

std::string trace_file_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0)
    std::snprintf(host, sizeof host, "localhost");
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return std::string(host) + "_" + std::to_string(::getpid()) + "." + std::to_string(ns) + ".pt.trace.json";
}

bool is_trace_file_name(const std::string& name) {
  auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends(".pt.trace.json") || ends(".pt.trace.json.gz");
}

std::string distributed_info_json(const std::string& backend, int rank, int world_size) {
  // Spaced as Python's json.dumps writes it: HTA finds the rank with the pattern "rank":\s+N.
  return "{\"backend\": " + nlohmann::json(backend).dump() + ", \"rank\": " + std::to_string(rank) +
         ", \"world_size\": " + std::to_string(world_size) + "}";
}

std::string finalize_trace_text(const std::string& text, const std::string& trace_name, bool drop_errors) {
  auto members = top_level_members(text);
  if (!members) return text;
  std::string out = "{\n";
  bool named = false, first = true;
  auto add = [&](const std::string& key, const std::string& value) {
    if (!first) out += ",\n";
    first = false;
    out += "  " + key + ": " + value;
  };
  for (const Member& m : *members) {
    if (drop_errors && m.key == "\"ERROR\"") continue;
    if (m.key == "\"traceName\"") {
      add(m.key, nlohmann::json(trace_name).dump());
      named = true;
    } else {
      add(m.key, m.value);
    }
  }
  if (!named) add("\"traceName\"", nlohmann::json(trace_name).dump());
  out += "\n}\n";
  return out;
}

}  // namespace ptune::bench
