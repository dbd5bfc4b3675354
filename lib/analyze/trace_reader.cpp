#include "analyze/trace_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "analyze/events.hpp"
#include "core/errors.hpp"

namespace ptune::analyze {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("'" + path + "': " + what);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// The most trace text read (a file, or gzip data once inflated). Memory does not grow with the
/// text (events are kept on disk in a compact form, analyze/trace_parts.hpp), but the disk does:
/// a trace beyond this is not a profiler's.
constexpr uint64_t kMaxTraceBytes = uint64_t{256} << 30;

[[noreturn]] void too_large(const std::string& path, const char* how) {
  fail(path, std::string("more than 256 GiB of trace text") + how +
                 "; record fewer steps (torch.profiler's schedule(active=N), measure.profile_steps)");
}

/// The trace text of a file, read in pieces: gzip data (by its magic bytes) inflated as it is
/// read. At most kMaxTraceBytes. Errors (cannot read, damaged or truncated gzip, too large) are
/// thrown from underflow(), that is from inside the parser, as DataError.
class TextBuf : public std::streambuf {
 public:
  explicit TextBuf(const std::string& path) : path_(path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail(path, "is a folder, not a trace file");
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail(path, std::string("cannot read: ") + std::strerror(errno ? errno : EIO));
    const auto size = fs::file_size(path, ec);
    if (!ec && size > kMaxTraceBytes) too_large(path, "");
    in_.resize(1 << 20);
    out_.resize(1 << 20);
    fill_in();
    if (in_len_ == 0) fail(path, "empty file, not a trace");
    gz_ = in_len_ >= 2 && static_cast<unsigned char>(in_[0]) == 0x1f &&
          static_cast<unsigned char>(in_[1]) == 0x8b;
    if (!gz_ && ends_with(path, ".gz")) fail(path, "not gzip data, though its name ends in .gz");
    if (gz_) {
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) fail(path, "cannot start gzip decompression");
      zinit_ = true;
      zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
      zs_.avail_in = static_cast<uInt>(in_len_);
    }
  }
  ~TextBuf() override {
    if (zinit_) inflateEnd(&zs_);
    if (f_) std::fclose(f_);
  }
  TextBuf(const TextBuf&) = delete;
  TextBuf& operator=(const TextBuf&) = delete;

  uint64_t delivered() const { return delivered_; }
  bool gz() const { return gz_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    size_t n = 0;
    if (!gz_) {
      if (first_) {  // the first piece was read to look for gzip's magic bytes
        first_ = false;
        n = in_len_;
        std::swap(in_, out_);
      } else {
        n = std::fread(out_.data(), 1, out_.size(), f_);
        if (n == 0 && std::ferror(f_))
          fail(path_, std::string("cannot read: ") + std::strerror(errno ? errno : EIO));
      }
    } else {
      while (n == 0 && !ended_) {
        if (zs_.avail_in == 0) {
          fill_in();
          zs_.next_in = reinterpret_cast<Bytef*>(in_.data());
          zs_.avail_in = static_cast<uInt>(in_len_);
        }
        zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
        zs_.avail_out = static_cast<uInt>(out_.size());
        const int rc = inflate(&zs_, Z_NO_FLUSH);
        n = out_.size() - zs_.avail_out;
        if (rc == Z_STREAM_END) {
          ended_ = true;
        } else if (rc == Z_BUF_ERROR && zs_.avail_in == 0 && in_len_ == 0) {
          fail(path_, "truncated gzip data (the compressed stream ends early)");
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
          const std::string msg = zs_.msg ? zs_.msg : "";
          fail(path_, "damaged gzip data" + (msg.empty() ? std::string() : " (" + msg + ")"));
        } else if (n == 0 && zs_.avail_in == 0 && in_len_ == 0) {
          fail(path_, "truncated gzip data (the compressed stream ends early)");
        }
      }
    }
    if (n == 0) return traits_type::eof();
    delivered_ += n;
    if (delivered_ > kMaxTraceBytes) too_large(path_, gz_ ? " once decompressed" : "");
    // Runs of white space beyond kMaxBlank are dropped (between JSON's tokens they mean
    // nothing; the parser would keep every byte of a run in its token buffer: a gzip bomb of
    // spaces took a gigabyte).
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const char c = out_[i];
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        if (++blank_ > kMaxBlank) continue;
      } else {
        blank_ = 0;
      }
      out_[kept++] = c;
    }
    if (kept == 0) return underflow();
    setg(out_.data(), out_.data(), out_.data() + kept);
    return traits_type::to_int_type(*gptr());
  }

 private:
  void fill_in() {
    in_len_ = std::fread(in_.data(), 1, in_.size(), f_);
    if (in_len_ == 0 && std::ferror(f_))
      fail(path_, std::string("cannot read: ") + std::strerror(errno ? errno : EIO));
  }

  std::string path_;
  std::FILE* f_ = nullptr;
  std::vector<char> in_, out_;
  size_t in_len_ = 0;
  bool gz_ = false, zinit_ = false, ended_ = false, first_ = true;
  z_stream zs_{};
  uint64_t delivered_ = 0;
  static constexpr size_t kMaxBlank = 4096;
  size_t blank_ = 0;  // white space in a row so far
};

