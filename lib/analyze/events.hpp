#pragma once
/// What a trace event is, by its kind and name: host ops and steps, the data loader, the host's
/// waits for the device (Waits), device work, and the kernel-name classifiers (Tensor Cores,
/// fp16/bf16, communication).

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// Text tests on event and kernel names.
namespace text {
/// `c` in lower case (ASCII; other bytes as they are).
inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
/// `v` in lower case (ASCII).
std::string lower(std::string_view v);
bool starts_with(std::string_view s, const char* p);
bool contains(std::string_view s, const char* p);
}  // namespace text

/// What an event's name says (Event::traits), found once per distinct name as a trace is read.
namespace trait {
inline constexpr uint32_t kStep = 1u << 0;         // "ProfilerStep#N"
inline constexpr uint32_t kLoader = 1u << 1;       // a DataLoader's or DataPipe's __next__
inline constexpr uint32_t kRuntimeSync = 1u << 2;  // cudaStreamSynchronize, cudaMemcpy, ...
inline constexpr uint32_t kItem = 1u << 3;         // aten::_local_scalar_dense, aten::is_nonzero
inline constexpr uint32_t kNccl = 1u << 4;         // starts with "nccl" in any case
inline constexpr uint32_t kHostComm = 1u << 5;     // nccl:*, gloo:*, record_param_comms, c10d:: collectives
inline constexpr uint32_t kTensorCore = 1u << 6;   // is_tensor_core_kernel
inline constexpr uint32_t kHalf = 1u << 7;         // is_half_kernel
inline constexpr uint32_t kLayout = 1u << 8;       // an NCHW<->NHWC conversion kernel
inline constexpr uint32_t kCudaMemcpy = 1u << 9;   // cudaMemcpy*
inline constexpr uint32_t kDtoH = 1u << 10;        // "DtoH" in the name
inline constexpr uint32_t kHtaComm = 1u << 11;     // "nccl...Kernel": HTA's communication kernels
inline constexpr uint32_t kHtaNotCompute = 1u << 12;  // "Memcpy", "Memset" or "Sync": not HTA's compute
inline constexpr uint32_t kZeroFill = 1u << 13;       // aten::zero_, aten::fill_
inline constexpr uint32_t kZeroGrad = 1u << 14;       // "Optimizer.zero_grad#N"
inline constexpr uint32_t kGraphLaunch = 1u << 15;    // cudaGraphLaunch
inline constexpr int kPrecisionShift = 16;            // 3 bits: kernel_precision(), an index in precisions()
}  // namespace trait

/// The traits of a name (Event::traits). Throws nothing.
uint32_t name_traits(std::string_view name);

/// The precisions a kernel's name may say (kernel_precision()'s answers, "" for none), in the
/// order of their names. Throws nothing.
const std::vector<std::string>& precisions();

/// The precision a kernel's name says, from its traits: its index in precisions(). Throws nothing.
size_t precision_index(const Event& e);

/// The order in which a thread's ranges nest: by start, an enclosing range (the longer) before
/// what it encloses, ties in file order (events of one Trace, by their place in it). A strict
/// total order, so that a sort of them gives one result.
inline bool nests_before(const Event* a, const Event* b) {
  return a->ts != b->ts ? a->ts < b->ts : a->dur != b->dur ? a->dur > b->dur : a < b;
}

/// A host op or a user annotation.
bool is_host(const Event& e);
/// A ProfilerStep#N range.
bool is_step(const Event& e);
/// A DataLoader's (or DataPipe's) __next__.
bool is_dataloader(const Event& e);
/// Runtime calls that wait for the device.
bool is_runtime_sync(const Event& e);
/// The .item()-style reads: a sync only when they wait for the device (see Waits).
bool is_item(const Event& e);
/// A kernel, a copy or a memset on the device.
bool is_device(const Event& e);

/// The host's waits for the device in one trace, per thread: runtime syncs, blocking cudaMemcpy
/// and device-to-host copies. A read of a tensor's value (.item()) waits for the device only when
/// the tensor is on it: Kineto records an input's dtype and shape, not its device, so such a read
/// is a sync when one of these waits lies inside it on its thread. On the CPU (a DataLoader
/// reading its labels, torchvision's FakeData) it is not one.
class Waits {
 public:
  explicit Waits(const Trace& t) {
    for (const auto& e : t.events)
      if (e.kind == Kind::kMemcpy && e.correlation >= 0 && (e.traits & trait::kDtoH))
        dtoh_.insert(e.correlation);
    for (const auto& e : t.events)
      if (is_wait(e)) starts_[{e.pid, e.tid}].push_back(e.ts);
    for (auto& [k, v] : starts_) std::sort(v.begin(), v.end());
  }
  /// A runtime call that waits for the device.
  bool is_wait(const Event& e) const {
    return is_runtime_sync(e) ||
           (e.kind == Kind::kRuntime && (e.traits & trait::kCudaMemcpy) && dtoh_.count(e.correlation) > 0);
  }
  /// A host sync: a wait, or an .item()-style read with a wait inside it on its thread.
  bool is_sync(const Event& e) const {
    if (is_wait(e)) return true;
    if (!is_item(e)) return false;
    auto it = starts_.find({e.pid, e.tid});
    if (it == starts_.end()) return false;
    auto w = std::lower_bound(it->second.begin(), it->second.end(), e.ts);
    return w != it->second.end() && *w <= e.end();
  }

 private:
  std::set<int64_t> dtoh_;  // correlations of device-to-host copies
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> starts_;
};

/// Whether a kernel name is a Tensor Core kernel, by the patterns cuBLAS, cuDNN and CUTLASS put
/// in their names (h884, s1688, 16816, hmma, xmma, tensorop, wgmma, tf32, ...). A heuristic,
/// as the TensorBoard plugin's was. Throws nothing.
bool is_tensor_core_kernel(std::string_view name);

/// Whether a kernel name says fp16/bf16 math (f16, bf16, half, h884, h1688, hmma). A heuristic.
bool is_half_kernel(std::string_view name);

/// Whether a kernel or host op is data-parallel communication: kernels whose name starts with
/// "nccl"; host ops "nccl:*", "gloo:*", "c10d::*" collectives and "record_param_comms".
bool is_communication(const Event& e);

}  // namespace ptune::analyze
