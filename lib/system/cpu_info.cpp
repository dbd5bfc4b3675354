#include "system/cpu_info.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace ptune::system {
namespace {

/// One of oneDNN's x86 instruction sets: its name, its bits in dnnl_cpu_isa_t (a cap allows the
/// sets whose bits it holds) and the hardware features it needs (cpuinfo's names).
struct Isa {
  const char* name;
  unsigned mask;
  std::vector<const char*> needs;
};

const std::vector<Isa>& isa_table() {
  static const std::vector<const char*> avx2 = {"sse4_1", "avx", "avx2", "fma3"};
  static const std::vector<const char*> avx512 = {"sse4_1",   "avx",       "avx2",      "fma3",
                                                  "avx512_f", "avx512_bw", "avx512_vl", "avx512_dq"};
  auto with = [](std::vector<const char*> base, std::initializer_list<const char*> more) {
    base.insert(base.end(), more);
    return base;
  };
  // dnnl_types.h's dnnl_cpu_isa_t values (oneDNN 3.x), lowest first.
  static const std::vector<Isa> table = {
      {"sse41", 0x1, {"sse4_1"}},
      {"avx", 0x3, {"sse4_1", "avx"}},
      {"avx2", 0x7, avx2},
      {"avx2_vnni", 0xf, with(avx2, {"avx_vnni"})},
      {"avx2_vnni_2", 0x1f, with(avx2, {"avx_vnni", "avx_vnni_int8", "avx_ne_convert"})},
      {"avx512_core", 0x27, avx512},
      {"avx512_core_vnni", 0x67, with(avx512, {"avx512_vnni"})},
      {"avx512_core_bf16", 0xe7, with(avx512, {"avx512_vnni", "avx512_bf16"})},
      {"avx10_1_512", 0x1ef, with(avx512, {"avx512_vnni", "avx512_bf16", "avx512_fp16"})},
      {"avx10_1_512_amx", 0xfef,
       with(avx512, {"avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"})},
      {"avx10_1_512_amx_fp16", 0x1fef,
       with(avx512,
            {"avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16"})},
  };
  return table;
}

/// ONEDNN_MAX_CPU_ISA's value as a mask; ~0 (no cap) for "", ALL, DEFAULT or a name oneDNN
/// does not know (oneDNN ignores those too).
unsigned cap_mask(std::string cap) {
  std::transform(cap.begin(), cap.end(), cap.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::map<std::string, std::string> kAliases = {
      {"avx512_core_fp16", "avx10_1_512"},
      {"avx512_core_amx", "avx10_1_512_amx"},
      {"avx512_core_amx_fp16", "avx10_1_512_amx_fp16"}};
  if (auto it = kAliases.find(cap); it != kAliases.end()) cap = it->second;
  for (const Isa& isa : isa_table())
    if (cap == isa.name) return isa.mask;
  return ~0u;
}

bool has(const std::map<std::string, bool>& flags, const std::string& f) {
  auto it = flags.find(f);
  return it != flags.end() && it->second;
}

unsigned mask_of(const std::string& isa) {
  for (const Isa& i : isa_table())
    if (isa == i.name) return i.mask;
  return 0;
}

bool x86(const std::string& arch) { return arch == "x86_64" || arch == "i686" || arch == "x86"; }

/// /proc/cpuinfo's x86 flag names where cpuinfo's differ.
const std::map<std::string, std::string>& proc_flag_names() {
  static const std::map<std::string, std::string> m = {{"fma", "fma3"},           {"avx512f", "avx512_f"},
                                                       {"avx512bw", "avx512_bw"}, {"avx512vl", "avx512_vl"},
                                                       {"avx512dq", "avx512_dq"}, {"avx512cd", "avx512_cd"},
                                                       {"asimdhp", "fp16"}};
  return m;
}

}  // namespace

const std::vector<std::string>& onednn_isas() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Isa& i : isa_table()) v.push_back(i.name);
    return v;
  }();
  return names;
}

std::string onednn_isa(const std::map<std::string, bool>& flags, const std::string& cap) {
  const unsigned allowed = cap_mask(cap);
  std::string best;
  for (const Isa& isa : isa_table()) {
    const bool present =
        std::all_of(isa.needs.begin(), isa.needs.end(), [&](const char* f) { return has(flags, f); });
    if (present && (isa.mask & ~allowed) == 0) best = isa.name;
  }
  return best;
}

std::string aten_isa(const std::map<std::string, bool>& flags, const std::string& cap) {
  // ATen's DispatchStub.cpp: the variable's exact values win; else AVX512 where AVX512 VL, BW,
  // DQ and FMA are there, else AVX2 with FMA.
  if (cap == "avx512") return "AVX512";
  if (cap == "avx2") return "AVX2";
  if (cap == "default") return "DEFAULT";
  if (has(flags, "avx512_vl") && has(flags, "avx512_bw") && has(flags, "avx512_dq") && has(flags, "fma3"))
    return "AVX512";
  if (has(flags, "avx2") && has(flags, "fma3")) return "AVX2";
  return "DEFAULT";
}

