#include "analyze/trace_reader.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/src.hpp>  // Boost.JSON's parser, compiled here (this file alone includes it)
#include <zlib.h>

#include "analyze/events.hpp"
#include "core/errors.hpp"

namespace ptune::analyze {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("'" + path + "': " + what);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// The most trace text read (a file, or gzip data once inflated). Memory does not grow with the
/// text (events are kept in a compact form, on disk past --events-mb: analyze/trace_parts.hpp),
/// but the disk does: a trace beyond this is not a profiler's.
constexpr uint64_t kMaxTraceBytes = uint64_t{256} << 30;

[[noreturn]] void too_large(const std::string& path, const char* how) {
  fail(path, std::string("more than 256 GiB of trace text") + how +
                 "; record fewer steps (torch.profiler's schedule(active=N), measure.profile_steps)");
}

/// The trace text of a file, read in pieces: gzip data (by its magic bytes) inflated as it is
/// read. At most kMaxTraceBytes. Errors (cannot read, damaged or truncated gzip, too large) are
/// thrown from block(), as DataError.
class TextReader {
 public:
  explicit TextReader(const std::string& path) : path_(path) {
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
  ~TextReader() {
    if (zinit_) inflateEnd(&zs_);
    if (f_) std::fclose(f_);
  }
  TextReader(const TextReader&) = delete;
  TextReader& operator=(const TextReader&) = delete;

  uint64_t delivered() const { return delivered_; }
  bool gzip() const { return gz_; }

  /// The next piece of text (valid until the next call); {nullptr, 0} at the end.
  std::pair<const char*, size_t> block() {
    const size_t n = gz_ ? inflate_some() : read_some();
    if (n == 0) return {nullptr, 0};
    delivered_ += n;
    if (delivered_ > kMaxTraceBytes) too_large(path_, gz_ ? " once decompressed" : "");
    return {out_.data(), n};
  }

 private:
  /// Plain text: the next piece into out_; 0 at the end.
  size_t read_some() {
    if (first_) {  // the first piece was read to look for gzip's magic bytes
      first_ = false;
      std::swap(in_, out_);
      return in_len_;
    }
    const size_t n = std::fread(out_.data(), 1, out_.size(), f_);
    if (n == 0 && std::ferror(f_))
      fail(path_, std::string("cannot read: ") + std::strerror(errno ? errno : EIO));
    return n;
  }
  /// Gzip data: the next piece of its text into out_; 0 at the end.
  size_t inflate_some() {
    size_t n = 0;
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
    return n;
  }
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
};

/// Where character `offset` of the trace text of `path` is: "line L, column C" (read again:
/// only a parse error asks).
std::string place_of(const std::string& path, uint64_t offset) {
  TextReader buf(path);
  uint64_t at = 0, line = 1, line_start = 0;
  for (auto [text, n] = buf.block(); n > 0 && at < offset; std::tie(text, n) = buf.block())
    for (size_t i = 0; i < n && at < offset; ++i, ++at)
      if (text[i] == '\n') line++, line_start = at + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

/// What is wrong with the JSON at a character where the parser stopped, in words.
std::string reason_at(unsigned char c, bool extra) {
  if (extra) return "text after the end of the JSON document";
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", c);
  if (c >= 0x80) return std::string("a byte that is not UTF-8 text (") + hex + ")";
  if (c < 0x20) return std::string("an unescaped control character (") + hex + ")";
  return std::string("unexpected '") + static_cast<char>(c) + "'";
}

/// Whether `v` is the text `lit` (compared inline: its length is known when compiled).
template <size_t N>
bool is(std::string_view v, const char (&lit)[N]) {
  return v.size() == N - 1 && std::memcmp(v.data(), lit, N - 1) == 0;
}

Kind kind_of(std::string_view cat, bool* keep) {
  *keep = true;
  if (is(cat, "cpu_op") || is(cat, "operator") || is(cat, "Operator")) return Kind::kCpuOp;
  if (is(cat, "user_annotation") || is(cat, "python_function") || is(cat, "python_function_call"))
    return Kind::kAnnotation;
  // cuda_profiler_range: kernels timed by CUPTI's range profiler (HTA's cupti_profiler traces).
  if (is(cat, "kernel") || is(cat, "Kernel") || is(cat, "cuda_profiler_range")) return Kind::kKernel;
  if (is(cat, "gpu_memcpy") || is(cat, "Memcpy")) return Kind::kMemcpy;
  if (is(cat, "gpu_memset") || is(cat, "Memset")) return Kind::kMemset;
  if (is(cat, "cuda_runtime") || is(cat, "cuda_driver") || is(cat, "Runtime")) return Kind::kRuntime;
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

/// A JSON scalar as the reader sees it: what is needed of it for the schema's fields. A
/// string's text lives only until the handler returns.
struct Scalar {
  enum Type { kNone, kString, kInt, kUnsigned, kFloat, kBool, kOther } type = kNone;
  Scalar() = default;
  explicit Scalar(Type t) : type(t) {}
  std::string_view s;
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
      return static_cast<int64_t>(std::hash<std::string_view>{}(v.s) & 0x7fffffff);
    default:
      return fallback;
  }
}

/// A number's integer value; `fallback` for anything else (a string is no size or count).
int64_t number_as_int(const Scalar& v, int64_t fallback) {
  return v.type == Scalar::kString ? fallback : as_int(v, fallback);
}

/// The keys of the schema that the reader reads; kOther: any other.
enum class Field : uint8_t {
  kOther,
  kMemoryBytes,       // "Bytes"
  kCallStack,         // "Call stack"
  kConcreteInputs,    // "Concrete Inputs"
  kDeviceId,          // "Device Id"
  kDeviceType,        // "Device Type"
  kInputDims,         // "Input Dims"
  kInputDimsLower,    // "Input dims"
  kInputType,         // "Input type"
  kTotalAllocated,    // "Total Allocated"
  kTotalReserved,     // "Total Reserved"
  kAmp,               // "amp"
  kArgs,              // "args"
  kBf16Native,        // "bf16_native"
  kBytes,             // "bytes"
  kCat,               // "cat"
  kCorrelation,       // "correlation"
  kDeviceProperties,  // "deviceProperties"
  kDistributedInfo,   // "distributedInfo"
  kDur,               // "dur"
  kFlops,             // "flops"
  kLoad,              // "load"
  kName,              // "name"
  kPh,                // "ph"
  kPid,               // "pid"
  kPtune,             // "ptune"
  kRank,              // "rank"
  kSchemaVersion,     // "schemaVersion"
  kSummary,           // "summary"
  kTid,               // "tid"
  kTraceEvents,       // "traceEvents"
  kTs,                // "ts"
  kUnderLoad,         // "under_load"
  kWithFlops,         // "with_flops"
  kWorldSize,         // "world_size"
};

/// The schema's keys and their Fields.
constexpr std::pair<std::string_view, Field> kKeys[] = {
    {"Bytes", Field::kMemoryBytes},
    {"Call stack", Field::kCallStack},
    {"Concrete Inputs", Field::kConcreteInputs},
    {"Device Id", Field::kDeviceId},
    {"Device Type", Field::kDeviceType},
    {"Input Dims", Field::kInputDims},
    {"Input dims", Field::kInputDimsLower},
    {"Input type", Field::kInputType},
    {"Total Allocated", Field::kTotalAllocated},
    {"Total Reserved", Field::kTotalReserved},
    {"amp", Field::kAmp},
    {"args", Field::kArgs},
    {"bf16_native", Field::kBf16Native},
    {"bytes", Field::kBytes},
    {"cat", Field::kCat},
    {"correlation", Field::kCorrelation},
    {"deviceProperties", Field::kDeviceProperties},
    {"distributedInfo", Field::kDistributedInfo},
    {"dur", Field::kDur},
    {"flops", Field::kFlops},
    {"load", Field::kLoad},
    {"name", Field::kName},
    {"ph", Field::kPh},
    {"pid", Field::kPid},
    {"ptune", Field::kPtune},
    {"rank", Field::kRank},
    {"schemaVersion", Field::kSchemaVersion},
    {"summary", Field::kSummary},
    {"tid", Field::kTid},
    {"traceEvents", Field::kTraceEvents},
    {"ts", Field::kTs},
    {"under_load", Field::kUnderLoad},
    {"with_flops", Field::kWithFlops},
    {"world_size", Field::kWorldSize},
};

/// The keys in an open-addressed table (every key of every event asks, so a key is found with
/// a hash of its length and two letters and, mostly, one comparison).
class KeyTable {
 public:
  KeyTable() {
    std::fill(std::begin(slot_), std::end(slot_), kEmpty);
    for (size_t i = 0; i < std::size(kKeys); ++i) {
      size_t h = hash(kKeys[i].first);
      while (slot_[h] != kEmpty) h = (h + 1) % kSlots;
      slot_[h] = static_cast<uint8_t>(i);
    }
  }
  Field find(std::string_view k) const {
    if (k.empty()) return Field::kOther;
    for (size_t h = hash(k); slot_[h] != kEmpty; h = (h + 1) % kSlots) {
      const auto& [name, id] = kKeys[slot_[h]];
      if (name.size() != k.size()) continue;
      size_t i = 0;  // compared here: a call to memcmp costs more than these few letters
      while (i < k.size() && name[i] == k[i]) ++i;
      if (i == k.size()) return id;
    }
    return Field::kOther;
  }

 private:
  static constexpr size_t kSlots = 128;
  static constexpr uint8_t kEmpty = 0xff;
  static size_t hash(std::string_view k) {
    const auto first = static_cast<unsigned char>(k[0]), last = static_cast<unsigned char>(k.back());
    return (k.size() * 7 + first * 3 + last) % kSlots;
  }
  uint8_t slot_[kSlots];
};

/// The Field of key `k` (kOther: not one the reader reads). Throws nothing.
Field key_of(std::string_view k) {
  static const KeyTable table;
  return table.find(k);
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

/// A number's text as a double, correctly rounded; an underflow is 0 (or a subnormal), as JSON
/// parsers read it; one that overflows a double is named.
double parse_double(std::string_view text, const std::string& path) {
  double d = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), d).ec == std::errc::result_out_of_range) {
    const std::string copy(text);
    d = std::strtod(copy.c_str(), nullptr);
    if (std::isinf(d)) fail(path, "'" + copy + "' overflows a double (largest about 1.8e308)");
  }
  return d;
}

/// What an event's "ph" says.
enum class Ph : uint8_t { kNone, kComplete, kMeta, kInstant, kOther };

Ph ph_of(std::string_view v) {
  if (is(v, "X")) return Ph::kComplete;
  if (is(v, "M")) return Ph::kMeta;
  if (is(v, "i") || is(v, "I")) return Ph::kInstant;
  return Ph::kOther;
}

/// The last few texts looked up, with what was found for them: a trace repeats a few texts from
/// event to event (an input's dtype, the runtime call that launches every kernel), found here
/// without hashing them.
template <typename V, size_t N>
class Recent {
 public:
  const V* find(std::string_view k) const {
    for (size_t i = 0; i < used_; ++i)
      if (slot_[i].key.size() == k.size() && std::memcmp(slot_[i].key.data(), k.data(), k.size()) == 0)
        return &slot_[i].value;
    return nullptr;
  }
  /// Keeps `value` for `key` (a text that stays where it is), in place of the oldest.
  void put(std::string_view key, const V& value) {
    slot_[next_] = {key, value};
    next_ = (next_ + 1) % N;
    used_ = std::max(used_, next_ == 0 ? N : next_);
  }

