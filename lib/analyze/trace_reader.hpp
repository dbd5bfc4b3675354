#pragma once
/// Reads profiler traces in Kineto's Chrome-trace schema — what Python's `torch.profiler`
/// (`export_chrome_trace`, `tensorboard_trace_handler`) and ptune's `--profile` write — from
/// `.json` or `.json.gz` files, or a folder of them (one per rank), into plain events.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ptune::analyze {

/// What an event is, from its "cat" (and, for ProfilerStep#N and the DataLoader, its name).
enum class Kind : uint8_t {
  kCpuOp,       // "cpu_op", "operator": a host operator (aten::...)
  kAnnotation,  // "user_annotation", "python_function", "gpu_user_annotation" is skipped
  kKernel,      // "kernel": a GPU kernel
  kMemcpy,      // "gpu_memcpy"
  kMemset,      // "gpu_memset"
  kRuntime,     // "cuda_runtime", "cuda_driver": host calls into CUDA
  kOther,       // anything else with a duration that is kept (never categorized)
};

/// One complete event ("ph": "X"); times in microseconds as the trace has them.
struct Event {
  Kind kind = Kind::kOther;
  bool python = false;    // cat "python_function": a frame of the Python stack (with_stack=True)
  uint32_t traits = 0;    // what its name says (analyze/events.hpp: name_traits), found once per name
  std::string_view name;  // interned in its Trace's name pool (one copy per distinct name)
  double ts = 0;          // start, us
  double dur = 0;         // duration, us
  int64_t pid = 0;
  int64_t tid = 0;
  int64_t correlation = -1;  // links a runtime call to the kernel/copy it launched; -1: none
  int64_t bytes = -1;        // copies and memsets: "bytes"; -1: not given
  int64_t batch = -1;        // host ops recorded with shapes: the first dimension of the first input
                             // of two or more dimensions ("Input Dims"); aten::embedding: that of
                             // its indices (its second input); -1: none
  double end() const { return ts + dur; }
};

/// A memory sample ("[memory]" instant events, recorded with profile_memory=True).
struct MemorySample {
  double ts = 0;
  int64_t allocated = -1;    // "Total Allocated", bytes; -1: not given
  int64_t reserved = -1;     // "Total Reserved", bytes; -1: not given
  int64_t device = -1;       // "Device Id"/"Device Type": -1 the host (CPU), >= 0 a GPU
  int64_t bytes = 0;         // "Bytes": > 0 an allocation, < 0 a free
  int64_t pid = 0, tid = 0;  // the thread that allocated or freed
};

/// A host operator's inputs, as torch.profiler records them with record_shapes=True (which
/// with_flops=True turns on): each input's dims, dtype and, for scalar arguments, the value.
struct OpInputs {
  std::vector<std::vector<int64_t>> dims;  // "Input Dims": one list per input ([]: a scalar, none, a list)
  std::vector<std::string_view> types;     // "Input type": "float", "c10::BFloat16", "Scalar", ... (interned)
  std::vector<std::string_view> concrete;  // "Concrete Inputs": scalar arguments as text ("[1, 1]", "1")
  double flops = -1;                       // "flops", where the trace carries it (older torch); -1: none
};

/// What a host operator computes and moves, counted from its inputs as the trace is read
/// (analyze/op_cost.hpp), or the trace's own "flops".
struct OpCost {
  const char* cls = nullptr;  // "convolution", "matmul", ... (a literal); nullptr: not counted
  double flops = 0;
  double bytes = -1;               // inputs read and outputs written; -1: unknown
  const char* precision = "fp32";  // of its first input's dtype (a literal)
  bool from_trace = false;         // `flops` is the trace's "flops" (older torch, with_flops=True)
};

/// Which part of its file a Trace holds: all of it, or for a file whose events do not fit the
/// memory allowed (analyze/trace_parts.hpp) the events of a few consecutive steps, with those of
/// the steps before and after around them. A part answers for the events that start in its own
/// time [from, to); the others are there for what its own need: the kernels its steps launched
/// that run after it, the operator or sync that encloses one of its own.
struct Part {
  double from = -1e300, to = 1e300;  // its own time, us
  bool first = true, last = true;    // the file's first part, its last
  bool own(double ts) const { return ts >= from && ts < to; }
};

