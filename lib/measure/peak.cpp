#include "measure/peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "engine/device.hpp"
#include "files.hpp"
#include "measure/load.hpp"

namespace ptune::measure {
namespace {

/// A GPU's dense peaks in TFLOP/s (0: the device has no such tensor-core path).
struct GpuSpec {
  const char* label;
  double fp32, tf32, bf16, fp16;
  const char* source;
};

// Dense figures: the datasheets print tensor-core figures "with sparsity"; these are half of those.
const GpuSpec kH100Sxm{"NVIDIA H100 SXM", 66.9, 494.7, 989.4, 989.4, "NVIDIA H100 Tensor Core GPU datasheet"};
const GpuSpec kH100Pcie{"NVIDIA H100 PCIe", 51.2, 378.0, 756.0, 756.0, "NVIDIA H100 Tensor Core GPU datasheet"};
const GpuSpec kH200{"NVIDIA H200 SXM", 66.9, 494.7, 989.4, 989.4, "NVIDIA H200 Tensor Core GPU datasheet"};
const GpuSpec kA100{"NVIDIA A100", 19.5, 156.0, 312.0, 312.0, "NVIDIA A100 Tensor Core GPU datasheet"};
const GpuSpec kL40s{"NVIDIA L40S", 91.6, 183.0, 362.05, 362.05, "NVIDIA L40S datasheet"};
const GpuSpec kL4{"NVIDIA L4", 30.3, 60.0, 121.0, 121.0, "NVIDIA L4 Tensor Core GPU datasheet"};
// Volta has no TF32 or BF16 tensor cores.
const GpuSpec kV100Sxm{"NVIDIA V100 SXM2", 15.7, 0, 0, 125.0, "NVIDIA V100 Tensor Core GPU datasheet"};
const GpuSpec kV100Pcie{"NVIDIA V100 PCIe", 14.0, 0, 0, 112.0, "NVIDIA V100 Tensor Core GPU datasheet"};
const GpuSpec kA10{"NVIDIA A10", 31.2, 62.5, 125.0, 125.0, "NVIDIA A10 Tensor Core GPU datasheet"};
// GeForce: fp16/bf16 with fp32 accumulation (what PyTorch's matmuls use), dense.
const GpuSpec kRtx4090{"NVIDIA GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2, "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A"};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

const GpuSpec* gpu_spec(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (has(name, "nvl")) return nullptr;  // H100 NVL, H200 NVL: other clocks and power
  if (has(name, "h100")) return has(name, "pcie") ? &kH100Pcie : &kH100Sxm;
  if (has(name, "h200")) return &kH200;
  if (has(name, "a100")) return &kA100;
  if (has(name, "l40s")) return &kL40s;
  if (name == "nvidia l4") return &kL4;
  if (name == "nvidia a10") return &kA10;
  if (has(name, "v100s")) return nullptr;
  if (has(name, "v100")) return has(name, "pcie") ? &kV100Pcie : &kV100Sxm;
  if (has(name, "rtx 4090")) return &kRtx4090;
  return nullptr;
}

at::ScalarType dtype_of(const std::string& precision) {
  if (precision == "bf16") return at::kBFloat16;
  if (precision == "fp16") return at::kHalf;
  return at::kFloat;
}

/// Seconds `reps` products take, the device synchronized before the clock is read.
double time_mm(const at::Tensor& a, const at::Tensor& b, at::Tensor& c, int64_t reps, const c10::Device& device) {
  engine::synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; ++i) at::mm_out(c, a, b);
  engine::synchronize(device);
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
                  std::to_string(c.n) + " " + precision + " matmul on " + engine::device_name(device);
  if (!device.is_cuda()) s += ", " + std::to_string(c.threads) + " threads, " + isa(device);
  return s + ", LibTorch " + TORCH_VERSION + where;
}

}  // namespace

std::string row_precision(const std::string& amp, const c10::Device& device, const std::string& arch) {
  if (amp == "bf16" || amp == "fp16") return amp;
  if (!device.is_cuda()) return "fp32";
  const auto& ctx = at::globalContext();
  const bool conv = arch.empty() || arch.rfind("vit", 0) != 0;
  return ctx.allowTF32CuBLAS() || (conv && ctx.allowTF32CuDNN()) ? "tf32" : "fp32";
}

std::optional<Peak> known_gpu_peak(const std::string& name, const std::string& precision) {
  const GpuSpec* g = gpu_spec(name);
  if (!g) return std::nullopt;
  const double tflops = precision == "fp32"   ? g->fp32
                        : precision == "tf32" ? g->tf32
                        : precision == "bf16" ? g->bf16
                        : precision == "fp16" ? g->fp16
                                              : 0;
  if (tflops <= 0) return std::nullopt;
  return Peak{tflops * 1e12, precision, std::string(g->source) + ": " + g->label + ", dense " + precision};
}

/// FLOP/s of one quick sample (about kSampleSeconds) of an n x n product in `precision`.
static double quick_rate(const c10::Device& device, const std::string& precision, int64_t n) {
  torch::NoGradGuard no_grad;
  const auto opts = at::TensorOptions().device(device).dtype(dtype_of(precision));
  at::Tensor a = at::rand({n, n}, opts), b = at::rand({n, n}, opts), c = at::empty({n, n}, opts);
  const double one = time_mm(a, b, c, 1, device);  // warm-up, and the size of a sample
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(kSampleSeconds / std::max(one, 1e-9)));
  return 2.0 * std::pow(static_cast<double>(n), 3) * static_cast<double>(reps) / time_mm(a, b, c, reps, device);
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

Peak machine_peak(const c10::Device& device, const std::string& precision) {
  const std::string name = engine::device_name(device);
  if (device.is_cuda())
    if (auto p = known_gpu_peak(name, precision)) return *p;
  const int64_t threads = at::get_num_threads();
  const std::string key = name + "|" + isa(device) + "|" + (device.is_cuda() ? "" : std::to_string(threads) + "threads|") +
                          "torch" + TORCH_VERSION + "|" + precision;
  const std::string dir = cache_dir();
  const std::string path = dir.empty() ? "" : dir + "/peak/" + cache_file(key);
  double cached = 0;
  try {
    if (!path.empty()) {
      std::ifstream in(path);
      if (in) {
        const auto j = nlohmann::json::parse(in);
        if (j.at("key") == key) {
          Calibration c{j.at("flops_per_s").get<double>(), j.at("n").get<int64_t>(), 0, threads, true};
          // A figure cached while something else slowed the calibration unseen would stay low
          // for good: one quick product checks it, and a clearly faster one measures again.
          if (quick_rate(device, precision, c.n) <= kRecheckRatio * c.flops_per_s)
            return Peak{c.flops_per_s, precision, describe(c, precision, device, ", cached in " + path)};
          cached = c.flops_per_s;
        }
      }
    }
  } catch (const std::exception&) {
    // an unreadable entry is measured again and replaced
  }
  // One figure per key for the process: every row of a table reads against the same peak.
  static std::mutex mu;
  static std::map<std::string, Peak> measured;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(path + "|" + key); it != measured.end()) return it->second;
  Calibration c;
  LoadSampler load;
  try {
    load.start();
    c = calibrate(device, precision);
  } catch (const std::exception& e) {
    return Peak{0, precision, std::string("no peak: ") + e.what()};
  }
  // Other processes on the cores (or samples that disagree) make a low figure: used, not cached.
  // A figure above the cached one is never load's doing: it replaces it.
  const bool quiet = (c.steady && (device.is_cuda() || !load.stop().under_load)) || (cached > 0 && c.flops_per_s > cached);
  std::string where = quiet ? "" : ", measured under competing load (not cached)";
  try {
    if (!path.empty() && quiet) {
      std::filesystem::create_directories(dir + "/peak");
      nlohmann::json j{{"key", key}, {"flops_per_s", c.flops_per_s}, {"n", c.n}};
      files::write_text_atomically(path, "the peak cache", j.dump(2) + "\n");
      where = ", cached in " + path;
    }
  } catch (const std::exception&) {
    // no cache: measured again next time
  }
  return measured[path + "|" + key] = Peak{c.flops_per_s, precision, describe(c, precision, device, where)};
}

}  // namespace ptune::measure