Kind kind_of(const std::string& cat, bool* keep) {
  *keep = true;
  if (cat == "cpu_op" || cat == "operator" || cat == "Operator") return Kind::kCpuOp;
  if (cat == "user_annotation" || cat == "python_function" || cat == "python_function_call")
    return Kind::kAnnotation;
  // cuda_profiler_range: kernels timed by CUPTI's range profiler (HTA's cupti_profiler traces).
  if (cat == "kernel" || cat == "Kernel" || cat == "cuda_profiler_range") return Kind::kKernel;
  if (cat == "gpu_memcpy" || cat == "Memcpy") return Kind::kMemcpy;
  if (cat == "gpu_memset" || cat == "Memset") return Kind::kMemset;
  if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "Runtime") return Kind::kRuntime;
  *keep = false;  // gpu_user_annotation (device-side copies of host ranges), Trace, overhead, ...
  return Kind::kOther;
}

/// The most inputs kept of an operator, and dims of an input: Kineto's are a handful.
constexpr size_t kMaxInputs = 64, kMaxDims = 16;

/// Deepest nesting a trace may have (objects and lists): Kineto's are five or six levels deep
/// (traceEvents, an event, its args, "Input Dims" lists of lists).
constexpr int kMaxDepth = 64;

/// Times beyond this many microseconds from 0 (about 31,700 years) are not a profiler's: an
/// event that starts or ends beyond is skipped, so that every sum of times stays finite.
constexpr double kMaxTimeUs = 1e18;

}  // namespace

std::string writer_of(bool has_ptune_key, const std::string& process_name) {
  if (has_ptune_key) return "ptune";
  if (process_name == "ptune" || process_name.rfind("ptune_", 0) == 0) return "ptune";
  return "pytorch";
}

namespace {

/// A JSON scalar as the reader keeps it: what is needed of it for the schema's fields.
struct Scalar {
  enum Type { kNone, kString, kInt, kUnsigned, kFloat, kBool, kOther } type = kNone;
  Scalar() = default;
  explicit Scalar(Type t) : type(t) {}
  std::string s;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  bool number() const { return type == kInt || type == kUnsigned || type == kFloat; }
  double as_double() const { return type == kInt ? double(i) : type == kUnsigned ? double(u) : d; }
};

/// An id or count: integers in int64's range as they are, other numbers truncated when they
/// fit in int64 (`fallback` when not), strings hashed.
int64_t as_int(const Scalar& v, int64_t fallback) {
  switch (v.type) {
    case Scalar::kUnsigned:
      return v.u <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v.u) : fallback;
    case Scalar::kInt:
      return v.i;
    case Scalar::kFloat:
      // [-2^63, 2^63): the doubles whose truncation an int64 holds.
      return v.d >= -9223372036854775808.0 && v.d < 9223372036854775808.0 ? static_cast<int64_t>(v.d)
                                                                          : fallback;
    case Scalar::kString:
      return static_cast<int64_t>(std::hash<std::string>{}(v.s) & 0x7fffffff);
    default:
      return fallback;
  }
}

