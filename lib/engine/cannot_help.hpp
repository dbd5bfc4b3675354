#pragma once
/// Changes that cannot help on this machine, decided before anything is timed: one place for the
/// sweep (which leaves such a row out), `ptune tune` (which skips such a trial) and `ptune
/// train` (which warns).

#include <string>

#include "config/config.hpp"
#include "system/cpu_info.hpp"

namespace ptune::engine {

/// Why autocast in bf16 is slow on `cpu`, or "" where bf16 is native to its kernels: "<why
/// bf16 is not native (bf16_reason)>, so autocast would run bf16 emulated, many times slower than
/// fp32". Throws nothing.
std::string bf16_emulated(const system::CpuInfo& cpu);

/// Why the change from `before` to `after` cannot help on this machine, or "" where it can:
/// - optim.amp bf16 turned on for a CPU without native bf16 arithmetic (oneDNN then emulates
///   bf16 in fp32, many times slower than fp32 itself);
/// - process.numa_node alone changed on a machine with one NUMA node (the same process twice).
/// A sweep leaves such a row out, and the rows after it run without its changes; `ptune tune`
/// skips such a trial. Throws nothing but a ConfigError for a device that is not there.
std::string cannot_help_here(const config::ExperimentConfig& before, const config::ExperimentConfig& after);

}  // namespace ptune::engine
