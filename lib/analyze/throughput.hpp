#pragma once
/// Achieved FLOP/s and bytes moved per operator class of a traced step, read against the
/// device's two ceilings (peak FLOP/s and memory bandwidth): a roofline. FLOPs come from the
/// trace's "flops" (older torch.profiler with with_flops=True) or are counted from the input
/// shapes (record_shapes=True, which with_flops=True turns on) with PyTorch's with_flops formulas:
/// 2 per multiply-add of convolutions and matrix products, 1 per element of add and mul; the
/// backward convolution (which PyTorch's formulas leave out) counts its forward's FLOPs once per
/// gradient it computes, as torch.utils.flop_counter does.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analyze/trace_reader.hpp"
#include "measure/gpu_specs.hpp"

namespace ptune::analyze {

struct Breakdown;  // analyze/breakdown.hpp

/// A device's two ceilings.
struct Ceilings {
  measure::Peak peak;            // flops_per_s 0: none
  measure::Bandwidth bandwidth;  // bytes_per_s 0: none
};

/// The ceilings of the CPU that runs ptune in `precision` ("fp32", "bf16"): the calibration of
/// measure/peak (a CPU trace is read against the machine that analyzes it). nullopt: none.
using CpuCeilings = std::function<std::optional<Ceilings>(const std::string& precision)>;

/// One operator class, per step (the mean over the steps).
struct ClassRate {
  std::string name;  // "convolution", "convolution backward", "matmul", "elementwise",
                     // "normalization", "other" (an operator the trace gives FLOPs of)
  double calls = 0;  // operator calls counted (the outermost of a class on their thread)
  double flops = 0;
  std::optional<double> bytes;  // inputs read and outputs written, where the shapes allow
  double us = 0;                // their time: the operators' on a CPU, the kernels they launched on a GPU
  std::string precision;        // of most of its FLOPs (bytes where it has none): fp32, bf16, fp16, fp64
  double flops_per_s() const { return us > 0 ? flops * 1e6 / us : 0; }
  std::optional<double> intensity() const {  // FLOPs per byte
    if (!bytes || *bytes <= 0) return std::nullopt;
    return flops / *bytes;
  }
};

/// A rank's FLOPs and bytes per step.
struct Throughput {
  std::string source = "none";     // "trace" ("flops" in the trace), "shapes" (counted), "none"
  std::string missing;             // source "none": what to add to the profiler call, one line
  double flops = 0;                // per step
  double step_us = 0;              // the mean step
  std::string precision;           // of most FLOPs
  std::vector<ClassRate> classes;  // largest time first
  std::optional<Ceilings> ceilings;
  std::string no_ceilings;  // why none (an unknown GPU, no calibration)
  double flops_per_s() const { return step_us > 0 ? flops * 1e6 / step_us : 0; }
};

/// "compute-bound" or "memory-bound" (arithmetic intensity against the ceilings' ratio), or ""
/// without both ceilings or bytes. Throws nothing.
std::string bound_of(const ClassRate& c, const std::optional<Ceilings>& ceil);

/// The roofline's attainable FLOP/s at the class's intensity: min(peak, intensity x bandwidth);
/// nullopt without both ceilings or bytes. Throws nothing.
std::optional<double> roof_of(const ClassRate& c, const std::optional<Ceilings>& ceil);

/// The FLOPs of the steps of `b` (taken apart from `traces`), and the ceilings: a GPU's from
/// the datasheet table by the trace's deviceProperties name, a CPU's from `cpu` (when given).
/// Throws nothing.
Throughput throughput_of(const std::vector<const Trace*>& traces, const Breakdown& b, const CpuCeilings& cpu);

}  // namespace ptune::analyze
