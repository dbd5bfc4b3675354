#include "analyze/trace_parts.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "analyze/events.hpp"
#include "core/errors.hpp"

namespace ptune::analyze {
namespace {

static_assert(std::is_trivially_copyable_v<Event> && std::is_trivially_copyable_v<MemorySample> &&
                  std::is_trivially_copyable_v<std::string_view>,
              "events are kept on disk as their bytes");

/// An unlinked temporary file: gone when closed, or when the process ends however it ends.
class TempFile {
 public:
  explicit TempFile(const std::string& trace) : trace_(trace) {
    std::error_code ec;
    dir_ = std::filesystem::temp_directory_path(ec).string();
    if (ec) dir_ = "/tmp";
    std::string name = dir_ + "/ptune-analyze-XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0) fail(std::strerror(errno));
    ::unlink(name.c_str());
    f_ = fdopen(fd, "w+b");
    if (!f_) {
      ::close(fd);
      fail(std::strerror(errno));
    }
    std::setvbuf(f_, nullptr, _IOFBF, 1 << 18);
  }
  ~TempFile() {
    if (f_) std::fclose(f_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail(std::strerror(errno ? errno : EIO));
    size_ += n;
  }
  /// Ends the writing: everything written is on the file, for read().
  void flush() {
    if (std::fflush(f_) != 0) fail(std::strerror(errno ? errno : EIO));
  }
  /// Reads up to `n` bytes at `offset`; the count read.
  size_t read(void* p, size_t n, uint64_t offset) const {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fileno(f_), static_cast<char*>(p) + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        throw DataError("'" + trace_ + "': cannot read the trace's events back from the temporary folder '" +
                        dir_ + "': " + std::strerror(errno));
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }
  uint64_t size() const { return size_; }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError("'" + trace_ + "': cannot write the trace's events to the temporary folder '" + dir_ +
                    "': " + why);
  }
  std::string trace_, dir_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0;
};

// A record: its header, then its body (an event: the Event, flags, the call stack and inputs
// where flagged; a memory sample: the MemorySample). Names are kept as the views into the
// trace's pool that they are: the records are read back by the process that wrote them.
struct Header {
  uint32_t body = 0;  // bytes of the body
  uint8_t memory = 0;
  uint64_t seq = 0;  // the order in the file
  double ts = 0;
};
constexpr uint8_t kStack = 1, kInputs = 2;

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take(const char*& p, const char* end) {
  T v{};
  if (end - p < static_cast<std::ptrdiff_t>(sizeof v)) throw DataError("a damaged temporary file of events");
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

template <typename T>
void put_list(std::string& out, const std::vector<T>& v) {
  put(out, static_cast<uint32_t>(v.size()));
  if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> take_list(const char*& p, const char* end) {
  const auto n = take<uint32_t>(p, end);
  std::vector<T> v;
  v.reserve(n);
  for (uint32_t i = 0; i < n; ++i) v.push_back(take<T>(p, end));
  return v;
}

/// Reads records one by one from [from, to) of a file.
class RecordReader {
 public:
  RecordReader(const TempFile& f, uint64_t from, uint64_t to) : f_(f), at_(from), to_(to) { next(); }
  bool done() const { return done_; }
  const Header& header() const { return h_; }
  const std::string& body() const { return body_; }
  void next() {
    if (at_ >= to_) {
      done_ = true;
      return;
    }
    char raw[sizeof(uint32_t) + sizeof(uint8_t) + sizeof(uint64_t) + sizeof(double)];
    if (f_.read(raw, sizeof raw, at_) != sizeof raw) throw DataError("a temporary file of events ends early");
    const char* p = raw;
    h_.body = take<uint32_t>(p, raw + sizeof raw);
    h_.memory = take<uint8_t>(p, raw + sizeof raw);
    h_.seq = take<uint64_t>(p, raw + sizeof raw);
    h_.ts = take<double>(p, raw + sizeof raw);
    body_.resize(h_.body);
    if (f_.read(body_.data(), h_.body, at_ + sizeof raw) != h_.body)
      throw DataError("a temporary file of events ends early");
    at_ += sizeof raw + h_.body;
  }
  /// The record as read, header and body, to copy to another file.
  void copy_to(TempFile& out) const {
    std::string head;
    put(head, h_.body);
    put(head, h_.memory);
    put(head, h_.seq);
    put(head, h_.ts);
    out.write(head.data(), head.size());
    out.write(body_.data(), body_.size());
  }

 private:
  const TempFile& f_;
  uint64_t at_, to_;
  bool done_ = false;
  Header h_;
  std::string body_;
};

void write_record(TempFile& f, bool memory, uint64_t seq, double ts, const std::string& body) {
  std::string head;
  put(head, static_cast<uint32_t>(body.size()));
  put(head, static_cast<uint8_t>(memory));
  put(head, seq);
  put(head, ts);
  f.write(head.data(), head.size());
  f.write(body.data(), body.size());
}

/// Adds the record `r` to `t`: its event (with its stack and inputs) or memory sample.
void load_record(const RecordReader& r, Trace& t) {
  const char* p = r.body().data();
  const char* end = p + r.body().size();
  if (r.header().memory) {
    t.memory.push_back(take<MemorySample>(p, end));
    return;
  }
  const auto e = take<Event>(p, end);
  const auto flags = take<uint8_t>(p, end);
  const size_t at = t.events.size();
  if (flags & kStack) t.call_stacks.emplace(at, take<std::string_view>(p, end));
  if (flags & kInputs) {
    OpInputs in;
    in.flops = take<double>(p, end);
    const auto n = take<uint32_t>(p, end);
    for (uint32_t i = 0; i < n; ++i) in.dims.push_back(take_list<int64_t>(p, end));
    in.types = take_list<std::string_view>(p, end);
    in.concrete = take_list<std::string_view>(p, end);
    t.inputs.emplace(at, std::move(in));
  }
  t.events.push_back(e);
}

/// Writes a file's events to a temporary file as they are read, and notes its steps' starts.
class Spool : public TraceSink {
 public:
  Spool(TempFile& f, std::vector<double>& step_starts) : f_(f), steps_(step_starts) {}
  void event(const Event& e, OpInputs* in, std::string_view stack) override {
    if (is_step(e)) steps_.push_back(e.ts);
    body_.clear();
    put(body_, e);
    put(body_, static_cast<uint8_t>((stack.empty() ? 0 : kStack) | (in ? kInputs : 0)));
    if (!stack.empty()) put(body_, stack);
    if (in) {
      put(body_, in->flops);
      put(body_, static_cast<uint32_t>(in->dims.size()));
      for (const auto& d : in->dims) put_list(body_, d);
      put_list(body_, in->types);
      put_list(body_, in->concrete);
    }
    write_record(f_, false, seq_++, e.ts, body_);
  }
  void memory(const MemorySample& m) override {
    body_.clear();
    put(body_, m);
    write_record(f_, true, seq_++, m.ts, body_);
  }

 private:
  TempFile& f_;
  std::vector<double>& steps_;
  uint64_t seq_ = 0;
  std::string body_;
};

/// Where each bucket of records starts in a file: bucket b is [at[b], at[b + 1]).
struct Buckets {
  std::vector<double> from;  // each bucket's own time starts here (the first: -1e300)
  std::vector<uint64_t> at;
};

}  // namespace

struct SpooledTrace::Files {
  std::unique_ptr<TempFile> events;  // in file order
};

SpooledTrace::SpooledTrace(const std::string& path) : files_(std::make_unique<Files>()) {
  files_->events = std::make_unique<TempFile>(path);
  Spool spool(*files_->events, step_starts_);
  scan_trace(path, meta_, spool);
  files_->events->flush();
  bytes_ = files_->events->size();
  std::sort(step_starts_.begin(), step_starts_.end());
}

SpooledTrace::~SpooledTrace() = default;
SpooledTrace::SpooledTrace(SpooledTrace&&) noexcept = default;
SpooledTrace& SpooledTrace::operator=(SpooledTrace&&) noexcept = default;

namespace {

/// The bucket of each step: whole steps, about `target` bytes of records a bucket; the records
/// before the first step go with it. Returns per index (0: before the first step, i: step i - 1)
/// its bucket, and each bucket's first own time.
std::vector<uint32_t> plan_buckets(const TempFile& f, const std::vector<double>& starts, uint64_t target,
                                   std::vector<double>& from) {
  std::vector<uint64_t> size(starts.size() + 1, 0);
  for (RecordReader r(f, 0, f.size()); !r.done(); r.next()) {
    const auto i = std::upper_bound(starts.begin(), starts.end(), r.header().ts) - starts.begin();
    size[static_cast<size_t>(i)] += r.body().size();
  }
  std::vector<uint32_t> bucket(size.size(), 0);
  from = {-1e300};
  uint64_t acc = size[0] + (size.size() > 1 ? size[1] : 0);
  for (size_t i = 2; i < size.size(); ++i) {
    if (acc + size[i] > target && starts[i - 1] > from.back()) {
      from.push_back(starts[i - 1]);
      acc = 0;
    }
    bucket[i] = static_cast<uint32_t>(from.size() - 1);
    acc += size[i];
  }
  return bucket;
}

/// The records of `f` sorted into buckets, one after the other in `out`; a bucket's records in
/// file order. At most kOpen temporary files are open at a time (rounds over `f`).
Buckets sort_into_buckets(const TempFile& f, const std::vector<double>& starts, uint64_t target,
                          TempFile& out, const std::string& path) {
  Buckets b;
  const auto bucket = plan_buckets(f, starts, target, b.from);
  const size_t n = b.from.size();
  constexpr size_t kOpen = 64;
  for (size_t first = 0; first < n; first += kOpen) {
    const size_t last = std::min(n, first + kOpen);
    std::vector<std::unique_ptr<TempFile>> tmp;
    for (size_t i = first; i < last; ++i) tmp.push_back(std::make_unique<TempFile>(path));
    for (RecordReader r(f, 0, f.size()); !r.done(); r.next()) {
      const auto i = std::upper_bound(starts.begin(), starts.end(), r.header().ts) - starts.begin();
      const size_t k = bucket[static_cast<size_t>(i)];
      if (k >= first && k < last) r.copy_to(*tmp[k - first]);
    }
    std::vector<char> buf(1 << 20);
    for (auto& t : tmp) {
      t->flush();
      b.at.push_back(out.size());
      for (uint64_t at = 0; at < t->size();) {
        const size_t got = t->read(buf.data(), buf.size(), at);
        out.write(buf.data(), got);
        at += got;
      }
    }
  }
  b.at.push_back(out.size());
  out.flush();
  return b;
}

/// Loads into `t` the records of the readers, merged in file order.
void load_merged(std::vector<RecordReader>& in, Trace& t) {
  while (true) {
    RecordReader* next = nullptr;
    for (auto& r : in)
      if (!r.done() && (!next || r.header().seq < next->header().seq)) next = &r;
    if (!next) return;
    load_record(*next, t);
    next->next();
  }
}

}  // namespace

void SpooledTrace::for_each_part(uint64_t part_bytes, const std::function<void(const Trace&)>& f) const {
  const TempFile& events = *files_->events;
  if (bytes_ <= part_bytes || step_starts_.empty()) {
    Trace t = meta_;
    std::vector<RecordReader> all;
    all.emplace_back(events, 0, events.size());
    load_merged(all, t);
    f(t);
    return;
  }
  TempFile sorted(meta_.path);
  const Buckets b = sort_into_buckets(events, step_starts_, std::max<uint64_t>(part_bytes / 3, 1), sorted,
                                      meta_.path);
  const size_t n = b.from.size();
  for (size_t k = 0; k < n; ++k) {
    Trace t = meta_;
    t.part.from = b.from[k];
    t.part.to = k + 1 < n ? b.from[k + 1] : 1e300;
    t.part.first = k == 0;
    t.part.last = k + 1 == n;
    std::vector<RecordReader> in;
    for (size_t j = k == 0 ? 0 : k - 1; j <= std::min(n - 1, k + 1); ++j) in.emplace_back(sorted, b.at[j], b.at[j + 1]);
    load_merged(in, t);
    f(t);
  }
}

}  // namespace ptune::analyze
