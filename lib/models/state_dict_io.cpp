#include "models/state_dict_io.hpp"

#include "models/model.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>
#include <zlib.h>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace ptune::models {
namespace {

// ---- a minimal unpickler for the objects a state_dict contains ----------------------------

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kTensor, kStorage, kMark };
  Kind kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s, s2;                                // string; global module/name
  std::vector<ValuePtr> items;                      // tuple, list
  std::vector<std::pair<ValuePtr, ValuePtr>> dict;  // dict (ordered)
  at::Tensor tensor;                                // tensor or storage
};

at::ScalarType storage_dtype(const std::string& name, const std::string& file) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"FloatStorage", at::kFloat},       {"DoubleStorage", at::kDouble}, {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong},     {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},       {"CharStorage", at::kChar},     {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool}};
  auto it = kTypes.find(name);
  if (it == kTypes.end()) throw DataError(file + ": unsupported storage type torch." + name);
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const std::string& data, caffe2::serialize::PyTorchStreamReader& reader, const std::string& file)
      : data_(data), reader_(reader), file_(file) {}

  /// Values can hold each other in cycles (a list appended to itself through the memo) and
  /// in chains a million deep (a list in a list in ...): empty every value first, so that
  /// nothing leaks and no destructor recurses down the chain.
  ~Unpickler() {
    for (const ValuePtr& v : made_) {
      v->items.clear();
      v->dict.clear();
    }
  }

  ValuePtr run() {
    while (true) {
      uint8_t op = u8();
      switch (op) {
        case 0x80:
          u8();
          break;  // PROTO
        case 0x95:
          pos_ += 8;
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          push(make(Value::kMark));
          break;  // MARK
        case 'N':
          push(make(Value::kNone));
          break;
        case 0x88:
        case 0x89: {
          auto v = make(Value::kBool);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'K':
          push_int(u8());
          break;  // BININT1
        case 'M':
          push_int(u16());
          break;  // BININT2
        case 'J':
          push_int(static_cast<int32_t>(u32()));
          break;      // BININT
        case 0x8a: {  // LONG1
          uint8_t n = u8();
          need(n);
          int64_t v = 0;
          for (int k = 0; k < n && k < 8; ++k)
            v |= static_cast<int64_t>(static_cast<uint8_t>(data_[pos_ + k])) << (8 * k);
          if (n > 0 && n < 8 && (static_cast<uint8_t>(data_[pos_ + n - 1]) & 0x80))
            v -= int64_t(1) << (8 * n);
          pos_ += n;
          push_int(v);
          break;
        }
        case 'G': {  // BINFLOAT (big-endian)
          need(8);
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(data_[pos_ + k]);
          pos_ += 8;
          auto v = make(Value::kFloat);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'X':
          push_str(u32());
          break;  // BINUNICODE
        case 0x8c:
          push_str(u8());
          break;     // SHORT_BINUNICODE
        case 'c': {  // GLOBAL
          auto v = make(Value::kGlobal);
          v->s = line();
          v->s2 = line();
          push(v);
          break;
        }
        case 'q':
          memo_[u8()] = top();
          break;  // BINPUT
        case 'r':
          memo_[u32()] = top();
          break;  // LONG_BINPUT
        case 'h':
          push(memo_at(u8()));
          break;  // BINGET
        case 'j':
          push(memo_at(u32()));
          break;  // LONG_BINGET
        case ')':
          push(make(Value::kTuple));
          break;  // EMPTY_TUPLE
        case 't': {
          auto v = make(Value::kTuple);
          v->items = pop_to_mark();
          push(v);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          auto v = make(Value::kTuple);
          v->items.resize(op - 0x84);
          for (auto it = v->items.rbegin(); it != v->items.rend(); ++it) *it = pop();
          push(v);
          break;
        }
        case ']':
          push(make(Value::kList));
          break;  // EMPTY_LIST
        case 'a': {
          auto x = pop();
          top()->items.push_back(x);
          break;
        }
        case 'e': {
          auto xs = pop_to_mark();
          auto& l = top()->items;
          l.insert(l.end(), xs.begin(), xs.end());
          break;
        }
        case '}':
          push(make(Value::kDict));
          break;  // EMPTY_DICT
        case 's': {
          auto v = pop();
          auto k = pop();
          top()->dict.emplace_back(k, v);
          break;
        }
        case 'u': {  // SETITEMS
          auto xs = pop_to_mark();
          if (xs.size() % 2) fail("odd SETITEMS");
          for (size_t k = 0; k < xs.size(); k += 2) top()->dict.emplace_back(xs[k], xs[k + 1]);
          break;
        }
        case 'b':
          pop();
          break;  // BUILD: attributes such as _metadata
        case 'Q':
          push(persistent(pop()));
          break;  // BINPERSID
        case 'R': {
          auto args = pop();
          auto fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
          pop();
          auto cls = pop();
          if (cls->kind == Value::kGlobal) fail_object(cls->s + "." + cls->s2);
          fail("unsupported NEWOBJ");
        }
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", op);
          fail(std::string("unsupported pickle opcode ") + buf);
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError(file_ + ": cannot read the state_dict: " + why);
  }
  /// A pickled object of class `name`: nothing is constructed, the file is named for what it is.
  [[noreturn]] void fail_object(const std::string& name) const {
    throw DataError(file_ + ": holds a pickled " + name +
                    " object, not a state_dict of tensors (torch.save(model) saves the whole module); in "
                    "Python, save torch.save(model.state_dict(), path) instead");
  }
  void need(size_t n) const {
    if (pos_ + n > data_.size()) fail("truncated pickle");
  }
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(data_[pos_++]);
  }
  uint32_t u16() {
    uint32_t a = u8();
    return a | (uint32_t(u8()) << 8);
  }
  uint32_t u32() {
    uint32_t a = u16();
    return a | (u16() << 16);
  }
  std::string line() {
    auto e = data_.find('\n', pos_);
    if (e == std::string::npos) fail("truncated pickle");
    std::string s = data_.substr(pos_, e - pos_);
    pos_ = e + 1;
    return s;
  }
  ValuePtr make(Value::Kind k) {
    auto v = std::make_shared<Value>();
    v->kind = k;
    made_.push_back(v);
    return v;
  }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t i) {
    auto v = make(Value::kInt);
    v->i = i;
    push(v);
  }
  void push_str(size_t n) {
    need(n);
    auto v = make(Value::kString);
    v->s = data_.substr(pos_, n);
    pos_ += n;
    push(v);
  }
  ValuePtr top() {
    if (stack_.empty()) fail("stack underflow");
    return stack_.back();
  }
  ValuePtr pop() {
    auto v = top();
    stack_.pop_back();
    return v;
  }
  ValuePtr memo_at(uint32_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) fail("bad memo reference");
    return it->second;
  }
  std::vector<ValuePtr> pop_to_mark() {
    std::vector<ValuePtr> out;
    while (true) {
      auto v = pop();
      if (v->kind == Value::kMark) break;
      out.push_back(v);
    }
    return {out.rbegin(), out.rend()};
  }
  std::vector<int64_t> ints(const ValuePtr& t) {
    std::vector<int64_t> out;
    for (auto& x : t->items) {
      if (x->kind != Value::kInt) fail("expected a tuple of integers");
      out.push_back(x->i);
    }
    return out;
  }

  ValuePtr persistent(const ValuePtr& pid) {
    // ('storage', torch.<Type>Storage, key, location, numel)
    if (pid->kind != Value::kTuple || pid->items.size() < 5 || pid->items[0]->s != "storage" ||
        pid->items[1]->kind != Value::kGlobal)
      fail("unsupported persistent id");
    const std::string key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    at::ScalarType dtype = storage_dtype(pid->items[1]->s2, file_);
    const int64_t numel = pid->items[4]->i;
    const std::string record = "data/" + key;
    if (!reader_.hasRecord(record)) fail("missing storage record '" + record + "'");
    // The record must hold the storage before anything is allocated: a hostile numel would
    // otherwise ask for terabytes (or overflow the byte count).
    const size_t elem = at::elementSize(dtype);
    if (numel < 0 || static_cast<uint64_t>(numel) > reader_.getRecordSize(record) / elem)
      fail("storage record '" + record + "' is shorter than its tensor");
    const size_t bytes = static_cast<size_t>(numel) * elem;
    auto v = make(Value::kStorage);
    v->tensor = at::empty({numel}, at::TensorOptions().dtype(dtype));
    auto [ptr, size] = reader_.getRecord(record);
    if (size < bytes) fail("storage record '" + record + "' is shorter than its tensor");
    if (bytes > 0) std::memcpy(v->tensor.data_ptr(), ptr.get(), bytes);
    storages_[key] = v;
    return v;
  }

  ValuePtr reduce(const ValuePtr& fn, const ValuePtr& args) {
    if (fn->kind != Value::kGlobal || args->kind != Value::kTuple) fail("unsupported REDUCE");
    const std::string name = fn->s + "." + fn->s2;
    if (name == "collections.OrderedDict") return make(Value::kDict);
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      if (args->items.size() < 4 || args->items[0]->kind != Value::kStorage) fail("bad tensor record");
      auto v = make(Value::kTensor);
      const at::Tensor& storage = args->items[0]->tensor;
      v->tensor = storage.as_strided(ints(args->items[2]), ints(args->items[3]), args->items[1]->i);
      return v;
    }
    if (name == "torch._utils._rebuild_parameter") {
      if (args->items.empty() || args->items[0]->kind != Value::kTensor) fail("bad parameter record");
      return args->items[0];
    }
    fail_object(name);
  }

  const std::string& data_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  const std::string& file_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::map<uint32_t, ValuePtr> memo_;
  std::map<std::string, ValuePtr> storages_;
  std::vector<ValuePtr> made_;  // every value made, emptied by the destructor
};

