#include "analyze/trace_parts.hpp"

#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <unordered_set>

#include "analyze/events.hpp"
#include "analyze/op_cost.hpp"
#include "core/errors.hpp"

namespace ptune::analyze {
namespace {

static_assert(std::is_trivially_copyable_v<Event> && std::is_trivially_copyable_v<MemorySample> &&
                  std::is_trivially_copyable_v<OpCost> && std::is_trivially_copyable_v<std::string_view>,
              "events are kept as their bytes");

/// Whether `dir` is a folder whose files are held in memory (tmpfs, ramfs).
bool in_memory_folder(const char* dir) {
  struct statfs fs {};
  if (::statfs(dir, &fs) != 0) return false;
  return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

/// Bytes written once and read back: in memory up to a limit, past it in an unlinked temporary
/// file (gone when closed, or when the process ends however it ends).
class TempFile {
 public:
  /// `in_memory`: the most bytes kept in memory (0: on disk from the first byte).
  TempFile(const std::string& trace, uint64_t in_memory) : trace_(trace), in_memory_(in_memory) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* p, size_t n) {
    if (fd_ < 0 && size_ + n > in_memory_) spill();
    const char* c = static_cast<const char*>(p);
    size_ += n;
    while (n > 0) {
      if (blocks_.empty() || last_ == kBlock) {
        if (fd_ >= 0 && !blocks_.empty()) write_out();
        if (blocks_.empty() || fd_ < 0) blocks_.push_back(std::make_unique<char[]>(kBlock));
        last_ = 0;
      }
      const size_t k = std::min(n, kBlock - last_);
      std::memcpy(blocks_.back().get() + last_, c, k);
      last_ += k, c += k, n -= k;
    }
  }
  /// Ends the writing: everything written is where read() finds it.
  void flush() {
    if (fd_ >= 0 && last_ > 0) write_out();
  }
  /// Reads up to `n` bytes at `offset`; the count read. What is written after the last flush()
  /// may not be read yet.
  size_t read(void* p, size_t n, uint64_t offset) const {
    if (fd_ < 0) return read_memory(static_cast<char*>(p), n, offset);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd_, static_cast<char*>(p) + got, n - got, static_cast<off_t>(offset + got));
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
  static constexpr size_t kBlock = size_t{1} << 20;

  /// Makes the file and moves what memory holds to it (one block stays, as the write buffer).
  void spill() {
    dir_ = events_folder();
    std::string name = dir_ + "/ptune-analyze-XXXXXX";
    fd_ = mkstemp(name.data());
    if (fd_ < 0) fail(std::strerror(errno));
    ::unlink(name.c_str());
    const size_t full = blocks_.empty() ? 0 : blocks_.size() - 1;
    for (size_t i = 0; i < full; ++i) write_all(blocks_[i].get(), kBlock);
    if (!blocks_.empty()) {
      std::swap(blocks_.front(), blocks_.back());
      blocks_.resize(1);
    }
  }
  /// Writes the buffer (the one block) to the file.
  void write_out() {
    write_all(blocks_.back().get(), last_);
    last_ = 0;
  }
  void write_all(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(std::strerror(w < 0 ? errno : EIO));
      p += w, n -= static_cast<size_t>(w);
    }
  }
  size_t read_memory(char* p, size_t n, uint64_t offset) const {
    size_t got = 0;
    while (got < n && offset + got < size_) {
      const uint64_t at = offset + got;
      const size_t k = std::min<uint64_t>({n - got, kBlock - at % kBlock, size_ - at});
      std::memcpy(p + got, blocks_[at / kBlock].get() + at % kBlock, k);
      got += k;
    }
    return got;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError("'" + trace_ + "': cannot write the trace's events to the temporary folder '" + dir_ +
                    "': " + why + "; TMPDIR chooses another folder");
  }
  std::string trace_, dir_;
  uint64_t in_memory_;
  int fd_ = -1;
  std::vector<std::unique_ptr<char[]>> blocks_;  // in memory: all the bytes; on disk: the write buffer
  size_t last_ = 0;                              // bytes in the last block
  uint64_t size_ = 0;
};

// A record: its header, then its body (an event: the Event, flags, the call stack and the
// operator's cost where flagged; a memory sample: the MemorySample). Names are kept as the views into the
// trace's pool that they are: the records are read back by the process that wrote them.
struct Header {
  uint32_t body = 0;  // bytes of the body
  uint8_t memory = 0;
  uint64_t seq = 0;  // the order in the file
  double ts = 0;
};
constexpr uint8_t kStack = 1, kCost = 2;
constexpr size_t kHeadBytes = sizeof(uint32_t) + sizeof(uint8_t) + sizeof(uint64_t) + sizeof(double);

/// The bytes of a record being written: a buffer that keeps its memory from record to record.
class Bytes {
 public:
  void clear() { n_ = 0; }
  void append(const char* p, size_t n) {
    if (n_ + n > buf_.size()) buf_.resize(std::max(buf_.size() * 2, n_ + n));
    std::memcpy(buf_.data() + n_, p, n);
    n_ += n;
  }
  char* data() { return buf_.data(); }
  size_t size() const { return n_; }

