#pragma once
/// Where a traced step's time goes, as the PyTorch profiler's TensorBoard plugin defined its
/// overview: each instant of a step is given to the first of kernel > memcpy > memset >
/// communication > runtime > data loader > CPU execution that covers it, and what none covers is
/// "other". Plus GPU utilization, Tensor Cores, the largest kernels and operators, host-to-device
/// copies, host syncs and data-parallel communication.

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// The categories of the split, in priority order.
enum Category {
  kKernel,
  kMemcpy,
  kMemset,
  kCommunication,
  kRuntime,
  kDataLoader,
  kCpuExec,
  kOther,
  kCategories
};

/// The JSON/table name of a category: "kernel", "memcpy", "memset", "communication", "runtime",
/// "dataloader", "cpu_exec", "other". Throws nothing.
const char* category_name(int c);

/// One step (or the whole trace as one window); times in microseconds.
struct StepBreakdown {
  std::string name;                      // "ProfilerStep#3", or "whole trace"
  double start = 0, end = 0;             // the window (host span extended to the device work it launched)
  double host_start = 0, host_end = 0;   // the host's ProfilerStep#N range (without steps: the window):
                                         // host calls (syncs) belong to the step they start in
  std::array<double, kCategories> us{};  // the split; sums to end - start
  double kernel_us = 0;                  // merged kernel time (all kernels, several streams once)
  double comm_us = 0;                    // merged communication time
  double comm_overlap_us = 0;  // communication overlapped with compute (kernels, or host ops on the CPU)
  double sync_us = 0;          // merged time the host waited in syncs
  double sync_idle_us = 0;     // GPU idle that the syncs caused: the device idle from a sync's
                               // start until the first device work after it returns
  double gpu_busy_us = 0;      // merged device time: kernels, copies and memsets
  double compute_us = 0;       // merged computation kernels (not communication)
  std::optional<double> peak_allocated_mb;  // device memory samples in the step (profile_memory=True)
  std::optional<double> peak_reserved_mb;
  int64_t syncs = 0;        // sync calls (runtime syncs and .item()-style reads that wait)
  double zero_grad_us = 0;  // aten::zero_ / aten::fill_ under Optimizer.zero_grad
  double ms() const { return (end - start) / 1000.0; }
};

/// Time per name (kernels, operators, syncs).
struct NameTime {
  std::string name;
  int64_t count = 0;
  double total_us = 0;  // inclusive
  double self_us = 0;   // operators: without their child operators; others: = total
};

/// Memory allocated per operator (profile_memory=True).
struct NameBytes {
  std::string name;
  int64_t count = 0;  // allocations
  double bytes = 0;   // allocated, summed (frees not subtracted)
};

/// Where host syncs came from: the call in the training code, or the thread and the steps.
struct SyncOrigin {
  std::string name;  // the sync, as in Breakdown::syncs ("aten::item", "cudaStreamSynchronize")
  std::string
      where;  // the Python frame that made the call (with_stack=True), e.g.
              // "`train.py(42): train_step`", or "`lib/x.py(9): f`, called from `train.py(42): run`";
              // without a Python stack its thread and steps: "the main thread (4242) in ProfilerStep#1"
  int64_t count = 0;  // calls in the steps
};

/// Host-to-device copies in the steps.
struct CopyStats {
  int64_t count = 0;
  int64_t pinned = 0;    // "(Pinned -> Device)"
  int64_t pageable = 0;  // "(Pageable -> Device)"
  double us = 0;         // summed copy time on the device
  int64_t bytes = 0;     // when the trace gives them; at most INT64_MAX (the sum saturates)
};

/// A trace (or several files of one process) taken apart.
/// A device's highest allocated memory over the steps (profile_memory=True's samples).
struct MemoryPeak {
  int64_t device = 0;  // a GPU's index; -1 the host (CPU)
  double allocated_mb = 0;
  std::optional<double> reserved_mb;  // the caching allocator's reserve at that moment
  std::string op;                     // the operator the code called that allocated it; "(no operator)"
  std::string step;                   // the step it fell in
  double at_ms = 0;                   // from that step's start
};