// ---- a pickle writer for an OrderedDict of tensors ------------------------------------------

class Pickler {
 public:
  std::string out;
  void op(char c) { out.push_back(c); }
  void u32(uint32_t v) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  void str(const std::string& s) {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void global(const std::string& mod, const std::string& name) {
    op('c');
    out += mod + "\n" + name + "\n";
  }
  void integer(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {
      op(static_cast<char>(0x8a));
      out.push_back(8);
      for (int k = 0; k < 8; ++k)
        out.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff));
    }
  }
  void int_tuple(at::IntArrayRef xs) {
    op('(');
    for (auto x : xs) integer(x);
    op('t');
  }
};

std::string storage_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "FloatStorage";
    case at::kDouble:
      return "DoubleStorage";
    case at::kHalf:
      return "HalfStorage";
    case at::kBFloat16:
      return "BFloat16Storage";
    case at::kLong:
      return "LongStorage";
    case at::kInt:
      return "IntStorage";
    case at::kShort:
      return "ShortStorage";
    case at::kChar:
      return "CharStorage";
    case at::kByte:
      return "ByteStorage";
    case at::kBool:
      return "BoolStorage";
    default:
      throw std::runtime_error(std::string("cannot save tensors of type ") + at::toString(t));
  }
}

// ---- the zip archive's own check: every record's CRC-32 ----------------------------------