 private:
  std::vector<char> buf_ = std::vector<char>(512);
  size_t n_ = 0;
};

template <typename T>
void put(Bytes& out, const T& v) {
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
void put_list(Bytes& out, const std::vector<T>& v) {
  put(out, static_cast<uint32_t>(v.size()));
  if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> take_list(const char*& p, const char* end) {
  const auto n = take<uint32_t>(p, end);
  if (static_cast<size_t>(end - p) / sizeof(T) < n) throw DataError("a damaged temporary file of events");
  std::vector<T> v(n);
  if (n) std::memcpy(static_cast<void*>(v.data()), p, n * sizeof(T));
  p += n * sizeof(T);
  return v;
}

/// A stretch of a file holding whole records.
struct Chunk {
  uint64_t at = 0, size = 0;
};

/// Reads records one by one from stretches of a file, in the order given, a block at a time.
class RecordReader {
 public:
  RecordReader(const TempFile& f, std::vector<Chunk> chunks) : f_(f), chunks_(std::move(chunks)) {
    start();
    next();
  }
  RecordReader(const TempFile& f, uint64_t from, uint64_t to) : RecordReader(f, {Chunk{from, to - from}}) {}
  bool done() const { return done_; }
  /// The bytes of records it reads in all.
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const auto& c : chunks_) n += c.size;
    return n;
  }
  const Header& header() const { return h_; }
  std::string_view body() const { return {buf_.data() + body_at_, h_.body}; }
  void next() {
    pos_ += record_size_;
    record_size_ = 0;
    while (start_ + pos_ >= to_) {
      if (++chunk_ >= chunks_.size()) {
        done_ = true;
        return;
      }
      start();
    }
    have(kHeadBytes);
    const char* p = buf_.data() + pos_;
    const char* end = p + kHeadBytes;
    h_.body = take<uint32_t>(p, end);
    h_.memory = take<uint8_t>(p, end);
    h_.seq = take<uint64_t>(p, end);
    h_.ts = take<double>(p, end);
    have(kHeadBytes + h_.body);
    body_at_ = pos_ + kHeadBytes;
    record_size_ = kHeadBytes + h_.body;
  }
  /// The file offset of the record read.
  uint64_t offset() const { return start_ + pos_; }
  /// The record as read, header and body, to copy to another file.
  std::string_view record() const { return {buf_.data() + pos_, record_size_}; }
  void copy_to(TempFile& out) const { out.write(buf_.data() + pos_, record_size_); }

 private:
  /// Starts reading chunks_[chunk_] (none: done).
  void start() {
    if (chunk_ >= chunks_.size()) {
      start_ = to_ = 0;
      return;
    }
    start_ = chunks_[chunk_].at;
    to_ = start_ + chunks_[chunk_].size;
    pos_ = len_ = 0;
  }
  /// The buffer holds `n` bytes from pos_ on, reading more of the chunk where it does not.
  void have(size_t n) {
    if (len_ - pos_ >= n) return;
    std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
    len_ -= pos_;
    start_ += pos_;
    pos_ = 0;
    if (buf_.size() < n) buf_.resize(std::max(n, buf_.size() * 2));
    const uint64_t file_at = start_ + len_;  // the file offset after what the buffer holds
    const uint64_t left = to_ > file_at ? to_ - file_at : 0;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf_.size() - len_, left));
    const size_t got = f_.read(buf_.data() + len_, want, file_at);
    len_ += got;
    if (len_ < n) throw DataError("a temporary file of events ends early");
  }

  const TempFile& f_;
  std::vector<Chunk> chunks_;
  size_t chunk_ = 0;
  uint64_t start_ = 0;  // the file offset of the buffer's first byte
  uint64_t to_ = 0;     // the end of the chunk read
  std::vector<char> buf_ = std::vector<char>(size_t{1} << 18);
  size_t pos_ = 0, len_ = 0, body_at_ = 0, record_size_ = 0;
  bool done_ = false;
  Header h_;
};

