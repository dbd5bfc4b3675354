#include "bench/peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "runtime/device.hpp"
#include "core/files.hpp"
#include "system/load.hpp"

namespace ptune::bench {
namespace {

at::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return at::kFloat;
}

/// Seconds `reps` products take, the device synchronized before the clock is read.
double time_mm(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int64_t reps,
               const c10::Device& device) {
  runtime::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) at::mm_out(c, a, b);
  runtime::synchronize(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The calibration: the side doubled until one product takes kSizeSeconds (CPU from 512 to
// kMaxCpuSide, GPU from 1024 to kMaxGpuSide), then kSamples samples of about kSampleSeconds.
constexpr double kSizeSeconds = 0.010, kSampleSeconds = 0.020;
constexpr int64_t kMaxCpuSide = 2048, kMaxGpuSide = 8192;
constexpr int kSamples = 7;
// Samples whose slowest is within this ratio of the fastest: nothing else ran in between.
constexpr double kSteadyRatio = 0.8;
// A cached figure that one quick product beats by more than this is measured again.
constexpr double kRecheckRatio = 1.15;

std::string cache_dir() {
  if (const char* c = std::getenv("PTUNE_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/ptune";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/ptune";
  return "";
}

std::string isa(const c10::Device& device) {
  return device.is_cuda() ? std::string("CUDA") : at::get_cpu_capability();
}

/// The cache entry's file name: the key with every character outside [A-Za-z0-9.-] as '_'.
std::string cache_file(const std::string& key) {
  std::string f = key;
  for (char& c : f)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return f + ".json";
}

std::string describe(const Calibration& c, const std::string& precision, const c10::Device& device,
                     const std::string& where) {
  std::string s = "calibrated achievable peak (not a datasheet figure): " + std::to_string(c.n) + "x" +
                  std::to_string(c.n) + " " + precision + " matmul on " + runtime::device_name(device);
  if (!device.is_cuda()) s += ", " + std::to_string(c.threads) + " threads, " + isa(device);
  return s + ", LibTorch " + TORCH_VERSION + where;
}

}  // namespace

std::string row_precision(config::Amp amp, const c10::Device& device, const std::string& arch) {
  if (amp != config::Amp::kOff) return config::name(amp);
  if (!device.is_cuda()) return "fp32";
  const auto& ctx = at::globalContext();
  const bool conv = arch.empty() || arch.rfind("vit", 0) != 0;
  return ctx.allowTF32CuBLAS() || (conv && ctx.allowTF32CuDNN()) ? "tf32" : "fp32";
}

/// FLOP/s of one quick sample (about kSampleSeconds) of an n x n product in `precision`.
static double quick_rate(const c10::Device& device, const std::string& precision, int64_t n) {
  torch::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().device(device).dtype(dtype_of(precision));
  at::Tensor a = at::rand({n, n}, opts), b = at::rand({n, n}, opts), c = at::empty({n, n}, opts);
  const double one = time_mm(a, b, c, 1, device);  // warm-up, and the size of a sample
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(kSampleSeconds / std::max(one, 1e-9)));
  return 2.0 * std::pow(static_cast<double>(n), 3) * static_cast<double>(reps) /
         time_mm(a, b, c, reps, device);
}

Calibration calibrate(const c10::Device& device, const std::string& precision) {
  if (!device.is_cuda() && (precision == "fp16" || precision == "tf32"))
    throw std::runtime_error("no " + precision + " calibration on a CPU");
  torch::NoGradGuard no_grad;
  auto& ctx = at::globalContext();
  const bool tf32_before = ctx.allowTF32CuBLAS();
  if (device.is_cuda()) ctx.setAllowTF32CuBLAS(precision == "tf32");
  const auto opts = at::TensorOptions().device(device).dtype(dtype_of(precision));
  const int64_t max_n = device.is_cuda() ? kMaxGpuSide : kMaxCpuSide;
  Calibration cal;
  cal.threads = at::get_num_threads();
  at::Tensor a, b, c;
  double one = 0;
  for (int64_t n = device.is_cuda() ? 1024 : 512; n <= max_n; n *= 2) {
    a = at::rand({n, n}, opts), b = at::rand({n, n}, opts), c = at::empty({n, n}, opts);
    time_mm(a, b, c, 1, device);  // warm-up: packing buffers, kernel selection
    one = std::min({time_mm(a, b, c, 1, device), time_mm(a, b, c, 1, device), time_mm(a, b, c, 1, device)});
    cal.n = n;
    if (one >= kSizeSeconds) break;
  }
  cal.reps = std::max<int64_t>(1, static_cast<int64_t>(kSampleSeconds / std::max(one, 1e-9)));
  std::vector<double> rates;
  for (int i = 0; i < kSamples; ++i)
    rates.push_back(2.0 * std::pow(static_cast<double>(cal.n), 3) * static_cast<double>(cal.reps) /
                    time_mm(a, b, c, cal.reps, device));
  if (device.is_cuda()) ctx.setAllowTF32CuBLAS(tf32_before);
  const auto [lo, hi] = std::minmax_element(rates.begin(), rates.end());
  cal.flops_per_s = *hi;
  cal.steady = *lo >= kSteadyRatio * *hi;
  return cal;
}

namespace {

/// The cache file for `key` in `dir` (cache_dir()); empty where there is no cache.
std::string cache_path(const std::string& dir, const std::string& key) {
  return dir.empty() ? "" : dir + "/peak/" + cache_file(key);
}

/// The cache entry at `path` when it is `key`'s; none where there is no path or no file, or the
/// entry is another key's. Throws where the file cannot be read as one.
std::optional<nlohmann::json> cache_entry(const std::string& path, const std::string& key) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in);
  if (j.at("key") != key) return std::nullopt;
  return j;
}

/// Writes `entry` to the cache file `path` (in `dir`, cache_dir()); false where it cannot.
bool write_cache_entry(const std::string& dir, const std::string& path, const nlohmann::json& entry) {
  try {
    std::filesystem::create_directories(dir + "/peak");
    files::write_atomically(path, "the peak cache", entry.dump(2) + "\n");
    return true;
  } catch (const std::exception&) {
    return false;  // no cache: measured again next time
  }
}

/// The load `load` saw over a calibration. A calibration shorter than /proc's counters resolve
/// would take unseen load for quiet: on a CPU, `again` times more (at most `most` times) until the
/// span tells.
system::LoadReport load_over(system::LoadSampler& load, const c10::Device& device, int most,
                             const std::function<void()>& again) {
  system::LoadReport report = load.stop();
  for (int i = 0; !device.is_cuda() && !report.sampled && report.min_seconds > report.seconds && i < most;
       ++i) {
    again();
    report = load.stop();
  }
  return report;
}

/// What a figure measured under competing load says of itself.
std::string under_load_text(const system::LoadReport& report) {
  return ", measured under competing load (" + report.summary() + "; not cached)";
}

/// The peak cache's key: the device, its instruction set, the threads on a CPU, LibTorch and the
/// precision.
std::string peak_key(const std::string& name, const c10::Device& device, int64_t threads,
                     const std::string& precision) {
  return name + "|" + isa(device) + "|" + (device.is_cuda() ? "" : std::to_string(threads) + "threads|") +
         "torch" + TORCH_VERSION + "|" + precision;
}

/// The peak cached at `path` for `key`, where one quick product confirms it. A figure cached while
/// something else slowed the calibration unseen would stay low for good: one quick product checks
/// it, and a clearly faster one measures again (`cached` then holds the cached figure). None where
/// there is none or it cannot be read (it is measured again and replaced).
std::optional<system::Peak> cached_peak(const c10::Device& device, const std::string& precision,
                                        const std::string& key, const std::string& path, int64_t threads,
                                        double& cached) {
  try {
    if (const std::optional<nlohmann::json> j = cache_entry(path, key)) {
      Calibration c{j->at("flops_per_s").get<double>(), j->at("n").get<int64_t>(), 0, threads, true};
      if (quick_rate(device, precision, c.n) <= kRecheckRatio * c.flops_per_s)
        return system::Peak{c.flops_per_s, precision, describe(c, precision, device, ", cached in " + path)};
      cached = c.flops_per_s;
    }
  } catch (const std::exception&) {
    // an unreadable entry is measured again and replaced
  }
  return std::nullopt;
}

/// Whether calibration `c` is the machine's own figure (cached, and a ceiling): steady samples
/// without other processes on the cores, or a figure above the cached one `cached` (never load's
/// doing).
bool quiet_calibration(const Calibration& c, const c10::Device& device, const system::LoadReport& report,
                       double cached) {
  return (c.steady && (device.is_cuda() || !report.under_load)) || (cached > 0 && c.flops_per_s > cached);
}

/// Why a calibration that is not quiet is not cached.
std::string not_cached_text(const system::LoadReport& report) {
  return report.under_load ? under_load_text(report)
                           : ", its samples unsteady (the slowest below 80% of the fastest: something "
                             "else ran; not cached)";
}

}  // namespace

system::Peak machine_peak(const c10::Device& device, const std::string& precision) {
  const std::string name = runtime::device_name(device);
  if (device.is_cuda())
    if (auto p = system::known_gpu_peak(name, precision)) return *p;
  const int64_t threads = at::get_num_threads();
  const std::string key = peak_key(name, device, threads, precision);
  const std::string dir = cache_dir();
  const std::string path = cache_path(dir, key);
  double cached = 0;
  if (auto p = cached_peak(device, precision, key, path, threads, cached)) return *p;
  // One figure per key for the process: every row of a table reads against the same peak.
  static std::mutex mu;
  static std::map<std::string, system::Peak> measured;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(path + "|" + key); it != measured.end()) return it->second;
  Calibration c;
  system::LoadSampler load;
  try {
    load.start();
    c = calibrate(device, precision);
  } catch (const std::exception& e) {
    return system::Peak{0, precision, std::string("no peak: ") + e.what()};
  }
  // More products (the fastest kept) until the span tells load (0.4 s on 2 cores).
  const system::LoadReport report = load_over(load, device, 1000, [&] {
    c.flops_per_s = std::max(c.flops_per_s, quick_rate(device, precision, c.n));
  });
  // Other processes on the cores (or samples that disagree) make a low figure: used, not cached,
  // and no ceiling.
  const bool quiet = quiet_calibration(c, device, report, cached);
  std::string where = quiet ? "" : not_cached_text(report);
  if (!path.empty() && quiet &&
      write_cache_entry(dir, path, {{"key", key}, {"flops_per_s", c.flops_per_s}, {"n", c.n}}))
    where = ", cached in " + path;
  return measured[path + "|" + key] =
             system::Peak{c.flops_per_s, precision, describe(c, precision, device, where), !quiet};
}

}  // namespace ptune::bench