 private:
  struct Slot {
    std::string_view key;
    V value;
  };
  std::array<Slot, N> slot_{};
  size_t next_ = 0, used_ = 0;
};

/// The handler of Boost.JSON's incremental parser that builds a Trace as the text streams by.
/// A key, string or number split between two pieces of text arrives in parts, gathered in
/// `part_`; a string's text is read where it is (no copy) unless a field keeps it.
class Handler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  Handler(Trace& t, TraceSink& sink, const std::string& path) : t_(t), sink_(sink), path_(path) {}

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) { return open(true); }
  bool on_object_end(std::size_t, json::error_code&) { return close(); }
  bool on_array_begin(json::error_code&) { return open(false); }
  bool on_array_end(std::size_t, json::error_code&) { return close(); }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) { return gather(s); }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    key_id_ = key_of(whole(s));
    if (ctx_.size() == 1 && ctx_.back() == Ctx::kTop && key_id_ == Field::kPtune) t_has_ptune_ = true;
    return done();
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) { return gather(s); }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    Scalar v{Scalar::kString};
    v.s = whole(s);
    scalar(v);
    return done();
  }
  bool on_number_part(json::string_view s, json::error_code&) { return gather(s); }
  /// Integers that fit int64 (negative) or uint64 as they are; any other number as the double
  /// its text rounds to (Boost.JSON's own double is not always the nearest).
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    Scalar v{Scalar::kInt};
    v.i = i;
    scalar(v);
    return done();
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    Scalar v{Scalar::kUnsigned};
    v.u = u;
    scalar(v);
    return done();
  }
  bool on_double(double, json::string_view s, json::error_code&) {
    Scalar v{Scalar::kFloat};
    v.d = parse_double(whole(s), path_);
    scalar(v);
    return done();
  }
  bool on_bool(bool b, json::error_code&) {
    Scalar v{Scalar::kBool};
    v.b = b;
    scalar(v);
    return true;
  }
  bool on_null(json::error_code&) {
    scalar(Scalar{Scalar::kOther});
    return true;
  }
  // Comments are not JSON (the parser's options refuse them): never called.
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

  bool saw_events() const { return saw_events_; }
  /// Whether the trace holds torch.profiler's own span ("PyTorch Profiler (N)", cat "Trace").
  bool saw_profiler_span() const { return profiler_span_; }
  /// "ph": "X" events without a number "ts" and "dur" (a string, another type, absent).
  int64_t untimed() const { return untimed_; }
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
  bool gather(json::string_view s) {
    part_.append(s.data(), s.size());
    split_ = true;
    return true;
  }
  /// The whole text of a key, string or number whose last part is `s`.
  std::string_view whole(json::string_view s) {
    if (!split_) return {s.data(), s.size()};
    part_.append(s.data(), s.size());
    return part_;
  }
  bool done() {
    if (split_) part_.clear(), split_ = false;
    return true;
  }

  /// `v` in the trace's pool of names (one copy per distinct text).
  std::string_view intern(std::string_view v) {
    if (const std::string_view* kept = recent_texts_.find(v)) return *kept;
    auto it = pooled_.find(v);
    if (it == pooled_.end()) it = pooled_.insert(*t_.names->insert(std::string(v)).first).first;
    recent_texts_.put(*it, *it);
    return *it;
  }
  /// An event name, interned, and its traits.
  std::pair<std::string_view, uint32_t> name_of(std::string_view v) {
    if (const auto* hit = recent_names_.find(v)) return *hit;
    auto it = names_.find(v);
    if (it == names_.end()) {
      const std::string_view kept = intern(v);
      it = names_.emplace(kept, name_traits(kept)).first;
    }
    recent_names_.put(it->first, *it);
    return *it;
  }

  Ctx parent() const { return ctx_.empty() ? Ctx::kIgnore : ctx_.back(); }

  bool open(bool object) {
    if (ctx_.size() >= static_cast<size_t>(kMaxDepth))
      fail(path_, "nesting deeper than " + std::to_string(kMaxDepth) +
                      " levels; a profiler trace is a few levels deep");
    if (ctx_.empty()) {
      if (!object) saw_events_ = true;
      ctx_.push_back(object ? Ctx::kTop : Ctx::kEvents);
      return true;
    }
    const Ctx c = child_of(ctx_.back(), object);
    // A key of the parent given a container value: that key is no longer a scalar field.
    if (ctx_.back() == Ctx::kEvent) forget(key_id_);
    ctx_.push_back(c);
    return true;
  }

  /// The context of an object (or a list) opened in `parent` under the key just read.
  Ctx child_of(Ctx parent, bool object) {
    switch (parent) {
      case Ctx::kTop:
        return top_child(object);
      case Ctx::kPtune:
        return object && key_id_ == Field::kLoad ? Ctx::kPtuneLoad : Ctx::kIgnore;
      case Ctx::kEvents:
        if (!object) return Ctx::kIgnore;
        ev_.reset();
        return Ctx::kEvent;
      case Ctx::kEvent:
        if (key_id_ == Field::kArgs) ev_.args_object = object;
        return object && key_id_ == Field::kArgs ? Ctx::kArgs : Ctx::kIgnore;
      case Ctx::kArgs:
        return object ? Ctx::kIgnore : args_list(key_id_);
      case Ctx::kDims:
        if (object) return Ctx::kIgnore;
        dims_ = 0, dim0_ = -1, ev_.new_input();
        return Ctx::kDim;
      case Ctx::kDevices:
        return object ? Ctx::kDevice : Ctx::kIgnore;
      default:
        return Ctx::kIgnore;
    }
  }

  /// The context of a value of the top-level object that the reader reads.
  Ctx top_child(bool object) {
    if (!object && key_id_ == Field::kTraceEvents) {
      saw_events_ = true;
      return Ctx::kEvents;
    }
    if (object && key_id_ == Field::kDistributedInfo) return Ctx::kDist;
    if (!object && key_id_ == Field::kDeviceProperties) return Ctx::kDevices;
    if (object && key_id_ == Field::kPtune) return Ctx::kPtune;
    return Ctx::kIgnore;
  }

  /// The context of a list in an event's args under key `k`.
  Ctx args_list(Field k) {
    switch (k) {
      case Field::kInputDims:
      case Field::kInputDimsLower:
        ev_.has_dims = true;
        return Ctx::kDims;
      case Field::kInputType:
        return Ctx::kTypes;
      case Field::kConcreteInputs:
        return Ctx::kConcrete;
      default:
        return Ctx::kIgnore;
    }
  }

  bool close() {
    const Ctx c = ctx_.back();
    ctx_.pop_back();
    if (c == Ctx::kEvent) finish_event();
    if (c == Ctx::kDim && ev_.batch < 0 && dims_ >= 2 && dim0_ >= 0) ev_.batch = dim0_;
    return true;
  }

  void forget(Field k) {
    if (k == Field::kPh)
      ev_.ph = Ph::kNone;
    else if (k == Field::kCat)
      ev_.set_cat({});
    else if (k == Field::kName)
      ev_.named = false;
    else if (k == Field::kTs)
      ev_.has_ts = false;
    else if (k == Field::kDur)
      ev_.has_dur = false;
    else if (k == Field::kPid)
      ev_.pid = 0;
    else if (k == Field::kTid)
      ev_.tid = 0;
  }

  void event_field(const Scalar& v) {
    const bool text = v.type == Scalar::kString;
    switch (key_id_) {
      case Field::kPh:
        ev_.ph = text ? ph_of(v.s) : Ph::kNone;
        break;
      case Field::kCat:
        ev_.set_cat(text ? v.s : std::string_view());
        break;
      case Field::kName:
        ev_.named = text;
        if (text) std::tie(ev_.name, ev_.traits) = name_of(v.s);
        break;
      case Field::kTs:
        ev_.has_ts = v.number(), ev_.ts = v.as_double();
        break;
      case Field::kDur:
        ev_.has_dur = v.number(), ev_.dur = v.as_double();
        break;
      case Field::kPid:
        ev_.pid = as_int(v, 0);
        break;
      case Field::kTid:
        ev_.tid = as_int(v, 0);
        break;
      case Field::kArgs:
        ev_.args_object = false;
        break;
      default:
        break;
    }
  }

  void args_field(const Scalar& v) {
    switch (key_id_) {
      case Field::kCorrelation:
        ev_.correlation = as_int(v, -1);
        break;
      case Field::kBytes:
        ev_.bytes = number_as_int(v, -1);
        break;
      case Field::kName:
        ev_.has_args_name = v.type == Scalar::kString;
        if (ev_.has_args_name) ev_.args_name.assign(v.s);
        break;
      case Field::kTotalAllocated:
        ev_.allocated = number_as_int(v, -1);
        break;
      case Field::kTotalReserved:
        ev_.reserved = number_as_int(v, -1);
        break;
      case Field::kDeviceId:
        ev_.device_id = number_as_int(v, -1);
        break;
      case Field::kDeviceType:
        ev_.device_type = number_as_int(v, -1);
        break;
      case Field::kMemoryBytes:
        ev_.mem_bytes = number_as_int(v, 0);
        break;
      case Field::kCallStack:
        if (v.type == Scalar::kString) ev_.call_stack.assign(v.s);
        break;
      case Field::kFlops:
        if (v.number()) ev_.in.flops = std::max(0.0, v.as_double());
        break;
      default:
        break;
    }
  }

  void scalar(const Scalar& v) {
    switch (parent()) {
      case Ctx::kEvent:
        event_field(v);
        break;
      case Ctx::kArgs:
        args_field(v);
        break;
      case Ctx::kDim:
        if (dims_ == 0 && v.number()) dim0_ = as_int(v, -1);
        ++dims_;
        if (ev_.in.dims.back().size() < kMaxDims) ev_.in.dims.back().push_back(number_as_int(v, -1));
        break;
      case Ctx::kTypes:
      case Ctx::kConcrete: {
        auto& list = parent() == Ctx::kTypes ? ev_.in.types : ev_.in.concrete;
        if (list.size() < kMaxInputs) list.push_back(intern(v.type == Scalar::kString ? v.s : ""));
        break;
      }
      default:
        file_field(v);
        break;
    }
  }

  /// Fields outside the events: distributedInfo, deviceProperties, ptune's own, the top level's.
  void file_field(const Scalar& v) {
    switch (parent()) {
      case Ctx::kDist:
        return dist_field(v);
      case Ctx::kDevice:
        if (key_id_ == Field::kName && v.type == Scalar::kString) t_.devices.emplace_back(v.s);
        return;
      case Ctx::kPtune:
        return ptune_field(v);
      case Ctx::kPtuneLoad:
        return load_field(v);
      case Ctx::kTop:
        return top_field(v);
      default:
        return;
    }
  }

  /// distributedInfo's rank and world size.
  void dist_field(const Scalar& v) {
    if (key_id_ == Field::kRank)
      t_.rank = as_int(v, 0);
    else if (key_id_ == Field::kWorldSize)
      t_.world_size = as_int(v, 1);
  }

  /// ptune's own key: the AMP mode and whether the CPU has native bf16.
  void ptune_field(const Scalar& v) {
    if (key_id_ == Field::kAmp && v.type == Scalar::kString)
      t_.amp = std::string(v.s);
    else if (key_id_ == Field::kBf16Native && v.type == Scalar::kBool)
      t_.bf16_native = v.b;
  }

  /// ptune's "load": whether the trace was recorded under load, and the load in words.
  void load_field(const Scalar& v) {
    if (key_id_ == Field::kUnderLoad && v.type == Scalar::kBool)
      t_.under_load = v.b;
    else if (key_id_ == Field::kSummary && v.type == Scalar::kString)
      t_.load_summary = std::string(v.s);
  }

  /// The top level's schemaVersion and with_flops.
  void top_field(const Scalar& v) {
    if (key_id_ == Field::kSchemaVersion && v.number()) t_.schema_version = as_int(v, 0);
    if (key_id_ == Field::kWithFlops) t_.with_flops = is_true(v);
  }

  /// Whether a flag's value says yes: a number not 0, true, or the text "1" or "true".
  static bool is_true(const Scalar& v) {
    const bool text = v.type == Scalar::kString;
    return (v.number() && v.as_double() != 0) || (v.type == Scalar::kBool && v.b) ||
           (text && (v.s == "1" || v.s == "true"));
  }

  /// Out of line: close() runs at the end of every object and list, and stays small enough for
  /// the parser to inline.
  [[gnu::noinline]] void finish_event() {
    if (!ev_.named) std::tie(ev_.name, ev_.traits) = name_of("");
    switch (ev_.ph) {
      case Ph::kMeta:
        return finish_meta();
      case Ph::kInstant:
        return finish_instant();
      case Ph::kComplete:
        return finish_complete();
      default:
        return;
    }
  }

  /// A metadata record ("ph": "M"): the first process_name's name is the profiled process's.
  void finish_meta() {
    const auto& e = ev_;
    if (e.name == "process_name" && e.args_object && process_name_.empty() && e.has_args_name)
      process_name_ = e.args_name;
  }

  /// An instant event ("ph": "i"): a [memory] one is a sample of the memory allocated.
  void finish_instant() {
    const auto& e = ev_;
    if (e.name != "[memory]" || !e.has_ts || !e.args_object) return;
    // Device Type 1 is CUDA (0 the CPU); older traces give only a Device Id (-1 the CPU).
    const bool gpu = e.device_type >= 0 ? e.device_type != 0 : e.device_id >= 0;
    t_.device_memory = t_.device_memory || gpu;
    sink_.memory(MemorySample{e.ts, e.allocated, e.reserved, gpu ? std::max<int64_t>(0, e.device_id) : -1,
                              e.mem_bytes, e.pid, e.tid});
  }

  /// A complete event ("ph": "X"): given to the sink when it is of a kept category and timed.
  void finish_complete() {
    const auto& e = ev_;
    if (!e.keep) {
      if (text::starts_with(e.name, "PyTorch Profiler (")) profiler_span_ = true;
      return;
    }
    if (!e.has_ts || !e.has_dur) {
      ++untimed_;
      return;
    }
    Event out;
    out.kind = e.kind;
    out.python = e.python;
    out.ts = e.ts;
    out.dur = e.dur;
    if (out.dur < 0 || std::fabs(out.ts) > kMaxTimeUs || std::fabs(out.end()) > kMaxTimeUs) {
      ++t_.skipped;
      return;
    }
    out.name = e.name;
    out.traits = e.traits;
    out.pid = e.pid;
    out.tid = e.tid;
    std::string_view stack;
    OpInputs* inputs = e.args_object ? take_args(out, &stack) : nullptr;
    facts(out);
    sink_.event(out, inputs, stack);
  }

  /// The event's args that `out` keeps; a host operator's call stack in `stack`, and its
  /// inputs returned (nullptr: none recorded, or not a host operator).
  OpInputs* take_args(Event& out, std::string_view* stack) {
    auto& e = ev_;
    out.correlation = e.correlation;
    out.bytes = e.bytes;
    if (out.kind != Kind::kCpuOp) return nullptr;
    out.batch = e.batch_of();
    if (!e.call_stack.empty()) *stack = intern(e.call_stack);
    if (!e.has_dims && e.in.flops < 0) return nullptr;
    if (!e.in.dims.empty()) t_.has_shapes = true;
    return &e.in;
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
    Ph ph = Ph::kNone;
    Kind kind = Kind::kOther;  // from "cat"
    bool keep = false, python = false;
    bool named = false, has_ts = false, has_dur = false, has_args_name = false;
    std::string_view name;  // interned
    uint32_t traits = 0;
    double ts = 0, dur = 0;
    int64_t pid = 0, tid = 0;
    std::string args_name;   // args' "name" (a process_name record's)
    std::string call_stack;  // args' "Call stack"
    OpInputs in;             // args' "Input Dims", "Input type", "Concrete Inputs", "flops"
    bool has_dims = false;
    bool args_object = false;
    int64_t correlation = -1, bytes = -1, batch = -1, allocated = -1, reserved = -1, device_id = -1,
            device_type = -1, mem_bytes = 0;
    std::vector<std::vector<int64_t>> spare;  // dims lists of earlier events, kept for their memory
    /// Event::batch of the host operator: aten::embedding(weight, indices)'s is its indices'
    /// first dimension.
    int64_t batch_of() const {
      if (batch <= 0 || name != "aten::embedding") return batch;
      return in.dims.size() >= 2 && !in.dims[1].empty() && in.dims[1][0] > 0 ? in.dims[1][0] : -1;
    }
    /// A new input's dims list, empty.
    void new_input() {
      if (spare.empty()) {
        in.dims.emplace_back();
        return;
      }
      in.dims.push_back(std::move(spare.back()));
      spare.pop_back();
      in.dims.back().clear();
    }
    void set_cat(std::string_view cat) {
      kind = kind_of(cat, &keep);
      python = is(cat, "python_function") || is(cat, "python_function_call");
    }
    /// As a new event: no fields (keeping the memory of the strings and lists).
    void reset() {
      ph = Ph::kNone;
      set_cat({});
      named = has_ts = has_dur = has_args_name = has_dims = args_object = false;
      ts = dur = 0;
      pid = tid = 0;
      call_stack.clear();
      for (auto& d : in.dims) spare.push_back(std::move(d));
      in.dims.clear();
      in.types.clear();
      in.concrete.clear();
      in.flops = -1;
      correlation = bytes = batch = allocated = reserved = device_id = device_type = -1;
      mem_bytes = 0;
    }
  };

  Trace& t_;
  TraceSink& sink_;
  const std::string& path_;
  std::string part_;  // the parts of a split key, string or number so far
  bool split_ = false;
  std::vector<Ctx> ctx_;
  Field key_id_ = Field::kOther;  // the key of the value read next
  Pending ev_;
  bool saw_events_ = false, t_has_ptune_ = false, profiler_span_ = false;
  int64_t untimed_ = 0;
  int64_t dims_ = 0, dim0_ = -1;
  std::string process_name_;
  std::unordered_map<int64_t, size_t> per_pid_;                    // host events per pid
  std::unordered_set<std::string_view> pooled_;                    // the texts in the Trace's pool
  Recent<std::string_view, 4> recent_texts_;                       // of pooled_
  Recent<std::pair<std::string_view, uint32_t>, 8> recent_names_;  // of names_
  std::unordered_map<std::string_view, uint32_t> names_;  // the event names interned so far, and their traits
  std::unordered_set<std::string_view> step_names_;       // interned
};

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// Throws the DataError of text that is not JSON at character `offset` of the trace's text.
[[noreturn]] void not_json(const std::string& path, uint64_t offset, unsigned char c, bool extra) {
  fail(path, "not JSON (parse error at " + place_of(path, offset) + ": " + reason_at(c, extra) + ")");
}