/// A number's integer value; `fallback` for anything else (a string is no size or count).
int64_t number_as_int(const Scalar& v, int64_t fallback) {
  return v.type == Scalar::kString ? fallback : as_int(v, fallback);
}

/// Where the parser is: the context of each open object or list.
enum class Ctx : uint8_t {
  kTop,        // the top-level object
  kEvents,     // the traceEvents list (or the top-level list of Chrome's array form)
  kEvent,      // an event
  kArgs,       // an event's args
  kDims,       // args' "Input Dims" (or "Input dims")
  kDim,        // one input's dims
  kTypes,      // args' "Input type"
  kConcrete,   // args' "Concrete Inputs"
  kDist,       // distributedInfo
  kDevices,    // deviceProperties
  kDevice,     // one device
  kPtune,      // ptune's own key
  kPtuneLoad,  // its "load": the load seen while the trace was recorded
  kIgnore,     // anything else
};

/// The SAX handler that builds a Trace as the text streams by (nlohmann::json_sax).
class Sax {
 public:
  Sax(Trace& t, TraceSink& sink, TextBuf& buf, const std::string& path)
      : t_(t), sink_(sink), buf_(buf), path_(path) {}

  bool null() { return scalar(Scalar{Scalar::kOther}); }
  bool boolean(bool v) {
    Scalar x{Scalar::kBool};
    x.b = v;
    return scalar(x);
  }
  bool number_integer(int64_t v) {
    Scalar x{Scalar::kInt};
    x.i = v;
    return scalar(x);
  }
  bool number_unsigned(uint64_t v) {
    Scalar x{Scalar::kUnsigned};
    x.u = v;
    return scalar(x);
  }
  bool number_float(double v, const std::string&) {
    Scalar x{Scalar::kFloat};
    x.d = v;
    return scalar(x);
  }
  bool string(std::string& v) {
    Scalar x{Scalar::kString};
    x.s = std::move(v);
    return scalar(x);
  }
  bool binary(nlohmann::json::binary_t&) { return scalar(Scalar{Scalar::kOther}); }

  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool key(std::string& k) {
    key_ = std::move(k);
    if (ctx_.size() == 1 && ctx_.back() == Ctx::kTop && key_ == "ptune") t_has_ptune_ = true;
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    if (ex.id == 406) {  // out_of_range: a number that overflows a double, e.g. 1e309 (quoted)
      const size_t q = what.find('\'');
      fail(path_, (q == std::string::npos ? std::string("a number") : what.substr(q)) +
                      " overflows a double (largest about 1.8e308)");
    }
    if (byte > buf_.delivered() || what.find("unexpected end of input") != std::string::npos) {
      fail(path_,
           "truncated: the JSON ends at byte " + std::to_string(buf_.delivered()) + " before it is complete");
    }
    const auto at = what.find("parse error");
    fail(path_, "not JSON (" + (at == std::string::npos ? what : what.substr(at)) + ")");
  }

  bool saw_events() const { return saw_events_; }
  /// The pid of most host events: the profiled process.
  int64_t host_pid() const {
    int64_t pid = 0;
    size_t most = 0;
    for (const auto& [p, n] : per_pid_)
      if (n > most || (n == most && p < pid)) most = n, pid = p;
    return pid;
  }
  bool has_ptune_key() const { return t_has_ptune_; }
  const std::string& process_name() const { return process_name_; }

 private:
  Ctx parent() const { return ctx_.empty() ? Ctx::kIgnore : ctx_.back(); }