namespace ptune::bench {
namespace {

/// Bytes per second of the fastest of kSamples copies of a 64 MiB float tensor (read + write).
double copy_rate(const c10::Device& device) {
  torch::NoGradGuard no_grad;
  const int64_t n = int64_t{16} << 20;  // floats: 64 MiB
  const auto opts = at::TensorOptions().device(device).dtype(at::kFloat);
  at::Tensor src = at::rand({n}, opts), dst = at::empty({n}, opts);
  dst.copy_(src);  // warm-up: pages touched
  double best = 0;
  for (int i = 0; i < kSamples; ++i) {
    runtime::synchronize(device);
    const auto t0 = std::chrono::steady_clock::now();
    dst.copy_(src);
    runtime::synchronize(device);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * 4.0 * static_cast<double>(n) / std::max(s, 1e-9));
  }
  return best;
}

/// What a calibrated bandwidth of device `name` is.
std::string bandwidth_text(const std::string& name, const c10::Device& device) {
  std::string what = "calibrated achievable bandwidth (not a datasheet figure): 64 MiB float copy on " + name;
  if (!device.is_cuda()) what += ", " + std::to_string(at::get_num_threads()) + " threads";
  return what + std::string(", LibTorch ") + TORCH_VERSION;
}

}  // namespace

