#include "bench/profile.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <string>

#include <torch/torch.h>

#include "bench/bench.hpp"
#include "bench/pipeline.hpp"
#include "bench/trace.hpp"
#include "core/files.hpp"
#include "core/ranges.hpp"
#include "dist/group.hpp"
#include "runtime/compat.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "system/load.hpp"
#include "system/rendezvous.hpp"

namespace ptune::bench {

std::string trace_identity_json(const config::ExperimentConfig& cfg, const TraceTarget& target,
                                const std::string& device, const system::LoadReport* load) {
  nlohmann::ordered_json j;
  j["version"] = kVersion;
  j["experiment"] = cfg.name;
  j["row"] = target.row;
  j["changes"] = target.changes;
  j["mode"] = config::name(cfg.measure.mode);
  j["device"] = device;
  j["batch_size"] = cfg.loader.batch_size;
  j["amp"] = config::name(cfg.optim.amp);  // `ptune analyze` reads it: a row in fp32 is told to try optim.amp
  j["bf16_native"] = runtime::cpu_info().bf16_native;  // ... on a CPU, only where bf16 is native
  j["profile_steps"] = cfg.measure.profile_steps;
  j["warmup_steps"] = warmup_steps(cfg, nullptr);
  // `ptune analyze` leaves a comparison with a trace recorded under load undecided.
  if (load) j["load"] = {{"under_load", load->under_load}, {"summary", load->summary()}};
  return j.dump();
}

namespace {

/// Removes the traces an earlier run left in `folder`: files trace_file_name() names, and the
/// trace.json older versions wrote. Returns nothing; a file that cannot be removed stays.
void remove_old_traces(const std::string& folder) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && (is_trace_file_name(name) || name == "trace.json"))
      std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

ProfileResult profile(const config::ExperimentConfig& cfg, double timed_ms_per_step,
                      const TraceTarget& target, const measure::Progress& progress) {
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  if (device.is_cuda() && cfg.optim.cuda_graphs) prepare_profiler_for_cuda_graphs();  // before the capture
  Pipeline pipeline(cfg, device, group);
  const int64_t warmup = warmup_steps(cfg, nullptr);
  warm_up(pipeline, warmup, progress, "profile warmup");
  runtime::synchronize(device);

  // Every rank writes its own trace into the row's folder, which holds this run's only: the
  // first rank of each machine clears it (a folder on a shared file system too, before any
  // rank writes). A folder that cannot be written fails in finish(), on every rank alike,
  // after the recorded steps: a rank that left now would leave the others in an all-reduce.
  const bool write = cfg.measure.profile && !target.folder.empty();
  if (write) {
    if (system::local_rank() == 0) {
      try {
        files::prepare_folder(target.folder, "measure.out_dir");
        remove_old_traces(target.folder);
      } catch (const std::exception&) {
      }
    }
    group->barrier();
  }
  const int64_t steps = cfg.measure.profile_steps;
  TraceRecorder recorder(device.is_cuda());
  if (group->distributed())
    recorder.add_metadata_json("distributedInfo",
                               distributed_info_json(group->backend_name(), group->rank(), group->size()));
  const int gpu = device.is_cuda() ? device.index() : -1;
  system::LoadSampler load;
  load.start(gpu, gpu >= 0 ? runtime::cuda::device_uuid(gpu) : "");
  Spans ignored;
  for (int64_t i = 0; i < steps; ++i) {
    {
      // As torch.profiler's step(): the span covers the wait for the batch, the copy and the
      // update (one replay with CUDA graphs), on the host.
      runtime::compat::UserScope span(ranges::profiler_step(warmup + i));
      pipeline.step(ignored);
    }
    if (progress) progress("profile", i + 1, steps);
  }
  runtime::synchronize(device);
  const system::LoadReport seen = agreed_load(load, gpu, cfg);
  recorder.add_metadata_json("ptune", trace_identity_json(cfg, target, device.str(), &seen));
  const std::string path =
      write ? (std::filesystem::path(target.folder) / trace_file_name()).string() : std::string();
  const TraceSummary t = recorder.finish(path);
  ProfileResult r;
  if (device.is_cuda() && timed_ms_per_step > 0)
    r.gpu_busy_pct = std::min(100.0, 100.0 * t.kernel_ms / static_cast<double>(steps) / timed_ms_per_step);
  r.trace_path = path;
  return r;
}

}  // namespace ptune::bench
