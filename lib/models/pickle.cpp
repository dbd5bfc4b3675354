#include "models/pickle.hpp"

#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>

#include "core/errors.hpp"

namespace ptune::models::pickle {
namespace {

// ---- a minimal unpickler for the objects a state_dict contains ----------------------------

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

  /// Every value made, handed over to their owner (Unpickled).
  std::vector<ValuePtr> take_made() { return std::move(made_); }

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
  std::vector<ValuePtr> made_;  // every value made (take_made)
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

}  // namespace

Unpickled::Unpickled(const std::string& data, caffe2::serialize::PyTorchStreamReader& reader,
                     const std::string& file) {
  Unpickler unpickler(data, reader, file);
  try {
    root_ = unpickler.run();
  } catch (...) {
    made_ = unpickler.take_made();
    for (const ValuePtr& v : made_) v->items.clear(), v->dict.clear();
    throw;
  }
  made_ = unpickler.take_made();
}

Unpickled::~Unpickled() {
  for (const ValuePtr& v : made_) {
    v->items.clear();
    v->dict.clear();
  }
}

std::string state_dict_pickle(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  Pickler p;
  p.out = "\x80\x02";
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.op('(');
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& [name, t] = tensors[k];
    const std::string key = std::to_string(k);
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
  return p.out;
}

}  // namespace ptune::models::pickle
