#include "analyze/events.hpp"

#include <algorithm>

#include "analyze/kernel_precision.hpp"

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

namespace {

bool runtime_sync_name(std::string_view n) {
  return n == "cudaStreamSynchronize" || n == "cudaDeviceSynchronize" || n == "cudaEventSynchronize" ||
         n == "cudaMemcpy" || n == "cuStreamSynchronize" || n == "cuCtxSynchronize";
}

bool loader_name(std::string_view n) {
  return (text::starts_with(n, "enumerate(DataLoader)#") && n.size() >= 9 &&
          n.compare(n.size() - 9, 9, ".__next__") == 0) ||
         text::starts_with(n, "enumerate(DataPipe)#");
}

bool host_comm_name(std::string_view n) {
  if (text::starts_with(n, "nccl:") || text::starts_with(n, "gloo:") || n == "record_param_comms")
    return true;
  if (!text::starts_with(n, "c10d::")) return false;
  for (const char* p :
       {"allreduce", "allgather", "all_gather", "broadcast", "reduce_scatter", "alltoall", "barrier"})
    if (text::contains(n, p)) return true;
  return false;
}

}  // namespace

uint32_t name_traits(std::string_view n) {
  using namespace trait;
  const std::string low = text::lower(n);
  uint32_t t = 0;
  const auto set = [&](bool on, uint32_t bit) { t |= on ? bit : 0; };
  set(text::starts_with(n, "ProfilerStep#"), kStep);
  set(loader_name(n), kLoader);
  set(runtime_sync_name(n), kRuntimeSync);
  set(n == "aten::_local_scalar_dense" || n == "aten::is_nonzero", kItem);
  set(text::starts_with(low, "nccl"), kNccl);
  set(host_comm_name(n), kHostComm);
  set(is_tensor_core_kernel(n), kTensorCore);
  set(is_half_kernel(n), kHalf);
  set(text::contains(low, "nchwtonhwc") || text::contains(low, "nhwctonchw"), kLayout);
  set(text::starts_with(n, "cudaMemcpy"), kCudaMemcpy);
  set(text::contains(n, "DtoH"), kDtoH);
  set(text::starts_with(n, "nccl") && text::contains(n, "Kernel"), kHtaComm);
  set(text::contains(n, "Memcpy") || text::contains(n, "Memset") || text::contains(n, "Sync"),
      kHtaNotCompute);
  set(n == "aten::zero_" || n == "aten::fill_", kZeroFill);
  set(text::starts_with(n, "Optimizer.zero_grad#"), kZeroGrad);
  set(n == "cudaGraphLaunch", kGraphLaunch);
  const auto& all = precisions();
  const auto p = std::find(all.begin(), all.end(), kernel_precision(n));
  return t | static_cast<uint32_t>(p - all.begin()) << kPrecisionShift;
}

const std::vector<std::string>& precisions() {
  static const std::vector<std::string> all = {"", "bf16", "fp16", "fp32", "fp8", "int8", "tf32"};
  return all;
}

size_t precision_index(const Event& e) {
  return std::min<size_t>((e.traits >> trait::kPrecisionShift) & 7, precisions().size() - 1);
}

bool is_host(const Event& e) { return e.kind == Kind::kCpuOp || e.kind == Kind::kAnnotation; }
bool is_step(const Event& e) { return is_host(e) && (e.traits & trait::kStep); }
bool is_dataloader(const Event& e) { return is_host(e) && (e.traits & trait::kLoader); }
bool is_runtime_sync(const Event& e) { return e.kind == Kind::kRuntime && (e.traits & trait::kRuntimeSync); }
bool is_item(const Event& e) { return e.kind == Kind::kCpuOp && (e.traits & trait::kItem); }

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
  if (e.kind == Kind::kKernel) return e.traits & trait::kNccl;
  return is_host(e) && (e.traits & trait::kHostComm);
}

}  // namespace ptune::analyze
