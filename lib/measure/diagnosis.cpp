#include "measure/diagnosis.hpp"

#include <cmath>

namespace ptune::measure {
namespace {
std::string pct(double v) { return std::to_string(static_cast<int>(std::lround(v))) + "%"; }
}  // namespace

std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const DiagnosisThresholds& t) {
  const auto& mode = cfg.measure.mode;
  if (mode == "data") return "input pipeline alone: the ceiling the loader sets on training";
  if (mode == "synthetic") return "model alone (one batch on the device): the ceiling compute sets";
  if (m.data_wait_pct >= t.input_bound_pct) {
    std::string s = "input-bound (" + pct(m.data_wait_pct) + " waiting for data): ";
    if (cfg.loader.num_workers == 0) return s + "raise loader.num_workers (now 0)";
    return s + "raise loader.num_workers (now " + std::to_string(cfg.loader.num_workers) +
           ") or ship smaller batches (loader.uint8_transfer)";
  }
  if (m.h2d_pct >= t.copy_bound_pct) {
    std::string s = "copy-bound (" + pct(m.h2d_pct) + " copying to the device): ";
    if (!cfg.loader.pin_memory) return s + "loader.pin_memory";
    if (!cfg.loader.uint8_transfer) return s + "loader.uint8_transfer";
    return s + "overlap copies with compute";
  }
  std::string memory;
  if (m.peak_mem_bytes && m.device_mem_bytes && *m.device_mem_bytes > 0) {
    const double used = 100.0 * static_cast<double>(*m.peak_mem_bytes) / static_cast<double>(*m.device_mem_bytes);
    if (used < t.low_memory_pct) memory = "; memory " + pct(used) + " used: raise loader.batch_size";
  }
  if (m.gpu_busy_pct && *m.gpu_busy_pct < t.launch_bound_busy_pct) {
    std::string s = "launch-bound (GPU busy " + pct(*m.gpu_busy_pct) + ", the host cannot feed kernels fast enough): ";
    return s + (cfg.optim.cuda_graphs ? "raise loader.batch_size" : "optim.cuda_graphs") + memory;
  }
  std::string s = "compute-bound (" + pct(m.compute_pct) + " in forward/backward/update";
  if (m.gpu_busy_pct) s += ", GPU busy " + pct(*m.gpu_busy_pct);
  s += ")";
  if (cfg.optim.amp == "off") return s + " on fp32: optim.amp" + memory;
  if (!cfg.model.channels_last) return s + ": try model.channels_last" + memory;
  return s + memory;
}

}  // namespace ptune::measure
