#pragma once
/// The one place where differences between LibTorch versions are absorbed. Everything else in
/// ptune calls these functions instead of the version-specific ATen/c10 API.

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <dlfcn.h>

#include <ATen/Version.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cpu/Utils.h>
#include <ATen/record_function.h>
#include <torch/version.h>

namespace torch::autograd::profiler {
// Declared in torch/csrc/profiler/kineto_shim.h (2.11; profiler_kineto.h in older 2.x), a
// header that pulls in Kineto's; exported by libtorch_cpu in every 2.x (Python's
// torch.autograd._add_metadata_json calls it).
TORCH_API void addMetadataJson(const std::string& key, const std::string& value);
}  // namespace torch::autograd::profiler

namespace ptune::runtime::compat {

/// Enables or disables autocast for a device type with the given lower-precision dtype.
inline void set_autocast(c10::DeviceType device, bool enabled, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

/// Drops autocast's cache of casted weights (call after each step while autocast is on).
inline void clear_autocast_cache() { at::autocast::clear_cache(); }

/// A named range in profiler traces, from construction to destruction, on this thread: what
/// Python's `with torch.profiler.record_function(name):` records (a USER_SCOPE RecordFunction,
/// "cat": "user_annotation" in the Chrome trace). Without a profiler recording it costs one
/// check of the thread's RecordFunction callbacks (no allocation, the name is not copied).
class UserScope {
 public:
  explicit UserScope(std::string_view name) : fn_(at::RecordScope::USER_SCOPE) {
    if (fn_.isActive()) fn_.before(name);
  }
  UserScope(const UserScope&) = delete;
  UserScope& operator=(const UserScope&) = delete;
  /// True when a profiler records this range.
  bool active() const { return fn_.isActive(); }

 private:
  at::RecordFunction fn_;  // its destructor ends the range
};

/// Adds a top-level key to the Chrome trace of the profiler recording now, `json` its value as
/// JSON text (torch.profiler's add_metadata_json: "distributedInfo" is written so). Call it
/// while the profiler runs; Kineto logs a warning and drops it otherwise.
inline void add_trace_metadata_json(const std::string& key, const std::string& json) {
  torch::autograd::profiler::addMetadataJson(key, json);
}

/// Stops the thread Kineto starts when the profiler is first prepared: its ConfigLoader polls
/// for on-demand trace requests from a profiling daemon, which ptune never takes. Left running,
/// it races the process's exit: the exit handlers destroy Kineto's config statics while the
/// thread, when it was only just scheduled (a short profiled run on a busy machine), still reads
/// them, and the process aborts with a corrupted heap after its work is done. Kineto exports the
/// loader's functions but declares no API for them, so they are looked up by their symbol names
/// (a reference return and a non-virtual member call are plain pointers in the Itanium C++ ABI);
/// where a LibTorch build lacks them, nothing is done. Stopping a stopped thread is a no-op; the
/// profiler's own recording never uses the thread. Call it once the thread has had time to start
/// (at the end of a recording, not right after the profiler is prepared): Kineto's stop can miss
/// a thread still in its first pass, and then waits for its next poll, 5 s later.
inline void stop_profiler_config_thread() {
  using Instance = void* (*)();
  using StopThread = void (*)(void*);
  static const auto instance =
      reinterpret_cast<Instance>(::dlsym(RTLD_DEFAULT, "_ZN9libkineto12ConfigLoader8instanceEv"));
  static const auto stop =
      reinterpret_cast<StopThread>(::dlsym(RTLD_DEFAULT, "_ZN9libkineto12ConfigLoader10stopThreadEv"));
  if (instance != nullptr && stop != nullptr) stop(instance());
}

/// The CPU as LibTorch's cpuinfo sees it (no cap applied): boolean features by cpuinfo's names
/// ("avx2", "avx512_bf16", "amx_tile", ...) in `flags`; "num_physical_cores",
/// "num_logical_cores" in `counts`; "cpu_name", "architecture" in `names`. Empty before
/// LibTorch 2.11, which added at::cpu::get_cpu_capabilities. Throws nothing.
struct CpuCapabilities {
  std::map<std::string, bool> flags;
  std::map<std::string, int64_t> counts;
  std::map<std::string, std::string> names;
};
inline CpuCapabilities cpu_capabilities() {
  CpuCapabilities c;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  try {
    for (const auto& [k, v] : at::cpu::get_cpu_capabilities()) {
      if (v.isBool())
        c.flags[k] = v.toBool();
      else if (v.isInt())
        c.counts[k] = v.toInt();
      else if (v.isString())
        c.names[k] = v.toStringRef();
    }
  } catch (const std::exception&) {
  }
#endif
  return c;
}

/// The instruction set ATen's kernels dispatch to, as torch.backends.cpu.get_cpu_capability()
/// says ("AVX512", "AVX2", "DEFAULT"; ATEN_CPU_CAPABILITY honoured). Throws nothing.
inline std::string aten_cpu_capability() { return at::get_cpu_capability(); }

/// oneDNN's own answer to whether it has bf16 kernels here (native or emulated, its
/// ONEDNN_MAX_CPU_ISA honoured): torch.ops.mkldnn._is_mkldnn_bf16_supported(). nullopt where the
/// operator is not registered (a LibTorch without oneDNN). Throws nothing.
inline std::optional<bool> onednn_bf16_supported() {
  try {
    auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
    if (!op) return std::nullopt;
    return op->typed<bool()>().call();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ptune::runtime::compat