/// Starts a record in `out` (cleared): its header, with the body's size filled in by end_record.
void begin_record(Bytes& out, bool memory, uint64_t seq, double ts) {
  out.clear();
  put(out, uint32_t{0});
  put(out, static_cast<uint8_t>(memory));
  put(out, seq);
  put(out, ts);
}
void end_record(TempFile& f, Bytes& out) {
  const auto body = static_cast<uint32_t>(out.size() - kHeadBytes);
  std::memcpy(out.data(), &body, sizeof body);
  f.write(out.data(), out.size());
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
  if (flags & kCost) t.costs.emplace_back(at, take<OpCost>(p, end));
  t.events.push_back(e);
}

/// The event of record `r`; false for a memory sample.
bool event_of(const RecordReader& r, Event& e) {
  if (r.header().memory) return false;
  const char* p = r.body().data();
  e = take<Event>(p, p + r.body().size());
  return true;
}

/// Writes a file's events to a temporary file as they are read, and notes its steps' starts.
class Spool : public TraceSink {
 public:
  Spool(TempFile& f, std::vector<double>& step_starts) : f_(f), steps_(step_starts) {}
  void event(const Event& e, OpInputs* in, std::string_view stack) override {
    if (is_step(e)) steps_.push_back(e.ts);
    OpCost cost;
    if (in) cost = op_cost(e.name, *in);
    const bool counted = cost.cls || cost.from_trace;
    begin_record(body_, false, seq_++, e.ts);
    put(body_, e);
    put(body_, static_cast<uint8_t>((stack.empty() ? 0 : kStack) | (counted ? kCost : 0)));
    if (!stack.empty()) put(body_, stack);
    if (counted) put(body_, cost);
    end_record(f_, body_);
  }
  void memory(const MemorySample& m) override {
    begin_record(body_, true, seq_++, m.ts);
    put(body_, m);
    end_record(f_, body_);
  }

 private:
  TempFile& f_;
  std::vector<double>& steps_;
  uint64_t seq_ = 0;
  Bytes body_;
};

/// Buckets of records: the stretches of a file holding each one's records (in file order), and
/// what its part needs.
struct Buckets {
  std::vector<double> from;                // each bucket's own time starts here (the first: -1e300)
  std::vector<uint64_t> bytes;             // each bucket's bytes of records
  const TempFile* file = nullptr;          // the file of the chunks
  std::vector<std::vector<Chunk>> chunks;  // where each bucket's records are
  std::vector<size_t> first, last;         // the first and last bucket each one needs (reach_of)
};

/// A stretch of the file in order whose records all belong to one step (index as in plan_buckets).
struct Run {
  uint64_t at = 0, size = 0;
  size_t step = 0;
};

}  // namespace

std::string events_folder(const char* tmpdir, bool tmp_in_memory, bool var_tmp_on_disk) {
  if (tmpdir && *tmpdir) return tmpdir;
  return tmp_in_memory && var_tmp_on_disk ? "/var/tmp" : "/tmp";
}

