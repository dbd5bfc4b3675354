#include "measure/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "engine/cuda_support.hpp"
#include "files.hpp"

namespace ptune::measure {
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
      prof::disableProfiler();
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
  QuietStderr quiet(!engine::cuda::available());
  prof::prepareProfiler(profiler_config(), activities(cuda_));
  prof::enableProfiler(profiler_config(), activities(cuda_));
  running_ = true;
}

TraceRecorder::~TraceRecorder() {
  if (running_) {
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }
}

TraceSummary TraceRecorder::finish(const std::string& path) {
  QuietStderr quiet(!engine::cuda::available());
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
  if (!path.empty()) {
    files::prepare_folder(std::filesystem::path(path).parent_path().string(), "measure.out_dir");
    files::write_atomically(path, "measure.out_dir", [&](const std::string& tmp) { result->save(tmp); });
  }
  return s;
}

std::string slug(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "row" : out;
}

}  // namespace ptune::measure