/// The parser over a trace's text, piece by piece: a byte order mark skipped, a parse error or
/// text after the document thrown; the end of the text checked (empty, white space only,
/// truncated).
class TraceParser {
 public:
  TraceParser(const std::string& path, Trace& t, TraceSink& sink)
      : path_(path), buf_(path), parser_(options(), t, sink, path) {}

  void read_all() {
    for (auto [text, n] = buf_.block(); n > 0; std::tie(text, n) = buf_.block()) {
      if (at_ == 0 && n >= 3 && std::memcmp(text, "\xEF\xBB\xBF", 3) == 0)  // a UTF-8 byte order mark
        text += 3, n -= 3, at_ = 3;
      for (size_t i = 0; i < n && !text_seen_; ++i) text_seen_ = !is_json_space(text[i]);
      const size_t used = complete_ ? 0 : parse(text, n);
      if (complete_) check_space_after(text, used, n);
      at_ += n;
    }
    if (!text_seen_) fail(path_, no_text());
    json::error_code ec;
    if (!complete_ && (parser_.write_some(false, nullptr, 0, ec), ec))
      fail(path_,
           "truncated: the JSON ends at byte " + std::to_string(buf_.delivered()) + " before it is complete");
  }

  const Handler& handler() const { return parser_.handler(); }
  uint64_t text_bytes() const { return buf_.delivered(); }

