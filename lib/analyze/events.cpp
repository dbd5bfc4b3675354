#include "analyze/events.hpp"

namespace ptune::analyze {

namespace text {

std::string lower(std::string_view v) {
  std::string s(v);
  for (auto& c : s) c = ascii_lower(c);
  return s;
}

bool starts_with(std::string_view s, const char* p) { return s.rfind(p, 0) == 0; }
bool contains(std::string_view s, const char* p) { return s.find(p) != std::string_view::npos; }

}  // namespace text

bool is_host(const Event& e) { return e.kind == Kind::kCpuOp || e.kind == Kind::kAnnotation; }
bool is_step(const Event& e) { return is_host(e) && text::starts_with(e.name, "ProfilerStep#"); }
bool is_dataloader(const Event& e) {
  if (!is_host(e)) return false;
  return (text::starts_with(e.name, "enumerate(DataLoader)#") && e.name.size() >= 9 &&
          e.name.compare(e.name.size() - 9, 9, ".__next__") == 0) ||
         text::starts_with(e.name, "enumerate(DataPipe)#");
}
bool is_runtime_sync(const Event& e) {
  return e.kind == Kind::kRuntime &&
         (e.name == "cudaStreamSynchronize" || e.name == "cudaDeviceSynchronize" ||
          e.name == "cudaEventSynchronize" || e.name == "cudaMemcpy" || e.name == "cuStreamSynchronize" ||
          e.name == "cuCtxSynchronize");
}
bool is_item(const Event& e) {
  return e.kind == Kind::kCpuOp && (e.name == "aten::_local_scalar_dense" || e.name == "aten::is_nonzero");
}

bool is_device(const Event& e) {
  return e.kind == Kind::kKernel || e.kind == Kind::kMemcpy || e.kind == Kind::kMemset;
}

bool is_tensor_core_kernel(std::string_view name) {
  const std::string n = text::lower(name);
  for (const char* p : {"h884", "s884", "h1688", "s1688", "h16816", "s16816", "i8816", "hmma", "xmma",
                        "tensorop", "wgmma", "gmma_", "tf32", "16816gemm", "1688gemm", "884gemm"})
    if (text::contains(n, p)) return true;
  return false;
}

bool is_half_kernel(std::string_view name) {
  const std::string n = text::lower(name);
  for (const char* p : {"f16", "fp16", "bf16", "half", "h884", "h1688", "h16816", "hmma", "bfloat16"})
    if (text::contains(n, p)) return true;
  return false;
}

bool is_communication(const Event& e) {
  if (e.kind == Kind::kKernel) {
    const std::string_view n = e.name;
    return n.size() >= 4 && text::ascii_lower(n[0]) == 'n' && text::ascii_lower(n[1]) == 'c' &&
           text::ascii_lower(n[2]) == 'c' && text::ascii_lower(n[3]) == 'l';
  }
  if (!is_host(e)) return false;
  if (text::starts_with(e.name, "nccl:") || text::starts_with(e.name, "gloo:") ||
      e.name == "record_param_comms")
    return true;
  if (!text::starts_with(e.name, "c10d::")) return false;
  for (const char* p :
       {"allreduce", "allgather", "all_gather", "broadcast", "reduce_scatter", "alltoall", "barrier"})
    if (text::contains(e.name, p)) return true;
  return false;
}

}  // namespace ptune::analyze
