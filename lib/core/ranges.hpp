#pragma once
/// The names of the ranges ptune marks in its profiler traces (runtime::compat::UserScope: USER_SCOPE
/// RecordFunctions, "cat": "user_annotation"), in one place. They follow what torch.profiler
/// writes for the same work in a Python training loop, so that tools which know PyTorch's
/// names (HTA, TensorBoard's profiler plugin, `ptune analyze`) read ptune's traces as they read
/// Python's. A range is recorded only while a profiler records; otherwise it costs a check.

#include <string>

namespace ptune::ranges {

/// One profiled step (bench::profile()), from asking for its batch to the end of its update, as
/// torch.profiler.profile().step() marks it: "ProfilerStep#<n>", n counting the pipeline's
/// steps from 0 (its warm-up steps included, as under schedule(wait=0, warmup=W, active=P)).
inline std::string profiler_step(long long n) { return "ProfilerStep#" + std::to_string(n); }

/// Waiting for the loader's next batch (data::Loader::next), named as PyTorch's DataLoader
/// iterators name their __next__, so tools count it as data loading: the single-process
/// iterator's name when batches are built in the calling thread (loader.num_workers 0), the
/// multi-process one's with workers.
inline constexpr const char* kLoaderNext = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";
inline constexpr const char* kLoaderNextWorkers =
    "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";

/// The host-to-device copy of a batch (queued on the copy stream, or copied in place); absent
/// where the batch is already on its device (CPU rows).
inline constexpr const char* kH2DCopy = "ptune::h2d_copy";
/// uint8 batches converted to float and normalized (and resized: loader.gpu_resize) on the device.
inline constexpr const char* kToFloatNormalize = "ptune::to_float_normalize";
/// The forward pass and the loss (under autocast when optim.amp is on).
inline constexpr const char* kForward = "ptune::forward";
/// The backward pass (with the gradient all-reduces it starts in a data-parallel run).
inline constexpr const char* kBackward = "ptune::backward";
/// Data parallel: waiting for the last gradient all-reduces before the update.
inline constexpr const char* kGradSync = "ptune::grad_sync";
/// optim.cuda_graphs: one replay of the captured step (forward, backward and update together).
inline constexpr const char* kGraphReplay = "ptune::cuda_graph_replay";

/// The optimizer's update and zero_grad, named as torch.optim's profiling hooks name them:
/// "Optimizer.step#SGD.step", "Optimizer.zero_grad#AdamW.zero_grad". `optimizer` is the
/// torch.optim class name ("SGD", "AdamW").
inline std::string optimizer_step(const std::string& optimizer) {
  return "Optimizer.step#" + optimizer + ".step";
}
inline std::string optimizer_zero_grad(const std::string& optimizer) {
  return "Optimizer.zero_grad#" + optimizer + ".zero_grad";
}

}  // namespace ptune::ranges