 private:
  static json::parse_options options() {
    json::parse_options opt;
    opt.max_depth = kMaxDepth + 1;  // the handler names the limit first
    return opt;
  }
  /// Parses a piece of text; the characters it used.
  size_t parse(const char* text, size_t n) {
    json::error_code ec;
    const size_t used = parser_.write_some(true, text, n, ec);
    if (ec) not_json(path_, at_ + used, used < n ? static_cast<unsigned char>(text[used]) : 0, false);
    complete_ = parser_.done();
    return used;
  }
  /// After the document, white space only.
  void check_space_after(const char* text, size_t from, size_t n) const {
    for (size_t i = from; i < n; ++i)
      if (!is_json_space(text[i])) not_json(path_, at_ + i, static_cast<unsigned char>(text[i]), true);
  }
  /// What a file with no text but white space holds, in words.
  std::string no_text() const {
    if (buf_.delivered() == 0)
      return std::string("empty file, not a trace") + (buf_.gzip() ? " (once decompressed)" : "");
    return "white space only (" + std::to_string(buf_.delivered()) + " bytes), not a trace";
  }

  const std::string& path_;
  TextReader buf_;
  json::basic_parser<Handler> parser_;
  uint64_t at_ = 0;  // characters before the piece being read
  bool complete_ = false, text_seen_ = false;
};

