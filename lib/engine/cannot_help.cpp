#include "engine/cannot_help.hpp"

#include "runtime/device.hpp"
#include "system/process.hpp"

namespace ptune::engine {

namespace {

/// Whether `after` is `before` with another process section that starts the same process here
/// (same_process: on a machine with one NUMA node, binding to it is no binding) and nothing else.
bool same_run_another_way(config::ExperimentConfig before, config::ExperimentConfig after) {
  if (!system::same_process(before.process, after.process) ||
      config::to_json(before)["process"] == config::to_json(after)["process"])
    return false;
  after.process = before.process;
  before.sweep.clear();  // a sweep's first row is compared with the config that holds the sweep
  after.sweep.clear();
  return config::to_json(after) == config::to_json(before);
}

}  // namespace

std::string bf16_emulated(const system::CpuInfo& cpu) {
  if (cpu.bf16_native) return "";
  return system::bf16_reason(cpu) + ", so autocast would run bf16 emulated, many times slower than fp32";
}

std::string cannot_help_here(const config::ExperimentConfig& before, const config::ExperimentConfig& after) {
  if (same_run_another_way(before, after))  // only process.numa_node differs there
    return "process.numa_node " + std::to_string(after.process.numa_node) +
           " cannot help on this machine: it has one NUMA node, so binding to it changes nothing";
  if (after.optim.amp != config::Amp::kBf16 || before.optim.amp == config::Amp::kBf16 ||
      !runtime::resolve_device(after.device).is_cpu())
    return "";
  const std::string why = bf16_emulated(runtime::cpu_info());
  if (why.empty()) return "";
  return "optim.amp bf16 cannot help on this CPU: " + why + " (a CPU with AVX512-BF16 or AMX measures it)";
}

}  // namespace ptune::engine