/// Little-endian integers out of a byte buffer.
uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

/// One record as the zip's central directory describes it.
struct ZipRecord {
  std::string name;
  uint32_t crc = 0;
  uint16_t method = 0;  // 0 stored (torch.save's), 8 deflated
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

/// A file read at offsets; every failure is a DataError naming the file as damaged.
class ArchiveFile {
 public:
  explicit ArchiveFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) throw DataError("cannot open '" + path + "': " + std::strerror(errno));
    std::fseek(f_, 0, SEEK_END);
    size_ = static_cast<uint64_t>(std::max(0L, std::ftell(f_)));
  }
  ~ArchiveFile() { std::fclose(f_); }
  ArchiveFile(const ArchiveFile&) = delete;
  ArchiveFile& operator=(const ArchiveFile&) = delete;
  uint64_t size() const { return size_; }
  [[noreturn]] void damaged(const std::string& why) const {
    throw DataError(path_ + ": a damaged zip archive: " + why);
  }
  /// Reads `n` bytes at `offset` into `out`; a read past the end is damage.
  void read(uint64_t offset, size_t n, unsigned char* out) const {
    if (offset > size_ || n > size_ - offset)
      damaged("a record reaches past the end of the file (truncated?)");
    if (std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0 || std::fread(out, 1, n, f_) != n)
      damaged("cannot read " + std::to_string(n) + " bytes at offset " + std::to_string(offset));
  }

 private:
  std::string path_;
  std::FILE* f_;
  uint64_t size_ = 0;
};