/// Why a trace with no timed events has none, where the handler saw a reason ("" when not).
std::string why_no_timed_events(const Handler& h) {
  if (h.untimed() > 0)
    return " (its " + std::to_string(h.untimed()) +
           " \"ph\": \"X\" events have no number \"ts\" and \"dur\": a string or another type where "
           "the trace format has microseconds)";
  if (h.saw_profiler_span())
    return " (torch.profiler's own span only: with a schedule, export the trace from on_trace_ready, before "
           "the end of its cycle clears the events)";
  return "";
}

}  // namespace

void scan_trace(const std::string& path, Trace& t, TraceSink& sink) {
  t.path = path;
  TraceParser reader(path, t, sink);
  reader.read_all();
  const Handler& h = reader.handler();
  if (!h.saw_events()) {
    fail(path,
         "not a profiler trace: no \"traceEvents\" list (torch.profiler's export_chrome_trace and "
         "tensorboard_trace_handler write one)");
  }
  if (t.event_count == 0) {
    // torch.profiler's span alone: a trace exported after its schedule's cycle ended and cleared
    // the events (torch 2.11 warns of it once, as "Profiler clears events at the end of each
    // cycle").
    fail(path,
         "no timed events (\"ph\": \"X\" with a \"ts\" and \"dur\") in its traceEvents: nothing to "
         "analyze" +
             why_no_timed_events(h));
  }
  t.text_bytes = reader.text_bytes();
  t.writer = writer_of(h.has_ptune_key(), h.process_name());
  t.host_pid = h.host_pid();
}

bool is_trace_file_name(const std::string& name) {
  return ends_with(name, ".json") || ends_with(name, ".json.gz");
}

std::vector<std::string> trace_files(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file or folder");
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  std::string sub;  // a folder inside, for the error where there are no files
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && (sub.empty() || entry.path().string() < sub)) sub = entry.path().string();
    if (!entry.is_regular_file(ec)) continue;
    if (is_trace_file_name(name)) files.push_back(entry.path().string());
  }
  if (ec) fail(path, "cannot list the folder: " + ec.message());
  if (files.empty())
    fail(path,
         "no trace files (*.json, *.json.gz) in this folder" +
             (sub.empty() ? std::string() : " (folders inside are not read: give one, e.g. '" + sub + "')"));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ptune::analyze