std::string events_folder() {
  return events_folder(std::getenv("TMPDIR"), in_memory_folder("/tmp"),
                       !in_memory_folder("/var/tmp") && ::access("/var/tmp", W_OK | X_OK) == 0);
}

struct SpooledTrace::Files {
  std::unique_ptr<TempFile> events;  // in file order
};

SpooledTrace::SpooledTrace(const std::string& path, uint64_t in_memory) : files_(std::make_unique<Files>()) {
  files_->events = std::make_unique<TempFile>(path, in_memory);
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

/// What a stretch of records (a step's, a bucket's) holds that decides which buckets its part
/// needs after it.
struct Reach {
  int64_t launch_lo = INT64_MAX, launch_hi = -1;  // the correlations of its launches (runtime calls)
  int64_t device_lo = INT64_MAX, device_hi = -1;  // the correlations of its device work
  double ops_end = -1e300;                        // the end of its last operator
  void add(const Event& e) {
    if (e.correlation >= 0 && e.kind == Kind::kRuntime)
      launch_lo = std::min(launch_lo, e.correlation), launch_hi = std::max(launch_hi, e.correlation);
    if (e.correlation >= 0 && is_device(e))
      device_lo = std::min(device_lo, e.correlation), device_hi = std::max(device_hi, e.correlation);
    if (e.kind == Kind::kCpuOp && !is_step(e) && !is_dataloader(e)) ops_end = std::max(ops_end, e.end());
  }
  void add(const Reach& r) {
    launch_lo = std::min(launch_lo, r.launch_lo), launch_hi = std::max(launch_hi, r.launch_hi);
    device_lo = std::min(device_lo, r.device_lo), device_hi = std::max(device_hi, r.device_hi);
    ops_end = std::max(ops_end, r.ops_end);
  }
};

/// The buckets each bucket's part needs, into `b.first` and `b.last`. After it: those holding
/// device work its steps may have launched (a device that runs behind its host, by as many steps
/// as it may be: CUPTI numbers launches in the order they are made, so a bucket's launches ran
/// where device work of correlations in their range is), those its operators reach into (their
/// children count), and one more (that work's end may reach into it). Before it: the one before,
/// and those holding the launches of its device work and the one before's (running on into it). `first` never
/// decreases from a bucket to the next (what a part carries to the next is what started before the next one's
/// first).
void reach_of(const std::vector<Reach>& reach, Buckets& b) {
  const size_t n = reach.size();
  std::vector<int64_t> after_lo(n + 1, INT64_MAX);  // the lowest device correlation from bucket j on
  for (size_t j = n; j-- > 0;) after_lo[j] = std::min(after_lo[j + 1], reach[j].device_lo);
  std::vector<int64_t> before_hi(n, -1);  // the highest launch correlation up to bucket j
  for (size_t j = 0; j < n; ++j) before_hi[j] = std::max(j ? before_hi[j - 1] : -1, reach[j].launch_hi);
  b.first.assign(n, 0);
  b.last.assign(n, 0);
  for (size_t k = 0; k < n; ++k) {
    const Reach& r = reach[k];
    size_t found = k;
    for (size_t j = k + 1; j < n && (after_lo[j] <= r.launch_hi || b.from[j] < r.ops_end); ++j)
      if ((reach[j].device_lo <= r.launch_hi && reach[j].device_hi >= r.launch_lo) || b.from[j] < r.ops_end)
        found = j;
    b.last[k] = std::min(n - 1, found + 1);
    // The launches of its device work and of the work before it that runs on into it.
    Reach dev = r;
    if (k > 0) dev.add(reach[k - 1]);
    found = k == 0 ? 0 : k - 1;
    for (size_t m = found; m-- > 0 && before_hi[m] >= dev.device_lo;)
      if (reach[m].launch_lo <= dev.device_hi && reach[m].launch_hi >= dev.device_lo) found = m;
    b.first[k] = found;
  }
  for (size_t k = n - 1; k-- > 0;) b.first[k] = std::min(b.first[k], b.first[k + 1]);
}

/// The bucket of each step: whole steps, about `target` bytes of records a bucket; the records
/// before the first step go with it. Returns per index (0: before the first step, i: step i - 1)
/// its bucket; sets each bucket's first own time and last bucket needed in `b`. `runs`: the
/// file's stretches of one step each, in file order, while there are at most `max_runs` (else
/// cleared).
std::vector<uint32_t> plan_buckets(const TempFile& f, const std::vector<double>& starts, uint64_t target,
                                   Buckets& b, std::vector<Run>& runs, size_t max_runs) {
  std::vector<uint64_t> size(starts.size() + 1, 0);
  std::vector<Reach> step_reach(starts.size() + 1);
  Event e;
  bool keep_runs = true;
  runs.clear();
  for (RecordReader r(f, 0, f.size()); !r.done(); r.next()) {
    const auto i =
        static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), r.header().ts) - starts.begin());
    size[i] += r.body().size();
    if (event_of(r, e)) step_reach[i].add(e);
    if (!keep_runs) continue;
    if (!runs.empty() && runs.back().step == i) {
      runs.back().size += r.record().size();
    } else if (runs.size() < max_runs) {
      runs.push_back({r.offset(), r.record().size(), i});
    } else {
      keep_runs = false;
      std::vector<Run>().swap(runs);
    }
  }
  std::vector<uint32_t> bucket(size.size(), 0);
  b.from = {-1e300};
  uint64_t acc = size[0] + (size.size() > 1 ? size[1] : 0);
  for (size_t i = 2; i < size.size(); ++i) {
    if (acc + size[i] > target && starts[i - 1] > b.from.back()) {
      b.from.push_back(starts[i - 1]);
      acc = 0;
    }
    bucket[i] = static_cast<uint32_t>(b.from.size() - 1);
    acc += size[i];
  }
  std::vector<Reach> reach(b.from.size());
  b.bytes.assign(b.from.size(), 0);
  for (size_t i = 0; i < size.size(); ++i) reach[bucket[i]].add(step_reach[i]), b.bytes[bucket[i]] += size[i];
  reach_of(reach, b);
  return bucket;
}