system::Bandwidth machine_bandwidth(const c10::Device& device) {
  const std::string name = runtime::device_name(device);
  if (device.is_cuda())
    if (auto b = system::known_gpu_bandwidth(name)) return *b;
  const std::string key = peak_key(name, device, at::get_num_threads(), "bandwidth");
  const std::string dir = cache_dir();
  const std::string path = cache_path(dir, key);
  const std::string what = bandwidth_text(name, device);
  try {
    if (const std::optional<nlohmann::json> j = cache_entry(path, key))
      return system::Bandwidth{j->at("bytes_per_s").get<double>(), what + ", cached in " + path};
  } catch (const std::exception&) {
    // an unreadable entry is measured again and replaced
  }
  static std::mutex mu;
  static std::map<std::string, system::Bandwidth> measured;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(path + "|" + key); it != measured.end()) return it->second;
  double rate = 0;
  system::LoadSampler load;
  try {
    load.start();
    rate = copy_rate(device);
  } catch (const std::exception& e) {
    return system::Bandwidth{0, std::string("no bandwidth: ") + e.what()};
  }
  // Until the span tells load, as machine_peak does.
  const system::LoadReport report =
      load_over(load, device, 100, [&] { rate = std::max(rate, copy_rate(device)); });
  const bool quiet = device.is_cuda() || !report.under_load;
  std::string where = quiet ? "" : under_load_text(report);
  if (!path.empty() && quiet && write_cache_entry(dir, path, {{"key", key}, {"bytes_per_s", rate}}))
    where = ", cached in " + path;
  return measured[path + "|" + key] = system::Bandwidth{rate, what + where};
}

}  // namespace ptune::bench