  bool open(bool object) {
    if (ctx_.size() >= static_cast<size_t>(kMaxDepth))
      fail(path_, "nesting deeper than " + std::to_string(kMaxDepth) +
                      " levels; a profiler trace is a few levels deep");
    Ctx c = Ctx::kIgnore;
    if (ctx_.empty()) {
      c = object ? Ctx::kTop : Ctx::kEvents;
      if (!object) saw_events_ = true;
    } else {
      switch (ctx_.back()) {
        case Ctx::kTop:
          if (!object && key_ == "traceEvents")
            c = Ctx::kEvents, saw_events_ = true;
          else if (object && key_ == "distributedInfo")
            c = Ctx::kDist;
          else if (!object && key_ == "deviceProperties")
            c = Ctx::kDevices;
          else if (object && key_ == "ptune")
            c = Ctx::kPtune;
          break;
        case Ctx::kPtune:
          if (object && key_ == "load") c = Ctx::kPtuneLoad;
          break;
        case Ctx::kEvents:
          if (object) c = Ctx::kEvent, ev_ = {}, in_event_ = true;
          break;
        case Ctx::kEvent:
          if (object && key_ == "args")
            c = Ctx::kArgs, ev_.args_object = true;
          else if (key_ == "args")
            ev_.args_object = false;
          break;
        case Ctx::kArgs:
          if (!object && (key_ == "Input Dims" || key_ == "Input dims"))
            c = Ctx::kDims, ev_.has_dims = true;
          else if (!object && key_ == "Input type")
            c = Ctx::kTypes;
          else if (!object && key_ == "Concrete Inputs")
            c = Ctx::kConcrete;
          break;
        case Ctx::kDims:
          if (!object) c = Ctx::kDim, dims_ = 0, dim0_ = -1, ev_.in.dims.emplace_back();
          break;
        case Ctx::kDevices:
          if (object) c = Ctx::kDevice;
          break;
        default:
          break;
      }
    }
    // A key of the parent given a container value: that key is no longer a scalar field.
    if (!ctx_.empty() && ctx_.back() == Ctx::kEvent) forget(key_);
    ctx_.push_back(c);
    return true;
  }

  bool close() {
    const Ctx c = ctx_.back();
    ctx_.pop_back();
    if (c == Ctx::kEvent) finish_event();
    if (c == Ctx::kDim && ev_.batch < 0 && dims_ >= 2 && dim0_ >= 0) ev_.batch = dim0_;
    return true;
  }

  void forget(const std::string& k) {
    if (k == "ph")
      ev_.ph = {};
    else if (k == "cat")
      ev_.cat = {};
    else if (k == "name")
      ev_.name = {};
    else if (k == "ts")
      ev_.ts = {};
    else if (k == "dur")
      ev_.dur = {};
    else if (k == "pid")
      ev_.pid = Scalar{Scalar::kOther};
    else if (k == "tid")
      ev_.tid = Scalar{Scalar::kOther};
  }