/// Where the central directory starts and how many records it holds (zip64 when needed).
std::pair<uint64_t, uint64_t> central_directory(const ArchiveFile& f) {
  constexpr uint64_t kEnd = 22;  // end-of-central-directory record, without its comment
  if (f.size() < kEnd) f.damaged("too short for a zip archive");
  const uint64_t tail = std::min<uint64_t>(f.size(), kEnd + 65535);
  std::vector<unsigned char> buf(tail);
  f.read(f.size() - tail, tail, buf.data());
  for (uint64_t i = tail - kEnd + 1; i-- > 0;) {
    const unsigned char* e = buf.data() + i;
    if (le(e, 4) != 0x06054b50) continue;
    uint64_t count = le(e + 10, 2), offset = le(e + 16, 4);
    if ((count == 0xFFFF || offset == 0xFFFFFFFF) && i >= 20 && le(e - 20, 4) == 0x07064b50) {
      unsigned char z[56];  // the zip64 end-of-central-directory record
      f.read(le(e - 20 + 8, 8), sizeof z, z);
      if (le(z, 4) != 0x06064b50) f.damaged("a broken zip64 end record");
      count = le(z + 32, 8);
      offset = le(z + 48, 8);
    }
    return {offset, count};
  }
  f.damaged("no end-of-central-directory record (truncated?)");
}

/// The central directory's records.
std::vector<ZipRecord> zip_records(const ArchiveFile& f) {
  auto [offset, count] = central_directory(f);
  std::vector<ZipRecord> out;
  for (uint64_t k = 0; k < count; ++k) {
    unsigned char h[46];
    f.read(offset, sizeof h, h);
    if (le(h, 4) != 0x02014b50) f.damaged("a broken central directory");
    ZipRecord r;
    r.method = static_cast<uint16_t>(le(h + 10, 2));
    r.crc = static_cast<uint32_t>(le(h + 16, 4));
    r.compressed = le(h + 20, 4);
    r.size = le(h + 24, 4);
    r.local_offset = le(h + 42, 4);
    const size_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    std::vector<unsigned char> var(name_len + extra_len);
    f.read(offset + sizeof h, var.size(), var.data());
    r.name.assign(var.begin(), var.begin() + static_cast<long>(name_len));
    // Zip64: the sizes and offset that did not fit, 8 bytes each, in this order.
    for (size_t x = name_len; x + 4 <= var.size();) {
      const uint64_t id = le(&var[x], 2), len = le(&var[x + 2], 2);
      size_t at = x + 4;
      if (id == 0x0001) {
        for (uint64_t* field : {&r.size, &r.compressed, &r.local_offset})
          if (*field == 0xFFFFFFFF && at + 8 <= x + 4 + len && at + 8 <= var.size())
            *field = le(&var[at], 8), at += 8;
      }
      x += 4 + len;
    }
    out.push_back(r);
    offset += sizeof h + name_len + extra_len + comment_len;
  }
  return out;
}

/// The CRC-32 of a record's bytes (inflated first when deflated); nullopt for another method.
std::optional<uint32_t> record_crc(const ArchiveFile& f, const ZipRecord& r) {
  unsigned char local[30];
  f.read(r.local_offset, sizeof local, local);
  if (le(local, 4) != 0x04034b50)
    f.damaged("record '" + r.name + "' has no local header where the directory says");
  uint64_t at = r.local_offset + sizeof local + le(local + 26, 2) + le(local + 28, 2);
  if (r.method != 0 && r.method != 8) return std::nullopt;
  uLong crc = crc32(0L, Z_NULL, 0);
  z_stream z{};
  if (r.method == 8 && inflateInit2(&z, -MAX_WBITS) != Z_OK)
    f.damaged("cannot inflate record '" + r.name + "'");
  std::vector<unsigned char> in(1u << 20), out(r.method == 8 ? 1u << 20 : 0);
  uint64_t left = r.compressed;
  int status = Z_OK;
  while (left > 0 && status != Z_STREAM_END) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.size()));
    f.read(at, n, in.data());
    at += n;
    left -= n;
    if (r.method == 0) {
      crc = crc32(crc, in.data(), static_cast<uInt>(n));
      continue;
    }
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      status = inflate(&z, Z_NO_FLUSH);
      if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) break;
      crc = crc32(crc, out.data(), static_cast<uInt>(out.size() - z.avail_out));
    } while (z.avail_out == 0 && status != Z_STREAM_END);
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) break;
  }
  if (r.method == 8) inflateEnd(&z);
  return static_cast<uint32_t>(crc);
}

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

FileKind identify(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return FileKind::kMissing;
  if (std::filesystem::is_directory(status)) return FileKind::kFolder;
  if (!std::filesystem::is_regular_file(status)) return FileKind::kSpecial;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return FileKind::kMissing;
  char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, f);
  std::fclose(f);
  if (got == 0) return FileKind::kEmpty;
  if (got != 2 || magic[0] != 'P' || magic[1] != 'K') return FileKind::kNotZip;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    if (reader.hasRecord("constants.pkl")) return FileKind::kTorchScript;
    return reader.hasRecord("data.pkl") ? FileKind::kTorchSave : FileKind::kCorruptZip;
  } catch (const std::exception&) {
    return FileKind::kCorruptZip;
  }
}