/// One trace file.
struct Trace {
  std::string path;
  std::shared_ptr<std::unordered_set<std::string>> names =
      std::make_shared<std::unordered_set<std::string>>();  // the pool events' names point into
  std::vector<Event> events;          // "ph": "X" events with a duration >= 0, in file order;
                                      // those with a negative one, or starting or ending beyond
                                      // +-1e18 us, are skipped (counted in `skipped`)
  std::optional<int64_t> rank;        // distributedInfo.rank
  std::optional<int64_t> world_size;  // distributedInfo.world_size
  std::string writer = "pytorch";     // "ptune" or "pytorch" (see writer_of)
  std::optional<std::string> amp;     // ptune's traces: the row's optim.amp ("ptune".amp)
  bool under_load = false;            // "ptune".load.under_load: competing load while it was recorded
  std::string load_summary;           // "ptune".load.summary: what else ran, one line
  /// Index in `events` -> the event's "Call stack" (older torch.profiler's with_stack=True:
  /// frames joined by ";", innermost first), interned in `names`.
  std::unordered_map<size_t, std::string_view> call_stacks;
  std::optional<bool> bf16_native;   // ptune's traces: whether the CPU had native bf16 ("ptune".bf16_native)
  bool has_gpu = false;              // kernels, copies, memsets or CUDA runtime calls recorded
  std::vector<std::string> devices;  // deviceProperties[].name
  std::optional<int64_t> schema_version;  // "schemaVersion"
  std::vector<MemorySample> memory;       // "[memory]" samples, host and device (profile_memory=True)
  int64_t host_pid = 0;                   // the pid of most host operators (the profiled process)
  /// Index in `events` -> what the host operator computes, from its inputs (record_shapes=True)
  /// or its "flops": the operators counted, in the order of the indexes.
  std::vector<std::pair<size_t, OpCost>> costs;
  bool has_shapes = false;  // host operators' "Input Dims" recorded (record_shapes=True)
  bool with_flops = false;  // top-level "with_flops" (torch.profiler's with_flops=True)
  uint64_t text_bytes = 0;  // trace text read (after gzip decompression)
  int64_t skipped = 0;      // "X" events left out: a negative duration, or a time beyond +-1e18 us
  // Facts of the whole file, whichever part `events` holds:
  Part part;                      // which part of the file `events` are
  int64_t event_count = 0;        // timed events kept
  int64_t step_count = 0;         // ProfilerStep#N ranges
  int64_t step_names = 0;         // distinct ProfilerStep#N names
  double last_step_end = -1e300;  // the end of the last ProfilerStep#N range
  double first_ts = 1e300;        // the first event's start
  double last_end = -1e300;       // the last event's end
  bool comm_kernels = false;      // communication kernels (nccl...): host collectives only launch them
  bool device_memory = false;     // memory samples of a GPU
};

/// Receives a trace file's events as it is read (scan_trace), in file order.
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  /// A timed event, its inputs (nullptr: none recorded) and its call stack ("": none); names
  /// point into the Trace's pool.
  virtual void event(const Event& e, OpInputs* inputs, std::string_view call_stack) = 0;
  virtual void memory(const MemorySample& m) = 0;
};

/// Reads one trace file (.json, or gzip-compressed .json.gz: by content, not by name), streamed:
/// the file is parsed as it is read (and inflated), and each event and memory sample given to
/// `sink` as it completes, so memory holds neither the text nor a parsed document. The rest
/// (metadata, the whole file's facts) goes to `meta`, whose `events`, `inputs`, `call_stacks` and
/// `memory` it leaves empty.
/// Throws DataError "'<path>': <what is wrong>": cannot be read, not gzip data that it says
/// it is, not JSON (with the line and column), truncated, nested deeper than 64 levels
/// ("nesting deeper than 64 levels; a profiler trace is a few levels deep"), a number that
/// overflows a double ("'1e400' overflows a double (largest about 1.8e308)"), not a trace (no
/// "traceEvents" list), no timed events, more than 256 GiB of text. A field of another type than
/// the schema's is ignored as if absent (a "name" that is a number: no name), and so are ids and
/// sizes outside int64.
void scan_trace(const std::string& path, Trace& meta, TraceSink& sink);

/// The trace files `path` names: itself, or a folder's files ending in .json or .json.gz, sorted by
/// name (sub-folders not searched). Throws DataError "'<path>': no such file or folder" /
/// "'<dir>': no trace files (*.json, *.json.gz) in this folder".
std::vector<std::string> trace_files(const std::string& path);

/// Whether a file named `name` in a folder of traces is read as one: it ends in .json or .json.gz.
/// Throws nothing.
bool is_trace_file_name(const std::string& name);

/// Which program wrote a trace: "ptune" when its top-level object has a "ptune" key (what
/// ptune's TraceRecorder writes) or its process_name metadata names a ptune binary
/// ("ptune", "ptune_tests"); otherwise "pytorch" (Python's torch.profiler, or another
/// LibTorch program, advised in PyTorch's terms). Throws nothing.
std::string writer_of(bool has_ptune_key, const std::string& process_name);

}  // namespace ptune::analyze
