#include "system/gpu_specs.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace ptune::system {
namespace {

/// A GPU's dense peaks in TFLOP/s (0: the device has no such tensor-core path) and its memory
/// bandwidth in TB/s, as its datasheet prints them.
struct GpuSpec {
  const char* label;
  double fp32, tf32, bf16, fp16, fp8, int8;  // int8: TOPS
  double tb_per_s;
  const char* source;
};

// Dense figures: the datasheets print tensor-core figures "with sparsity"; these are half of those.
// fp8 and int8 (TOPS) likewise; 0 where the GPU has no such Tensor Core path (Volta: neither;
// Ampere: no fp8). RTX 4090: fp8 with fp32 accumulation, as PyTorch's scaled matmuls accumulate.
// Bandwidth: the datasheet's GPU memory bandwidth (HBM or GDDR), per GPU.
// H100 SXM 3.35 TB/s, H100 PCIe 2.0 TB/s: NVIDIA H100 Tensor Core GPU datasheet.
const GpuSpec kH100Sxm{"NVIDIA H100 SXM",
                       66.9,
                       494.7,
                       989.4,
                       989.4,
                       1978.9,
                       1978.9,
                       3.35,
                       "NVIDIA H100 Tensor Core GPU datasheet"};
const GpuSpec kH100Pcie{"NVIDIA H100 PCIe",
                        51.2,
                        378.0,
                        756.0,
                        756.0,
                        1513.0,
                        1513.0,
                        2.0,
                        "NVIDIA H100 Tensor Core GPU datasheet"};
// H200 SXM 4.8 TB/s: NVIDIA H200 Tensor Core GPU datasheet.
const GpuSpec kH200{"NVIDIA H200 SXM",
                    66.9,
                    494.7,
                    989.4,
                    989.4,
                    1978.9,
                    1978.9,
                    4.8,
                    "NVIDIA H200 Tensor Core GPU datasheet"};
// A100 40GB 1,555 GB/s; 80GB SXM 2,039 GB/s, 80GB PCIe 1,935 GB/s: NVIDIA A100 Tensor Core GPU datasheet.
const GpuSpec kA100{
    "NVIDIA A100 40GB", 19.5, 156.0, 312.0, 312.0, 0, 624.0, 1.555, "NVIDIA A100 Tensor Core GPU datasheet"};
const char* const kA100Sheet = "NVIDIA A100 Tensor Core GPU datasheet";
const GpuSpec kA100Sxm80{"NVIDIA A100 80GB SXM", 19.5, 156.0, 312.0, 312.0, 0, 624.0, 2.039, kA100Sheet};
const GpuSpec kA100Pcie80{"NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0, 312.0, 0, 624.0, 1.935, kA100Sheet};
// L40S 864 GB/s: NVIDIA L40S datasheet. L4 300 GB/s: NVIDIA L4 Tensor Core GPU datasheet.
const GpuSpec kL40s{"NVIDIA L40S", 91.6, 183.0, 362.05, 362.05, 733.0, 733.0, 0.864, "NVIDIA L40S datasheet"};
const GpuSpec kL4{
    "NVIDIA L4", 30.3, 60.0, 121.0, 121.0, 242.5, 242.5, 0.3, "NVIDIA L4 Tensor Core GPU datasheet"};
// Volta has no TF32 or BF16 tensor cores. V100 900 GB/s (SXM2 and PCIe): NVIDIA V100 Tensor Core GPU
// datasheet.
const GpuSpec kV100Sxm{
    "NVIDIA V100 SXM2", 15.7, 0, 0, 125.0, 0, 0, 0.9, "NVIDIA V100 Tensor Core GPU datasheet"};
const GpuSpec kV100Pcie{
    "NVIDIA V100 PCIe", 14.0, 0, 0, 112.0, 0, 0, 0.9, "NVIDIA V100 Tensor Core GPU datasheet"};
// A10 600 GB/s: NVIDIA A10 Tensor Core GPU datasheet.
const GpuSpec kA10{
    "NVIDIA A10", 31.2, 62.5, 125.0, 125.0, 0, 250.0, 0.6, "NVIDIA A10 Tensor Core GPU datasheet"};
// GeForce: fp16/bf16 with fp32 accumulation (what PyTorch's matmuls use), dense. RTX 4090
// 1,008 GB/s: the same whitepaper's appendix A.
const GpuSpec kRtx4090{"NVIDIA GeForce RTX 4090",
                       82.6,
                       82.6,
                       165.2,
                       165.2,
                       330.3,
                       660.6,
                       1.008,
                       "NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A"};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

const GpuSpec* gpu_spec(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (has(name, "nvl")) return nullptr;  // H100 NVL, H200 NVL: other clocks and power
  if (has(name, "h100")) return has(name, "pcie") ? &kH100Pcie : &kH100Sxm;
  if (has(name, "h200")) return &kH200;
  if (has(name, "a100")) return has(name, "80gb") ? (has(name, "pcie") ? &kA100Pcie80 : &kA100Sxm80) : &kA100;
  if (has(name, "l40s")) return &kL40s;
  if (name == "nvidia l4") return &kL4;
  if (name == "nvidia a10") return &kA10;
  if (has(name, "v100s")) return nullptr;
  if (has(name, "v100")) return has(name, "pcie") ? &kV100Pcie : &kV100Sxm;
  if (has(name, "rtx 4090")) return &kRtx4090;
  return nullptr;
}

}  // namespace

std::optional<Peak> known_gpu_peak(const std::string& name, const std::string& precision) {
  const GpuSpec* g = gpu_spec(name);
  if (!g) return std::nullopt;
  const double tflops = precision == "fp32"   ? g->fp32
                        : precision == "tf32" ? g->tf32
                        : precision == "bf16" ? g->bf16
                        : precision == "fp16" ? g->fp16
                        : precision == "fp8"  ? g->fp8
                        : precision == "int8" ? g->int8
                                              : 0;
  if (tflops <= 0) return std::nullopt;
  return Peak{tflops * 1e12, precision, std::string(g->source) + ": " + g->label + ", dense " + precision};
}

std::optional<Bandwidth> known_gpu_bandwidth(const std::string& name) {
  const GpuSpec* g = gpu_spec(name);
  if (!g) return std::nullopt;
  char tb[32];
  std::snprintf(tb, sizeof tb, "%.3g TB/s", g->tb_per_s);
  return Bandwidth{g->tb_per_s * 1e12,
                   std::string(g->source) + ": " + g->label + ", " + tb + " memory bandwidth"};
}

}  // namespace ptune::system