  bool scalar(const Scalar& v) {
    switch (parent()) {
      case Ctx::kEvent:
        if (key_ == "ph")
          ev_.ph = v;
        else if (key_ == "cat")
          ev_.cat = v;
        else if (key_ == "name")
          ev_.name = v;
        else if (key_ == "ts")
          ev_.ts = v;
        else if (key_ == "dur")
          ev_.dur = v;
        else if (key_ == "pid")
          ev_.pid = v;
        else if (key_ == "tid")
          ev_.tid = v;
        else if (key_ == "args")
          ev_.args_object = false;
        break;
      case Ctx::kArgs:
        if (key_ == "correlation")
          ev_.correlation = as_int(v, -1);
        else if (key_ == "bytes")
          ev_.bytes = number_as_int(v, -1);
        else if (key_ == "name")
          ev_.args_name = v;
        else if (key_ == "Total Allocated")
          ev_.allocated = number_as_int(v, -1);
        else if (key_ == "Total Reserved")
          ev_.reserved = number_as_int(v, -1);
        else if (key_ == "Device Id")
          ev_.device_id = number_as_int(v, -1);
        else if (key_ == "Device Type")
          ev_.device_type = number_as_int(v, -1);
        else if (key_ == "Bytes")
          ev_.mem_bytes = number_as_int(v, 0);
        else if (key_ == "Call stack" && v.type == Scalar::kString)
          ev_.call_stack = v.s;
        else if (key_ == "flops" && v.number())
          ev_.in.flops = std::max(0.0, v.as_double());
        break;
      case Ctx::kDim:
        if (dims_ == 0 && v.number()) dim0_ = as_int(v, -1);
        ++dims_;
        if (ev_.in.dims.back().size() < kMaxDims) ev_.in.dims.back().push_back(number_as_int(v, -1));
        break;
      case Ctx::kTypes:
      case Ctx::kConcrete: {
        auto& list = parent() == Ctx::kTypes ? ev_.in.types : ev_.in.concrete;
        if (list.size() < kMaxInputs)
          list.push_back(*t_.names->insert(v.type == Scalar::kString ? v.s : "").first);
        break;
      }
      case Ctx::kDist:
        if (key_ == "rank")
          t_.rank = as_int(v, 0);
        else if (key_ == "world_size")
          t_.world_size = as_int(v, 1);
        break;
      case Ctx::kDevice:
        if (key_ == "name" && v.type == Scalar::kString) t_.devices.push_back(v.s);
        break;
      case Ctx::kPtune:
        if (key_ == "amp" && v.type == Scalar::kString)
          t_.amp = v.s;
        else if (key_ == "bf16_native" && v.type == Scalar::kBool)
          t_.bf16_native = v.b;
        break;
      case Ctx::kPtuneLoad:
        if (key_ == "under_load" && v.type == Scalar::kBool)
          t_.under_load = v.b;
        else if (key_ == "summary" && v.type == Scalar::kString)
          t_.load_summary = v.s;
        break;
      case Ctx::kTop:
        if (key_ == "schemaVersion" && v.number()) t_.schema_version = as_int(v, 0);
        if (key_ == "with_flops")
          t_.with_flops = (v.number() && v.as_double() != 0) || (v.type == Scalar::kBool && v.b) ||
                          (v.type == Scalar::kString && (v.s == "1" || v.s == "true"));
        break;
      default:
        break;
    }
    return true;
  }

  void finish_event() {
    in_event_ = false;
    auto& e = ev_;
    const std::string* ph = e.ph.type == Scalar::kString ? &e.ph.s : nullptr;
    if (!ph) return;
    const std::string name = e.name.type == Scalar::kString ? e.name.s : std::string();
    if (*ph == "M") {
      if (name == "process_name" && e.args_object && process_name_.empty() &&
          e.args_name.type == Scalar::kString)
        process_name_ = e.args_name.s;
      return;
    }
    if (*ph == "i" || *ph == "I") {
      if (name == "[memory]" && e.ts.number() && e.args_object) {
        // Device Type 1 is CUDA (0 the CPU); older traces give only a Device Id (-1 the CPU).
        const bool gpu = e.device_type >= 0 ? e.device_type != 0 : e.device_id >= 0;
        t_.device_memory = t_.device_memory || gpu;
        sink_.memory(MemorySample{e.ts.as_double(), e.allocated, e.reserved,
                                  gpu ? std::max<int64_t>(0, e.device_id) : -1, e.mem_bytes, as_int(e.pid, 0),
                                  as_int(e.tid, 0)});
      }
      return;
    }
    if (*ph != "X") return;
    if (!e.ts.number() || !e.dur.number()) return;
    bool keep = false;
    Event out;
    const std::string cat = e.cat.type == Scalar::kString ? e.cat.s : std::string();
    out.kind = kind_of(cat, &keep);
    if (!keep) return;
    out.python = cat == "python_function" || cat == "python_function_call";
    out.ts = e.ts.as_double();
    out.dur = e.dur.as_double();
    if (out.dur < 0 || std::fabs(out.ts) > kMaxTimeUs || std::fabs(out.end()) > kMaxTimeUs) {
      ++t_.skipped;
      return;
    }
    out.name = *t_.names->insert(name).first;
    out.pid = as_int(e.pid, 0);
    out.tid = as_int(e.tid, 0);
    std::string_view stack;
    OpInputs* inputs = nullptr;
    if (e.args_object) {
      out.correlation = e.correlation;
      out.bytes = e.bytes;
      if (out.kind == Kind::kCpuOp) out.batch = e.batch;
      if (out.kind == Kind::kCpuOp && !e.call_stack.empty()) stack = *t_.names->insert(e.call_stack).first;
      if (out.kind == Kind::kCpuOp && (e.has_dims || e.in.flops >= 0)) inputs = &e.in;
    }
    facts(out);
    sink_.event(out, inputs, stack);
  }