void verify_records(const std::string& path) {
  const ArchiveFile f(path);
  for (const ZipRecord& r : zip_records(f)) {
    // A writer may record no check (torch.save with compute_crc32 off writes 0).
    if (r.crc == 0) continue;
    const std::optional<uint32_t> crc = record_crc(f, r);
    if (!crc || *crc == r.crc) continue;
    char hex[64];
    std::snprintf(hex, sizeof hex, "stored 0x%08x, read 0x%08x", r.crc, *crc);
    throw DataError(path + ": damaged: record '" + r.name + "' fails its CRC-32 check (" + hex +
                    "): its bytes changed after it was written");
  }
}

std::string unreadable_kind(const std::string& path, FileKind kind) {
  switch (kind) {
    case FileKind::kMissing:
      return "cannot open '" + path + "': No such file or directory";
    case FileKind::kFolder:
      return path + ": is a folder, not a file";
    case FileKind::kSpecial:
      return path + ": not a regular file (a FIFO, a device or a socket)";
    case FileKind::kEmpty:
      return path + ": empty file";
    case FileKind::kNotZip:
      return path +
             ": not a torch.save zip archive (a legacy-format file? re-save it in Python with "
             "torch.save(torch.load(p), p))";
    case FileKind::kCorruptZip:
      return path + ": a damaged or truncated zip archive";
    default:
      return "";
  }
}

namespace {

/// True when `v` is a dict whose keys are strings and values tensors.
bool is_tensor_dict(const Value& v) {
  if (v.kind != Value::kDict || v.dict.empty()) return false;
  for (const auto& [k, x] : v.dict)
    if (k->kind != Value::kString || x->kind != Value::kTensor) return false;
  return true;
}

}  // namespace