/// The records of `f` in buckets of about `target` bytes. Where the file holds each step's records
/// in few long stretches (Kineto writes the host's events in time order, then each device's), the
/// chunks are those stretches of `f` itself; else the records are sorted into `out` in one pass:
/// each bucket's records gather in a buffer of its own, written out as a chunk when full (at
/// most about 16 MiB of buffers in all). `part_bytes`: the memory allowed (the stretches noted take
/// at most an eighth of it).
Buckets sort_into_buckets(const TempFile& f, const std::vector<double>& starts, uint64_t target,
                          uint64_t part_bytes, TempFile& out) {
  Buckets b;
  std::vector<Run> runs;
  // Stretches of 16 KiB on average at least (each is a read of its own), and no more than an
  // eighth of the memory allowed holds.
  const size_t max_runs = std::max<uint64_t>(4096, std::min(f.size() >> 14, part_bytes / 8 / sizeof(Run)));
  const auto bucket = plan_buckets(f, starts, target, b, runs, max_runs);
  const size_t n = b.from.size();
  b.chunks.assign(n, {});
  if (!runs.empty()) {
    b.file = &f;
    for (const Run& run : runs) {
      auto& c = b.chunks[bucket[run.step]];
      if (!c.empty() && c.back().at + c.back().size == run.at)
        c.back().size += run.size;
      else
        c.push_back({run.at, run.size});
    }
    return b;
  }
  b.file = &out;
  const size_t cap = std::clamp<size_t>((size_t{16} << 20) / n, size_t{4} << 10, size_t{1} << 20);
  std::vector<std::string> buf(n);
  auto flush = [&](size_t k) {
    if (buf[k].empty()) return;
    b.chunks[k].push_back({out.size(), buf[k].size()});
    out.write(buf[k].data(), buf[k].size());
    buf[k].clear();
  };
  for (RecordReader r(f, 0, f.size()); !r.done(); r.next()) {
    const auto i = std::upper_bound(starts.begin(), starts.end(), r.header().ts) - starts.begin();
    const size_t k = bucket[static_cast<size_t>(i)];
    const std::string_view rec = r.record();
    if (buf[k].size() + rec.size() > cap) flush(k);
    buf[k].append(rec);
  }
  for (size_t k = 0; k < n; ++k) flush(k);
  out.flush();
  return b;
}