CpuInfo describe_cpu(const CpuFacts& f) {
  CpuInfo c;
  c.model = f.model.empty() ? "CPU" : f.model;
  c.arch = f.arch;
  c.physical_cores = f.physical_cores;
  c.logical_cores = f.logical_cores;
  if (!f.aten_cap.empty()) c.caps.push_back("ATEN_CPU_CAPABILITY=" + f.aten_cap);
  if (!f.onednn_cap.empty()) c.caps.push_back("ONEDNN_MAX_CPU_ISA=" + f.onednn_cap);
  const bool on_x86 = x86(f.arch);
  c.aten_isa = !f.aten_isa.empty() ? f.aten_isa : on_x86 ? aten_isa(f.flags, f.aten_cap) : "DEFAULT";
  if (on_x86) {
    c.onednn_isa = onednn_isa(f.flags, f.onednn_cap);
    const unsigned m = mask_of(c.onednn_isa);
    // oneDNN's own answer, where known, has the last word: no bf16 kernels, no native bf16.
    const bool onednn_bf16 = f.onednn_bf16.value_or(true);
    c.bf16_native = (m & 0x80) != 0 && onednn_bf16;
    c.fp16_native = (m & 0x100) != 0;
    c.amx = (m & 0x800) != 0;
    c.bf16_flag = c.amx ? "amx_bf16" : c.bf16_native ? "avx512_bf16" : "";
    const std::string hw = onednn_isa(f.flags, "");
    if (!c.bf16_native && (mask_of(hw) & 0x80) != 0 && !f.onednn_cap.empty())
      c.bf16_capped = "ONEDNN_MAX_CPU_ISA=" + f.onednn_cap;
  } else {
    c.bf16_native = f.onednn_bf16.value_or(has(f.flags, "bf16"));
    c.fp16_native = has(f.flags, "fp16");
    c.bf16_flag = c.bf16_native ? "bf16" : "";
  }
  return c;
}

CpuFacts read_cpu_facts() {
  CpuFacts f;
#if defined(__x86_64__) || defined(__i386__)
  f.arch = "x86_64";
#elif defined(__aarch64__)
  f.arch = "aarch64";
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string physical;
  bool flags_read = false;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "processor")
      ++f.logical_cores;
    else if (key == "model name" && f.model.empty())
      f.model = value;
    else if (key == "physical id")
      physical = value;
    else if (key == "core id")
      cores.insert({physical, value});
    else if ((key == "flags" || key == "Features") && !flags_read) {
      flags_read = true;  // the first CPU's flags speak for all
      std::istringstream words(value);
      std::string w;
      while (words >> w) {
        auto it = proc_flag_names().find(w);
        f.flags[it == proc_flag_names().end() ? w : it->second] = true;
      }
    }
  }
  f.physical_cores = static_cast<int64_t>(cores.size());
  if (const char* v = std::getenv("ATEN_CPU_CAPABILITY")) f.aten_cap = v;
  if (const char* v = std::getenv("ONEDNN_MAX_CPU_ISA"))
    f.onednn_cap = v;
  else if (const char* d = std::getenv("DNNL_MAX_CPU_ISA"))
    f.onednn_cap = d;
  return f;
}

std::string summary(const CpuInfo& c) {
  std::string s = "ATen " + c.aten_isa;
  if (!c.onednn_isa.empty()) s += ", oneDNN " + c.onednn_isa;
  if (!c.caps.empty()) {
    s += " (";
    for (size_t i = 0; i < c.caps.size(); ++i) s += (i ? ", " : "") + c.caps[i];
    s += ")";
  }
  s += c.bf16_native ? ", bf16 native (" + c.bf16_flag + ")" : ", bf16 not native";
  if (!c.bf16_native && !c.bf16_capped.empty()) s += " (capped)";
  if (c.fp16_native) s += ", fp16 native";
  if (c.amx) s += ", AMX";
  if (c.physical_cores > 0) s += ", " + std::to_string(c.physical_cores) + " cores";
  if (c.logical_cores > 0) s += ", " + std::to_string(c.logical_cores) + " threads";
  return s;
}

std::string bf16_reason(const CpuInfo& c) {
  if (c.bf16_native) return "this CPU has " + c.bf16_flag;
  if (!c.bf16_capped.empty()) return c.bf16_capped + " keeps oneDNN from this CPU's avx512_bf16";
  return "this CPU has no native bf16 arithmetic (no AVX512-BF16 or AMX)";
}

nlohmann::ordered_json cpu_json(const CpuInfo& c) {
  nlohmann::ordered_json j;
  j["model"] = c.model;
  j["arch"] = c.arch;
  j["aten_isa"] = c.aten_isa;
  j["onednn_isa"] =
      c.onednn_isa.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.onednn_isa);
  j["bf16_native"] = c.bf16_native;
  j["fp16_native"] = c.fp16_native;
  j["amx"] = c.amx;
  j["bf16_flag"] =
      c.bf16_flag.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.bf16_flag);
  j["bf16_capped"] =
      c.bf16_capped.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.bf16_capped);
  j["physical_cores"] =
      c.physical_cores > 0 ? nlohmann::ordered_json(c.physical_cores) : nlohmann::ordered_json(nullptr);
  j["logical_cores"] =
      c.logical_cores > 0 ? nlohmann::ordered_json(c.logical_cores) : nlohmann::ordered_json(nullptr);
  j["caps"] = c.caps;
  return j;
}

}  // namespace ptune::system