NamedTensors read_state_dict(const std::string& path, std::vector<std::string>* notes) {
  const FileKind kind = identify(path);
  if (kind == FileKind::kMissing)
    throw DataError("cannot open weights '" + path + "': No such file or directory");
  if (const std::string why = unreadable_kind(path, kind); !why.empty()) throw DataError(why);
  if (kind == FileKind::kTorchScript) {
    bool checkpoint = false;
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path);
      c10::IValue arch;
      checkpoint = archive.try_read("arch", arch);
    } catch (const std::exception&) {
    }
    throw DataError(
        checkpoint ? path +
                         ": this is a ptune checkpoint, not a weights file: continue it with ptune train "
                         "--resume, or export its weights with ptune train --save-weights"
                   : path + ": a TorchScript archive (torch.jit.save), not a torch.save(state_dict) file");
  }
  verify_records(path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception&) {
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
  std::string pkl;
  try {
    if (reader->hasRecord("byteorder")) {
      auto [ptr, size] = reader->getRecord("byteorder");
      std::string order(static_cast<const char*>(ptr.get()), size);
      if (order != "little")
        throw DataError(path + ": written with byte order '" + order + "'; only little-endian is supported");
    }
    auto [ptr, size] = reader->getRecord("data.pkl");
    pkl.assign(static_cast<const char*>(ptr.get()), size);
  } catch (const c10::Error&) {
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
  Unpickler unpickler(pkl, *reader, path);  // owns every value until the tensors are out
  ValuePtr root;
  try {
    root = unpickler.run();
  } catch (const c10::Error&) {  // a storage record that cannot be read: the zip is damaged
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
  if (root->kind != Value::kDict) throw DataError(path + ": expected a dict of tensors (a state_dict)");
  const Value* dict = root.get();
  if (!is_tensor_dict(*dict)) {
    // Training scripts save {"epoch": ..., "state_dict": {...}, "optimizer": {...}}.
    std::string keys;
    for (const auto& [k, x] : root->dict) {
      if (k->kind != Value::kString) continue;
      keys += (keys.empty() ? "'" : ", '") + k->s + "'";
      if (dict == root.get() && is_tensor_dict(*x) &&
          (k->s == "state_dict" || k->s == "model" || k->s == "model_state_dict")) {
        dict = x.get();
        if (notes) notes->push_back(path + ": took the state_dict stored under the key '" + k->s + "'");
      }
    }
    if (dict == root.get())
      throw DataError(path + ": expected a dict of tensors (a state_dict); found a dict with the keys " +
                      (keys.empty() ? std::string("(none)") : keys) +
                      " and no state_dict under 'state_dict', 'model' or 'model_state_dict'");
  }
  NamedTensors out;
  bool all_module = true;
  for (auto& [k, v] : dict->dict) {
    out.emplace_back(k->s, v->tensor);
    all_module = all_module && k->s.rfind("module.", 0) == 0;
  }
  if (all_module) {
    // Saved from a DistributedDataParallel (or DataParallel) wrapper.
    for (auto& [k, v] : out) k = k.substr(7);
    if (notes) notes->push_back(path + ": stripped DDP's 'module.' prefix from every key");
  }
  return out;
}

void write_state_dict(const std::string& path, const NamedTensors& tensors, const std::string& what) {
  Pickler p;
  p.out = "\x80\x02";
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.op('(');
  std::vector<at::Tensor> storages;
  for (const auto& [name, t0] : tensors) {
    at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    const std::string key = std::to_string(storages.size());
    storages.push_back(t);
    p.str(name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');
    p.str("storage");
    p.global("torch", storage_name(t.scalar_type()));
    p.str(key);
    p.str("cpu");
    p.integer(t.numel());
    p.op('t');
    p.op('Q');
    p.integer(0);
    p.int_tuple(t.sizes());
    p.int_tuple(t.strides());
    p.op(static_cast<char>(0x89));  // requires_grad = False
    p.global("collections", "OrderedDict");
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
  }
  p.op('u');
  p.op('.');

  // Through ptune's checked writer (see files::Output::sink): the zip writer never sees a
  // failed write, which it would raise from its destructor.
  files::write_atomically(path, what, [&](files::Output& out) {
    caffe2::serialize::PyTorchStreamWriter writer(out.sink());
    writer.writeRecord("data.pkl", p.out.data(), p.out.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t k = 0; k < storages.size(); ++k) {
      const at::Tensor& t = storages[k];
      writer.writeRecord("data/" + std::to_string(k), t.data_ptr(), t.numel() * t.element_size());
    }
    writer.writeEndOfFile();
  });
}

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  // torchvision's order: each module's parameters, then its buffers, depth first.
  std::function<void(const torch::nn::Module&, const std::string&)> visit = [&](const torch::nn::Module& m,
                                                                                const std::string& prefix) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(prefix + b.key(), b.value());
    for (const auto& c : m.named_children()) visit(*c.value(), prefix + c.key() + ".");
  };
  visit(module, "");
  return out;
}

std::string load_into(torch::nn::Module& module, const NamedTensors& tensors, const std::string& source) {
  std::map<std::string, at::Tensor> own;
  for (auto& [k, v] : state_dict(module)) own[k] = v;
  std::map<std::string, at::Tensor> given(tensors.begin(), tensors.end());
  std::vector<std::string> missing, unexpected;
  for (auto& [k, v] : own) {
    if (given.count(k)) continue;
    // As BatchNorm's _load_from_state_dict: a state_dict saved without the counter gets 0.
    const std::string counter = ".num_batches_tracked";
    if (k.size() > counter.size() && k.compare(k.size() - counter.size(), counter.size(), counter) == 0) {
      given[k] = at::zeros_like(v);
      continue;
    }
    missing.push_back(k);
  }
  for (auto& [k, v] : given)
    if (!own.count(k)) unexpected.push_back(k);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 5) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  if (!missing.empty()) throw DataError(source + ": missing keys for this model: " + list(missing));
  if (!unexpected.empty()) throw DataError(source + ": keys this model does not have: " + list(unexpected));
  // The classifier head's keys (weight, bias): a ResNet's "fc", or what the model says.
  std::vector<std::string> head = {"fc.weight", "fc.bias"};
  if (const auto* m = dynamic_cast<const ModelImpl*>(&module)) head = m->head_keys();
  std::string note;
  torch::NoGradGuard no_grad;
  for (auto& [k, v] : own) {
    const at::Tensor& src = given[k];
    if (src.sizes() != v.sizes()) {
      if (std::find(head.begin(), head.end(), k) != head.end()) {
        note = source + ": the classifier head has shape " + shape_str(given[head[0]].sizes()) +
               " there and " + shape_str(own[head[0]].sizes()) +
               " here (model.num_classes); kept a freshly initialized head";
        continue;
      }
      throw DataError(source + ": " + k + " has shape " + shape_str(src.sizes()) + ", the model expects " +
                      shape_str(v.sizes()));
    }
    v.copy_(src);
  }
  return note;
}

}  // namespace ptune::models