/// Loads into `t` the records of the readers, merged in file order. The events that start
/// before `boundary` and end after it are copied to `open` (what the next part carries).
void load_merged(std::vector<RecordReader>& in, Trace& t, double boundary, TempFile* open) {
  // Room for as many events as the records' bytes could hold (each is an Event and more).
  uint64_t bytes = 0;
  for (const auto& r : in) bytes += r.bytes();
  t.events.reserve(static_cast<size_t>(bytes / (kHeadBytes + sizeof(Event) + 1)));
  auto later = [&](size_t x, size_t y) { return in[x].header().seq > in[y].header().seq; };
  std::vector<size_t> heap;  // the readers not done, the one with the first record on top
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i].done()) heap.push_back(i);
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    RecordReader& next = in[heap.back()];
    load_record(next, t);
    if (open && !next.header().memory && t.events.back().ts < boundary && t.events.back().end() > boundary)
      next.copy_to(*open);
    next.next();
    if (next.done())
      heap.pop_back();
    else
      std::push_heap(heap.begin(), heap.end(), later);
  }
}

/// The parts of the buckets: consecutive buckets of about `own` bytes in all (one at least).
/// Returns each part's first bucket, and one past the last part's last.
std::vector<size_t> group_buckets(const Buckets& b, uint64_t own) {
  std::vector<size_t> start{0};
  uint64_t acc = 0;
  for (size_t k = 0; k < b.bytes.size(); ++k) {
    if (k > start.back() && acc + b.bytes[k] > own) start.push_back(k), acc = 0;
    acc += b.bytes[k];
  }
  start.push_back(b.bytes.size());
  return start;
}

}  // namespace

void SpooledTrace::for_each_part(uint64_t part_bytes, const std::function<void(const Trace&)>& f) const {
  const TempFile& events = *files_->events;
  if (bytes_ <= part_bytes || step_starts_.empty()) {
    Trace t = meta_;
    std::vector<RecordReader> all;
    all.emplace_back(events, 0, events.size());
    load_merged(all, t, 0, nullptr);
    f(t);
    return;
  }
  // Buckets of a sixteenth of a part; a part is the buckets of about three quarters of it, with
  // the buckets around them that they need (a device running a step behind: one or two).
  TempFile sorted(meta_.path, 0);
  const Buckets b =
      sort_into_buckets(events, step_starts_, std::max<uint64_t>(part_bytes / 16, 1), part_bytes, sorted);
  const auto parts = group_buckets(b, part_bytes / 4 * 3);
  const size_t n = b.from.size();
  // The events of earlier buckets still running where a part's first bucket starts (the
  // training loop's Python frames, a long annotation): carried from part to part.
  auto open = std::make_unique<TempFile>(meta_.path, part_bytes / 8);
  for (size_t p = 0; p + 1 < parts.size(); ++p) {
    const size_t own_first = parts[p], own_last = parts[p + 1] - 1;
    Trace t = meta_;
    t.part.from = b.from[own_first];
    t.part.to = own_last + 1 < n ? b.from[own_last + 1] : 1e300;
    t.part.first = own_first == 0;
    t.part.last = own_last + 1 == n;
    size_t last = own_last;
    for (size_t k = own_first; k <= own_last; ++k) last = std::max(last, b.last[k]);
    open->flush();
    std::vector<RecordReader> in;
    in.emplace_back(*open, 0, open->size());
    for (size_t j = b.first[own_first]; j <= last; ++j) in.emplace_back(*b.file, b.chunks[j]);
    auto next_open = std::make_unique<TempFile>(meta_.path, part_bytes / 8);
    load_merged(in, t, own_last + 1 < n ? b.from[b.first[own_last + 1]] : 1e300, next_open.get());
    open = std::move(next_open);
    f(t);
  }
}

}  // namespace ptune::analyze
