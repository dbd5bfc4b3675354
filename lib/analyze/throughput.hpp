#pragma once
/// Achieved FLOP/s and bytes moved per operator class of a traced step, read against the
/// device's two ceilings (peak FLOP/s and memory bandwidth): a roofline. FLOPs come from the
/// trace's "flops" (older torch.profiler with with_flops=True) or are counted from the input
/// shapes (record_shapes=True, which with_flops=True turns on) with PyTorch's with_flops formulas:
/// 2 per multiply-add of convolutions and matrix products, 1 per element of add and mul; the
/// backward convolution (which PyTorch's formulas leave out) counts its forward's FLOPs once per
/// gradient it computes, as torch.utils.flop_counter does.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analyze/trace_reader.hpp"
#include "system/gpu_specs.hpp"

namespace ptune::analyze {

struct Breakdown;  // analyze/breakdown.hpp
struct StepBreakdown;

/// A device's two ceilings.
struct Ceilings {
  system::Peak peak;            // flops_per_s 0: none
  system::Bandwidth bandwidth;  // bytes_per_s 0: none
};

/// The ceilings of the CPU that runs ptune in `precision` ("fp32", "bf16"): the calibration of
/// bench/peak (a CPU trace is read against the machine that analyzes it). nullopt: none.
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
  /// On a GPU: its kernels' time by the precision their names say (kernel_precision(); "" for
  /// kernels whose names say none: read as `precision`).
  std::map<std::string, double> us_by_precision;
  double ceiling = 0;        // FLOP/s: the peak of the precision its kernels ran in (a mixed class:
                             // time-weighted over them); 0: none
  std::string ceiling_text;  // which: "tf32", or "tf32 63%, fp32 37% of its kernel time"
  std::string over;          // why no peak% is printed where its FLOP/s pass its ceiling; "" otherwise
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
  std::string no_ceilings;          // why none (an unknown GPU, no calibration)
  std::vector<system::Peak> peaks;  // every peak a class is read against, once each
  double step_ceiling = 0;          // FLOP/s the step's FLOPs would run at, each class at its ceiling
  std::string step_over;            // why no step peak% is printed (above its ceiling); "" otherwise
  double flops_per_s() const { return step_us > 0 ? flops * 1e6 / step_us : 0; }
};

/// A class's FLOP/s as a % of its own ceiling; nullopt without one, or where the figure would
/// pass 100% (ClassRate::over says why). Throws nothing.
std::optional<double> peak_pct(const ClassRate& c);

/// The step's FLOP/s as a % of the rate its FLOPs would run at, each class at its own ceiling;
/// nullopt as peak_pct(). Throws nothing.
std::optional<double> step_peak_pct(const Throughput& th);

/// "compute-bound" or "memory-bound" (arithmetic intensity against the ceilings' ratio), or ""
/// without both ceilings or bytes. Throws nothing.
std::string bound_of(const ClassRate& c, const std::optional<Ceilings>& ceil);

/// The roofline's attainable FLOP/s at the class's intensity: min(its ceiling, intensity x
/// bandwidth) (the device's peak for a class without its own); nullopt without both ceilings or
/// bytes. Throws nothing.
std::optional<double> roof_of(const ClassRate& c, const std::optional<Ceilings>& ceil);

/// A rate in three digits with an SI prefix: "156 TFLOP/s", "19.5 TFLOP/s", "1.55 TB/s" (`unit`
/// "FLOP/s" or "B/s"). Throws nothing.
std::string rate_text(double v, const char* unit = "FLOP/s");

/// The peaks the classes are read against and the bandwidth, one line: "156 TFLOP/s tf32,
/// 19.5 TFLOP/s fp32 (NVIDIA A100 Tensor Core GPU datasheet: NVIDIA A100 40GB, dense); 1.56 TB/s
/// (...)"; "" without ceilings. Throws nothing.
std::string ceilings_text(const Throughput& th);

/// One line per class (and the step) whose FLOP/s pass its ceiling: "matmul: 25.0 TFLOP/s is more
/// than its ceiling (19.5 TFLOP/s fp32), so no % of peak: <why>". Throws nothing.
std::vector<std::string> over_notes(const Throughput& th);

/// The FLOPs of a process's steps, summed a Trace at a time as BreakdownBuilder takes them apart
/// (each file whole, or its parts), and the ceilings: a GPU's from the datasheet table by the
/// trace's deviceProperties name, a CPU's from `cpu` (when given). Throws nothing.
class ThroughputBuilder {
 public:
  /// `steps`: the steps of all the traces to come (the figures are per step); `has_gpu`: any of
  /// them recorded a GPU (an operator's time is then its kernels').
  ThroughputBuilder(size_t steps, bool has_gpu);
  ~ThroughputBuilder();
  ThroughputBuilder(const ThroughputBuilder&) = delete;
  ThroughputBuilder& operator=(const ThroughputBuilder&) = delete;

  /// Adds the operators of `t` that lie in `windows` (the steps so far) and start in `own`
  /// (what BreakdownBuilder::add returned for `t`).
  void add(const Trace& t, const std::vector<StepBreakdown>& windows, std::pair<double, double> own);
  /// The figures of `b` (the breakdown of the same traces), against `cpu`'s ceilings on a CPU.
  Throughput finish(const Breakdown& b, const CpuCeilings& cpu);

 private:
  struct Sums;
  double nsteps_;
  bool has_gpu_;
  std::unique_ptr<Sums> sums_;
};

}  // namespace ptune::analyze
