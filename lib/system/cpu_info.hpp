#pragma once
/// The CPU as LibTorch uses it: the instruction set ATen's kernels dispatch to and the one
/// oneDNN's kernels use (each honouring its cap, ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA),
/// whether bf16 and fp16 arithmetic are native, AMX, cores and threads. Plain data and pure
/// functions (no LibTorch): runtime::cpu_info() (runtime/device.hpp) fills the facts from
/// LibTorch; read_cpu_facts() from /proc/cpuinfo, for the commands that load no LibTorch.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ptune::system {

/// What is known about the CPU before the caps are applied.
struct CpuFacts {
  std::string model;                  // "AMD EPYC"; "" when unknown
  std::string arch;                   // "x86_64", "aarch64", ...
  std::map<std::string, bool> flags;  // hardware features by cpuinfo's names: "avx2", "avx512_f",
                                      // "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "bf16" (Arm)...
  int64_t physical_cores = 0;         // 0 = unknown
  int64_t logical_cores = 0;          // hardware threads; 0 = unknown
  std::string aten_isa;               // ATen's dispatch ("AVX512", "AVX2", "DEFAULT"); "" = derive it
  std::optional<bool> onednn_bf16;    // oneDNN's own answer to "bf16 kernels?" (native or emulated)
  std::string aten_cap;               // ATEN_CPU_CAPABILITY's value, "" when unset
  std::string onednn_cap;             // ONEDNN_MAX_CPU_ISA's (or DNNL_MAX_CPU_ISA's) value, "" when unset
};

/// The CPU as LibTorch will use it.
struct CpuInfo {
  std::string model;           // the CPU's name
  std::string arch;            // "x86_64", "aarch64", ...
  std::string aten_isa;        // ATen's kernels: "AVX512", "AVX2", "DEFAULT" (x86), "SVE256" (Arm)
  std::string onednn_isa;      // oneDNN's kernels (x86): "avx512_core_amx", "avx512_core_bf16",
                               // "avx512_core", "avx2", ...; "" elsewhere
  bool bf16_native = false;    // bf16 arithmetic in hardware that oneDNN uses (AVX512-BF16 or AMX on
                               // x86, BF16 on Arm)
  bool fp16_native = false;    // fp16 arithmetic in hardware that oneDNN uses (AVX512-FP16 or AMX-FP16)
  bool amx = false;            // AMX tiles that oneDNN uses (bf16 and int8)
  std::string bf16_flag;       // the hardware flag behind bf16_native ("avx512_bf16", "amx_bf16", "bf16")
  std::string bf16_capped;     // the cap that hides this CPU's bf16 ("ONEDNN_MAX_CPU_ISA=AVX2"); "" when none
  int64_t physical_cores = 0;  // 0 = unknown
  int64_t logical_cores = 0;   // hardware threads; 0 = unknown
  std::vector<std::string> caps;  // the caps in effect: "ATEN_CPU_CAPABILITY=avx2", "ONEDNN_MAX_CPU_ISA=AVX2"
};

/// oneDNN's x86 instruction sets, lowest first, by oneDNN's names (ONEDNN_MAX_CPU_ISA's values,
/// lowercase). Throws nothing.
const std::vector<std::string>& onednn_isas();

/// The instruction set oneDNN uses on a CPU with `flags` under the cap `cap` (ONEDNN_MAX_CPU_ISA's
/// value, any case; "", "ALL", "DEFAULT" or an unknown name: no cap): the highest of
/// onednn_isas() that the hardware has and the cap allows. "" when not even SSE4.1 is there.
/// Throws nothing.
std::string onednn_isa(const std::map<std::string, bool>& flags, const std::string& cap);

/// The instruction set ATen dispatches to on a CPU with `flags` under ATEN_CPU_CAPABILITY=`cap`
/// ("default", "avx2", "avx512"; anything else: no cap), as ATen's get_cpu_capability decides on
/// x86: "AVX512" (AVX512 F, BW, VL, DQ), "AVX2" (AVX2 and FMA) or "DEFAULT". Throws nothing.
std::string aten_isa(const std::map<std::string, bool>& flags, const std::string& cap);

/// The CPU as LibTorch uses it, from `facts`. Throws nothing.
CpuInfo describe_cpu(const CpuFacts& facts);

/// The facts from /proc/cpuinfo and the environment (no LibTorch: ATen's ISA is derived, oneDNN's
/// own answer is unknown). Throws nothing; unknown facts stay empty.
CpuFacts read_cpu_facts();

/// One line for the results' device line: "ATen AVX2, oneDNN avx2 (ATEN_CPU_CAPABILITY=avx2,
/// ONEDNN_MAX_CPU_ISA=AVX2), bf16 not native (capped), 2 cores, 2 threads". Throws nothing.
std::string summary(const CpuInfo& cpu);

/// Why optim.amp (bf16) is or is not advised on this CPU: "this CPU has avx512_bf16", "this CPU
/// has no native bf16 arithmetic (no AVX512-BF16 or AMX)", or "ONEDNN_MAX_CPU_ISA=AVX2 keeps
/// oneDNN from this CPU's avx512_bf16". Throws nothing.
std::string bf16_reason(const CpuInfo& cpu);

/// The results file's environment "cpu" object (docs/results.md). Throws nothing.
nlohmann::ordered_json cpu_json(const CpuInfo& cpu);

}  // namespace ptune::system
