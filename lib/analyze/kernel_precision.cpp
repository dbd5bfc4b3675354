#include "analyze/kernel_precision.hpp"

#include <algorithm>

#include "analyze/events.hpp"

namespace ptune::analyze {
namespace {

bool any_of(const std::string& s, std::initializer_list<const char*> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](const char* p) { return s.find(p) != std::string::npos; });
}

}  // namespace

std::string kernel_precision(std::string_view name) {
  const std::string n = text::lower(name);
  // The input types first: a name can carry both (`ampere_fp16_s16816gemm_fp16`: fp16 inputs,
  // fp32 accumulation on Tensor Cores; `..._tf32f32_...`: TF32 inputs, fp32 output).
  if (any_of(n, {"e4m3", "e5m2", "fp8"})) return "fp8";
  if (any_of(n, {"int8", "imma", "i8816", "i16832", "s8s8"})) return "int8";
  if (any_of(n, {"bf16", "bfloat16"})) return "bf16";
  if (any_of(n, {"fp16", "f16f16", "h884", "h1688", "h16816", "hgemm", "hmma", "half"})) return "fp16";
  if (any_of(n, {"tf32", "s1688", "s16816", "1688gemm", "16816gemm"})) return "tf32";
  if (any_of(n, {"sgemm", "scudnn", "f32f32", "fp32", "simt_s"})) return "fp32";
  return "";
}

}  // namespace ptune::analyze
