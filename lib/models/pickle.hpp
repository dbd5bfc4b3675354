#pragma once
/// The pickle of a torch.save(state_dict) archive (its data.pkl), read and written. Only what a
/// state_dict holds is understood: dicts, lists, tuples, numbers, strings and tensors rebuilt
/// from the archive's storage records; nothing in the pickle is executed.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace ptune::models::pickle {

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

/// The values of one pickle: read from `data`, tensors from `reader`'s storage records. Owns
/// every value it made (values can hold each other in cycles, and in chains a million deep) and
/// empties them all when destroyed, so that nothing leaks and no destructor recurses. Throws
/// DataError naming `file` (truncated, an opcode a state_dict does not use, a pickled object that
/// is not a tensor, as torch.save(model) writes), and c10::Error where a storage record cannot
/// be read.
class Unpickled {
 public:
  Unpickled(const std::string& data, caffe2::serialize::PyTorchStreamReader& reader, const std::string& file);
  ~Unpickled();
  Unpickled(const Unpickled&) = delete;
  Unpickled& operator=(const Unpickled&) = delete;
  const ValuePtr& root() const { return root_; }

 private:
  ValuePtr root_;
  std::vector<ValuePtr> made_;
};

/// The pickle of an OrderedDict of `tensors` (each contiguous and on the CPU) as torch.save
/// writes it (protocol 2): tensor k's storage is the archive's record "data/k". Throws
/// std::runtime_error for a dtype torch.save has no storage class for.
std::string state_dict_pickle(const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace ptune::models::pickle