  /// The whole file's facts (Trace's) that event `e` adds to.
  void facts(const Event& e) {
    if (e.kind == Kind::kKernel || e.kind == Kind::kMemcpy || e.kind == Kind::kMemset ||
        e.kind == Kind::kRuntime)
      t_.has_gpu = true;
    if (e.kind == Kind::kKernel && is_communication(e)) t_.comm_kernels = true;
    if (is_host(e)) ++per_pid_[e.pid];
    if (is_step(e)) {
      ++t_.step_count;
      t_.last_step_end = std::max(t_.last_step_end, e.end());
      if (step_names_.insert(e.name).second) ++t_.step_names;
    }
    ++t_.event_count;
    t_.first_ts = std::min(t_.first_ts, e.ts);
    t_.last_end = std::max(t_.last_end, e.end());
  }

  /// The fields of the event being read.
  struct Pending {
    Scalar ph, cat, name, ts, dur, pid{Scalar::kOther}, tid{Scalar::kOther}, args_name;
    std::string call_stack;  // args' "Call stack"
    OpInputs in;             // args' "Input Dims", "Input type", "Concrete Inputs", "flops"
    bool has_dims = false;
    bool args_object = false;
    int64_t correlation = -1, bytes = -1, batch = -1, allocated = -1, reserved = -1, device_id = -1,
            device_type = -1, mem_bytes = 0;
  };

  Trace& t_;
  TraceSink& sink_;
  TextBuf& buf_;
  const std::string& path_;
  std::vector<Ctx> ctx_;
  std::string key_;
  Pending ev_;
  bool in_event_ = false, saw_events_ = false, t_has_ptune_ = false;
  int64_t dims_ = 0, dim0_ = -1;
  std::string process_name_;
  std::unordered_map<int64_t, size_t> per_pid_;      // host events per pid
  std::unordered_set<std::string_view> step_names_;  // interned
};

}  // namespace

void scan_trace(const std::string& path, Trace& t, TraceSink& sink) {
  t.path = path;
  TextBuf buf(path);
  std::istream in(&buf);
  Sax sax(t, sink, buf, path);
  nlohmann::json::sax_parse(in, &sax);
  if (!sax.saw_events()) {
    fail(path,
         "not a profiler trace: no \"traceEvents\" list (torch.profiler's export_chrome_trace and "
         "tensorboard_trace_handler write one)");
  }
  if (t.event_count == 0) {
    fail(path,
         "no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in its traceEvents: nothing to analyze");
  }
  t.text_bytes = buf.delivered();
  t.writer = writer_of(sax.has_ptune_key(), sax.process_name());
  t.host_pid = sax.host_pid();
}

bool is_trace_file_name(const std::string& name) {
  return ends_with(name, ".json") || ends_with(name, ".json.gz");
}

std::vector<std::string> trace_files(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file or folder");
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec)) continue;
    if (is_trace_file_name(name)) files.push_back(entry.path().string());
  }
  if (ec) fail(path, "cannot list the folder: " + ec.message());
  if (files.empty()) fail(path, "no trace files (*.json, *.json.gz) in this folder");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ptune::analyze
