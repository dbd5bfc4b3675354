#include "measure/diagnosis.hpp"

#include "core/numbers.hpp"
#include "system/process.hpp"

#include <cmath>
#include <cstdio>

namespace ptune::measure {
namespace {

std::string pct(double v) { return numbers::percent(v); }

/// One possible next move: the key it turns, and the advice as the verdict says it.
struct Move {
  std::string key;
  std::string text;
};

/// The earlier row that measured `key` as within noise or slower, if any.
const Tried* measured_useless(const std::vector<Tried>& tried, const std::string& key) {
  for (auto it = tried.rbegin(); it != tried.rend(); ++it)
    if (it->key == key && (it->verdict == "within noise" || it->verdict == "slower")) return &*it;
  return nullptr;
}

/// The first of `moves` the sweep has not measured as useless, prefixed by what was skipped:
/// "optim.amp measured within noise here (row 7 'bf16 autocast'); try model.channels_last".
/// `fallback` when every move was skipped.
std::string first_untried(const std::vector<Move>& moves, const std::vector<Tried>& tried,
                          const std::string& fallback) {
  std::string skipped;
  for (const Move& mv : moves) {
    const Tried* t = mv.key.empty() ? nullptr : measured_useless(tried, mv.key);
    if (!t) return skipped.empty() ? mv.text : skipped + "; try " + mv.text;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2fx", t->speedup);
    const std::string where =
        t->trial ? "trial '" + t->row : "row " + std::to_string(t->index) + " '" + t->row;
    skipped += (skipped.empty() ? "" : "; ") + mv.key + " measured " + t->verdict + " here (" + where +
               "', " + buf + ")";
  }
  return skipped.empty() ? fallback : skipped + (fallback.empty() ? "" : "; " + fallback);
}

/// The bf16 move on a CPU with native bf16, as a hypothesis with its reason: what makes bf16
/// pay off there (oneDNN's bf16 kernels on the hardware that has them, channels_last tensors,
/// enough work per call); where channels_last is off, the pair "optim.amp bf16 with
/// model.channels_last", since bf16 alone on contiguous tensors may be slower than fp32.
std::string cpu_bf16_move(const config::ExperimentConfig& cfg, const system::CpuInfo& cpu) {
  const std::string size = std::to_string(cfg.data.image_size) + "x" + std::to_string(cfg.data.image_size) +
                           ", batch " + std::to_string(cfg.loader.batch_size);
  const std::string why = "this CPU's " + cpu.bf16_flag +
                          " pays off with channels_last tensors and enough work per call; at small images or "
                          "batches bf16 can be slower than fp32 (this row: " +
                          size + "): measure it";
  return cfg.model.channels_last ? "optim.amp bf16 (" + why + ")"
                                 : "optim.amp bf16 with model.channels_last (" + why + ")";
}

/// The compute-bound verdict and its next move: bf16 (on a GPU, or on a CPU with native bf16, as
/// the pair with channels_last there), then channels_last; on a CPU without native bf16 why bf16
/// is not advised. `memory` is appended (the low-memory rule's text, or "").
std::string compute_bound(const Measurement& m, const config::ExperimentConfig& cfg,
                          const std::vector<Tried>& tried, const system::CpuInfo& cpu, bool cuda,
                          const std::string& memory) {
  std::string s = "compute-bound (" + pct(m.split.value_or(Measurement::StepSplit{}).compute_pct) +
                  " in forward/backward/update";
  if (m.gpu_busy_pct) s += ", GPU busy " + pct(*m.gpu_busy_pct);
  s += ")";
  std::vector<Move> moves;
  std::string why_not_amp;
  if (cfg.optim.amp == config::Amp::kOff) {
    if (cuda)
      moves.push_back({"optim.amp", "optim.amp"});
    else if (cpu.bf16_native)
      moves.push_back({"optim.amp", cpu_bf16_move(cfg, cpu)});
    else
      why_not_amp = system::bf16_reason(cpu) + ", so optim.amp is not advised";
    s += " on fp32";
  } else if (!cuda && cfg.optim.amp == config::Amp::kBf16 && !cpu.bf16_native) {
    // Emulated: no setting helps as much as leaving bf16 off.
    s += " on bf16 that this CPU emulates";
    why_not_amp = system::bf16_reason(cpu) + ", so optim.amp off is faster here";
  }
  if (!cfg.model.channels_last) {
    // Native bf16 on a CPU: oneDNN's bf16 kernels want channels_last (else every convolution
    // reorders its input and output).
    const bool for_bf16 = !cuda && cfg.optim.amp == config::Amp::kBf16 && cpu.bf16_native;
    moves.push_back({"model.channels_last",
                     for_bf16 ? "model.channels_last (oneDNN's bf16 kernels on this CPU's " + cpu.bf16_flag +
                                    " want channels_last tensors; without it each convolution reorders them)"
                              : "model.channels_last"});
  }
  std::string next = first_untried(moves, tried, "");
  if (!moves.empty() && moves.front().key != "optim.amp" && next == moves.front().text) next = "try " + next;
  if (!why_not_amp.empty() && next.rfind("try ", 0) == 0) next = next.substr(4);
  if (!why_not_amp.empty()) next = why_not_amp + (next.empty() ? "" : "; try " + next);
  return next.empty() ? s + memory : s + ": " + next + memory;
}

}  // namespace

namespace {

/// The allocator rule (CPU rows under glibc's malloc): "allocator-bound (...): <move>", or "" when
/// it does not fire.
std::string allocator_verdict(const Measurement& m, const config::ExperimentConfig& cfg,
                              const std::vector<Tried>& tried, bool cuda) {
  if (cuda || cfg.process.allocator != config::Allocator::kGlibc || !m.system_time_pct ||
      !fires(RuleId::kAllocator, *m.system_time_pct))
    return "";
  char faults[64] = "";
  if (m.page_faults_per_step)
    std::snprintf(faults, sizeof faults, ", %.0f page faults a step", *m.page_faults_per_step);
  std::string s = "allocator-bound (" + pct(*m.system_time_pct) + " of the step in the kernel" + faults +
                  ": glibc's malloc gives large blocks back and the next step faults them in again): ";
  const std::vector<Move> moves = {
      {"process.allocator", "process.allocator jemalloc, tcmalloc or glibc_tuned"}};
  return s + first_untried(moves, tried, "keep freed memory for reuse");
}

/// A program row's verdict: `ptune analyze`'s on the trace it wrote (measure.profile), with the
/// allocator rule's finding from outside where it fires (a trace does not show page faults); or
/// else from outside its processes: the allocator rule, its processes' GPU busy share (NVML) where
/// known, or how many of the cores it may use its process tree kept busy, its system time and its
/// memory.
std::string program_verdict(const Measurement& m, const config::ExperimentConfig& cfg,
                            const std::vector<Tried>& tried, const DiagnosisThresholds& t) {
  const std::string alloc = allocator_verdict(m, cfg, tried, false);
  if (!m.trace_verdict.empty())
    return m.trace_verdict + " (ptune analyze on its trace)" +
           (alloc.empty() ? "" : "; from outside, " + alloc);
  if (!alloc.empty()) return alloc;
  if (m.gpu_busy_pct) {
    char cores[64] = "";
    if (m.cpu_cores_busy) std::snprintf(cores, sizeof cores, ", %.1f CPU cores busy", *m.cpu_cores_busy);
    const std::string seen = "GPU busy " + pct(*m.gpu_busy_pct) + " for its processes" + cores;
    if (*m.gpu_busy_pct < t.launch_bound_busy_pct)
      return "the GPU idle much of the step (" + seen +
             "): the host does not feed it fast enough: more DataLoader workers, pin_memory=True, a "
             "larger batch, CUDA graphs or torch.compile; a torch.profiler trace of the program, read "
             "with ptune analyze, shows which";
    return "GPU-bound (" + seen +
           "): the next gains come from less work on the GPU: bf16 or fp16 autocast, channels_last, "
           "torch.compile";
  }
  if (!m.cpu_cores_busy) return "";
  size_t cores = system::allowed_cpus().size();
  if (cfg.process.cpus) {
    try {
      cores = system::parse_cpu_list(*cfg.process.cpus, "process.cpus").size();
    } catch (const std::exception&) {
    }
  }
  char seen[200];
  std::snprintf(seen, sizeof seen, "%.1f of %zu cores busy", *m.cpu_cores_busy, cores);
  std::string extra;
  if (m.system_time_pct) extra += ", system time " + pct(*m.system_time_pct) + " of the step";
  if (m.peak_rss_bytes) {
    char rss[64];
    std::snprintf(rss, sizeof rss, ", resident memory at most %.0f MiB",
                  static_cast<double>(*m.peak_rss_bytes) / 1048576.0);
    extra += rss;
  }
  if (cores > 0 && *m.cpu_cores_busy < 0.5 * static_cast<double>(cores))
    return "the CPU mostly idle (" + std::string(seen) + extra +
           "): the step waits on something other than the CPU (a GPU, I/O, a lock) or runs on fewer threads "
           "than cores: more DataLoader workers, torch.set_num_threads; a torch.profiler trace of the "
           "program, read with ptune analyze, shows which";
  return "CPU-bound (" + std::string(seen) + extra +
         "): the next gains come from less work a step (channels_last, bf16 autocast on a CPU with native "
         "bf16, torch.compile) or from the threads' placement (process.bind_threads, process.allocator)";
}

}  // namespace

std::string diagnose_program(const Measurement& m, const config::ExperimentConfig& cfg,
                             const std::vector<Tried>& tried, const DiagnosisThresholds& t) {
  return program_verdict(m, cfg, tried, t);
}

std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const std::vector<Tried>& tried, const DiagnosisThresholds& t,
                     std::optional<bool> cpu_bf16) {
  if (!cpu_bf16) {
    static const system::CpuInfo here = system::describe_cpu(system::read_cpu_facts());
    return diagnose(m, cfg, tried, t, here);
  }
  system::CpuInfo cpu;
  cpu.bf16_native = *cpu_bf16;
  cpu.bf16_flag = "native bf16";
  return diagnose(m, cfg, tried, t, cpu);
}

