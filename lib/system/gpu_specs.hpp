#pragma once
/// Known GPUs' datasheet ceilings: the dense (not sparse) peak FLOP/s per precision and the
/// memory bandwidth, from the vendors' datasheets (sources in gpu_specs.cpp). No LibTorch: `ptune
/// analyze` reads a trace's device against them. Nothing here is measured.

#include <optional>
#include <string>

namespace ptune::system {

/// A peak and where it came from.
struct Peak {
  double flops_per_s = 0;   // FLOP/s; 0 when none could be had
  std::string precision;    // fp32 | tf32 | bf16 | fp16 | fp8 | int8
  std::string source;       // one line: "NVIDIA H100 SXM datasheet, dense bf16" or
                            // "calibrated: 1024x1024 bf16 matmul, 2 threads, AVX512, ..."
  bool under_load = false;  // calibrated while other processes used the cores (or in samples that
                            // disagree): a figure load may have pulled down, so no ceiling
};

/// A memory bandwidth and where it came from.
struct Bandwidth {
  double bytes_per_s = 0;  // 0 when none could be had
  std::string
      source;  // "NVIDIA H100 Tensor Core GPU datasheet: NVIDIA H100 SXM, 3.35 TB/s" or "calibrated: ..."
};

/// The dense peak of a known GPU (`name` as CUDA reports it: "NVIDIA H100 80GB HBM3", "NVIDIA
/// A100-SXM4-40GB", ...) in `precision`, with its source; nullopt for a device or precision the
/// table lacks. Throws nothing.
std::optional<Peak> known_gpu_peak(const std::string& name, const std::string& precision);

/// The datasheet memory bandwidth of a known GPU; nullopt for a device the table lacks. Throws
/// nothing.
std::optional<Bandwidth> known_gpu_bandwidth(const std::string& name);

}  // namespace ptune::system