struct Breakdown {
  std::vector<std::string> files;
  std::string writer = "pytorch";   // "pytorch" | "ptune"
  std::optional<std::string> amp;   // ptune's traces: the row's optim.amp
  std::optional<bool> bf16_native;  // ptune's traces: whether the CPU that recorded it had native bf16
  std::optional<int64_t> rank, world_size;
  bool has_gpu = false;
  bool from_steps = true;             // false: no ProfilerStep#N spans; one window
  double before_first_gpu_us = 0;     // without steps: the time left out before the first device work
  std::vector<NameTime> stalls;       // without steps: host calls of 100 ms or more with the device idle
                                      // (one-time set-up: CUDA/cuDNN initialization, lazy loading)
  std::optional<int64_t> batch_size;  // from the input shapes of the first step's first batched operator
  std::optional<int64_t> schema_version;
  bool cuda_graphs = false;  // kernels launched by cudaGraphLaunch
  int64_t streams = 0;       // device streams with kernels
  int64_t processes = 1;     // host processes with operators in the file(s)
  int64_t host_pid = 0;      // the profiled process's pid (its files' host_pid)
  /// "rank 3", or "process 4242" for a trace without distributedInfo.
  std::string who() const {
    return rank ? "rank " + std::to_string(*rank) : "process " + std::to_string(host_pid);
  }
  int64_t skipped_events = 0;  // events its files' reader left out (Trace::skipped)
  // ProfilerStep#N ranges with nothing in them (no operator, loader range, kernel, copy or sync):
  // a profiler cycle's step cut short. Left out of `steps` where other steps hold work; where
  // none does, all are kept and `steps` holds only such.
  std::vector<std::string> empty_steps;
  bool only_empty_steps = false;  // every step is such a step: nothing to analyze
  // The device time of the steps as HTA's temporal breakdown defines it: over the span from the
  // first device work (kernel, copy, memset) in the steps to the last one's end.
  double gpu_span_us = 0;           // that span
  double gpu_busy_total_us = 0;     // merged device work in it
  double gpu_compute_total_us = 0;  // merged computation kernels in it (not communication, not copies)
  /// The same figures over the device work HTA keeps (TraceAnalysis with
  /// include_last_profiler_step=True): the work launched before the end of the last
  /// ProfilerStep (all of it with fewer than two steps), whatever step it belongs to.
  struct HtaView {
    double span_us = 0, busy_us = 0, compute_us = 0, comm_us = 0, overlap_us = 0;
    std::vector<NameTime> kernels;  // by total time, largest first (kernels, copies, memsets)
  } hta;
  std::vector<StepBreakdown> steps;
  std::vector<std::string> devices;
  std::optional<double> tensor_core_pct;  // kernel time on Tensor Cores (name heuristic), % ; GPU only
  std::optional<double> half_pct;         // kernel time in fp16/bf16 kernels (name heuristic), % ; GPU only
  double layout_pct = 0;                  // kernel time in NCHW<->NHWC conversions, % of kernel time
  std::vector<NameTime> kernels;          // by total time, largest first
  std::vector<NameTime> all_kernels;      // every kernel name in the steps, by total time (for comparisons)
  std::vector<NameTime> all_operators;    // every host operator, by self time (for comparisons)
  std::vector<NameTime> copies;           // every copy and memset kind ("Memcpy HtoD (Pageable -> Device)")
  std::vector<NameTime> operators;        // host operators by self time, largest first
  std::vector<NameTime> dataloader;       // DataLoader ranges by time, largest first
  std::vector<NameTime> syncs;  // host syncs by name: runtime waits for the device, and .item()-style
                                // reads that wait for it (a device-to-host copy or a sync inside
                                // them); never on a CPU-only trace
  std::vector<SyncOrigin> sync_origins;  // where those came from, most calls first
  bool under_load = false;               // ptune's traces: recorded under competing load ("ptune".load)
  std::string load_summary;              // and what the load was, one line
  /// profile_memory=True: the operators that allocated most in the steps, largest first: each
  /// allocation of the device (the GPU's when the trace has one, else the host's) charged to the
  /// outermost operator running on the allocating thread (the call the training code made,
  /// aten::conv2d rather than the aten::empty inside it); "(no operator)" for the rest.
  std::vector<NameBytes> allocators;
  bool allocators_gpu = false;           // whose allocations those are
  std::vector<MemoryPeak> memory_peaks;  // one per device, by device; empty without device samples
  /// Allocated memory over the step of the highest peak, on its device: (ms from the step's
  /// start, MB), at most 400 points (the peak among them).
  std::vector<std::pair<double, double>> memory_timeline;
  CopyStats h2d;

  /// The mean over steps of a step's figures (name "mean").
  StepBreakdown mean() const;

  /// `allocators` per step (over the steps; a trace without steps counts as one).
  struct AllocationPerStep {
    std::string name;
    double count = 0;  // allocations
    double mb = 0;     // MiB allocated
  };
  std::vector<AllocationPerStep> allocations_per_step() const;
};

/// Takes apart the traces of one process (several files: several profiler cycles; their steps
/// are concatenated), a Trace at a time: each file whole, or its parts (Trace::part, from
/// analyze/trace_parts.hpp) in time order, the files one after the other. Throws nothing.
class BreakdownBuilder {
 public:
  /// `allocators_gpu`: the allocations listed are the device's (a file has device memory
  /// samples), else the host's: one kind for all the files, as the list has one heading.
  explicit BreakdownBuilder(bool allocators_gpu);
  ~BreakdownBuilder();
  BreakdownBuilder(const BreakdownBuilder&) = delete;
  BreakdownBuilder& operator=(const BreakdownBuilder&) = delete;

  /// Adds `t`. Returns the time [lo, hi) it answered for: its steps, from the first one's start
  /// to the next part's first step (a file's last part: to its last step's end).
  std::pair<double, double> add(const Trace& t);
  /// The steps so far, in the order added.
  const std::vector<StepBreakdown>& steps() const;
  /// The breakdown, after the last add(); the builder is spent.
  Breakdown finish();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// Kept per list in a Breakdown (kernels, operators, ...).
inline constexpr size_t kTopN = 5;

}  // namespace ptune::analyze