std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const std::vector<Tried>& tried, const DiagnosisThresholds& t,
                     const system::CpuInfo& cpu) {
  const auto& mode = cfg.measure.mode;
  if (mode == config::Mode::kData) return "input pipeline alone: the ceiling the loader sets on training";
  if (mode == config::Mode::kSynthetic)
    return "model alone (one batch on the device): the ceiling compute sets";
  const bool cuda = m.device_mem_bytes.has_value();
  const Measurement::StepSplit split = m.split.value_or(Measurement::StepSplit{});
  if (split.data_wait_pct >= t.input_bound_pct) {
    std::string s = "input-bound (" + pct(split.data_wait_pct) + " waiting for data): ";
    std::vector<Move> moves = {{"loader.num_workers", "raise loader.num_workers (now " +
                                                          std::to_string(cfg.loader.num_workers) + ")"}};
    if (!cfg.loader.uint8_transfer)
      moves.push_back({"loader.uint8_transfer", "ship smaller batches (loader.uint8_transfer)"});
    return s + first_untried(moves, tried, "make the dataset's decoding and transforms cheaper");
  }
  if (split.h2d_pct >= t.copy_bound_pct) {
    std::string s = "copy-bound (" + pct(split.h2d_pct) + " copying to the device): ";
    std::vector<Move> moves;
    if (!cfg.loader.pin_memory) moves.push_back({"loader.pin_memory", "loader.pin_memory"});
    if (!cfg.loader.uint8_transfer) moves.push_back({"loader.uint8_transfer", "loader.uint8_transfer"});
    return s + first_untried(moves, tried, "overlap copies with compute");
  }
  if (std::string a = allocator_verdict(m, cfg, tried, cuda); !a.empty()) return a;
  std::string memory;
  if (m.peak_mem_bytes && m.device_mem_bytes && *m.device_mem_bytes > 0) {
    const double used =
        100.0 * static_cast<double>(*m.peak_mem_bytes) / static_cast<double>(*m.device_mem_bytes);
    if (used < t.low_memory_pct && !measured_useless(tried, "loader.batch_size"))
      memory = "; memory " + pct(used) + " used: raise loader.batch_size";
  }
  if (m.gpu_busy_pct && *m.gpu_busy_pct < t.launch_bound_busy_pct) {
    std::string s =
        "launch-bound (GPU busy " + pct(*m.gpu_busy_pct) + ", the host cannot feed kernels fast enough): ";
    std::vector<Move> moves;
    if (!cfg.optim.cuda_graphs) moves.push_back({"optim.cuda_graphs", "optim.cuda_graphs"});
    moves.push_back({"loader.batch_size", "raise loader.batch_size"});
    return s + first_untried(moves, tried, "") + memory;
  }
  return compute_bound(m, cfg, tried, cpu, cuda, memory);
}

std::string with_peak(const std::string& diagnosis, std::optional<double> pct_of_peak,
                      const std::string& precision) {
  if (!pct_of_peak || diagnosis.rfind("compute-bound", 0) != 0) return diagnosis;
  const std::string at = "at " + pct(*pct_of_peak) + " of the " + precision + " peak";
  if (*pct_of_peak >= kNearPeakPct)
    return diagnosis + "; " + at +
           " the next gains from settings are small: a cheaper model or more hardware is what is left";
  if (*pct_of_peak < kFarFromPeakPct)
    return diagnosis + "; " + at +
           " the arithmetic units are mostly idle: the step's time goes to work that is not matrix products "
           "(norms, activations, other memory-bound elementwise operators), layers too small to fill the "
           "cores and per-operator overhead; a larger loader.batch_size fills them better, and "
           "measure.profile shows which operators take the time";
  return diagnosis;
}

}  // namespace ptune::measure
