#include "models/state_dict_io.hpp"

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "models/model.hpp"
#include "models/pickle.hpp"
#include "models/zip_records.hpp"

namespace ptune::models {
namespace {

using pickle::Value;
using pickle::ValuePtr;

std::string shape_str(at::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// True when `v` is a dict whose keys are strings and values tensors.
bool is_tensor_dict(const Value& v) {
  if (v.kind != Value::kDict || v.dict.empty()) return false;
  for (const auto& [k, x] : v.dict)
    if (k->kind != Value::kString || x->kind != Value::kTensor) return false;
  return true;
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

/// Throws the DataError for a TorchScript archive given as weights: a ptune checkpoint, or
/// another torch.jit.save archive.
[[noreturn]] void refuse_torchscript(const std::string& path) {
  bool checkpoint = false;
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    c10::IValue arch;
    checkpoint = archive.try_read("arch", arch);
  } catch (const std::exception&) {
  }
  throw DataError(checkpoint
                      ? path +
                            ": this is a ptune checkpoint, not a weights file: continue it with ptune train "
                            "--resume, or export its weights with ptune train --save-weights"
                      : path + ": a TorchScript archive (torch.jit.save), not a torch.save(state_dict) file");
}

/// The archive's data.pkl; throws DataError for a big-endian file or a damaged archive.
std::string read_data_pkl(caffe2::serialize::PyTorchStreamReader& reader, const std::string& path) {
  try {
    if (reader.hasRecord("byteorder")) {
      auto [ptr, size] = reader.getRecord("byteorder");
      std::string order(static_cast<const char*>(ptr.get()), size);
      if (order != "little")
        throw DataError(path + ": written with byte order '" + order + "'; only little-endian is supported");
    }
    auto [ptr, size] = reader.getRecord("data.pkl");
    return std::string(static_cast<const char*>(ptr.get()), size);
  } catch (const c10::Error&) {
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
}

/// The dict of tensors in `root`: itself, or the one a training script saved under
/// 'state_dict', 'model' or 'model_state_dict' (said in `notes`). Throws DataError naming the
/// keys found when there is none.
const Value* find_tensor_dict(const ValuePtr& root, const std::string& path,
                              std::vector<std::string>* notes) {
  if (root->kind != Value::kDict) throw DataError(path + ": expected a dict of tensors (a state_dict)");
  if (is_tensor_dict(*root)) return root.get();
  // Training scripts save {"epoch": ..., "state_dict": {...}, "optimizer": {...}}.
  const Value* dict = nullptr;
  std::string keys;
  for (const auto& [k, x] : root->dict) {
    if (k->kind != Value::kString) continue;
    keys += (keys.empty() ? "'" : ", '") + k->s + "'";
    if (!dict && is_tensor_dict(*x) &&
        (k->s == "state_dict" || k->s == "model" || k->s == "model_state_dict")) {
      dict = x.get();
      if (notes) notes->push_back(path + ": took the state_dict stored under the key '" + k->s + "'");
    }
  }
  if (!dict)
    throw DataError(path + ": expected a dict of tensors (a state_dict); found a dict with the keys " +
                    (keys.empty() ? std::string("(none)") : keys) +
                    " and no state_dict under 'state_dict', 'model' or 'model_state_dict'");
  return dict;
}

/// The tensors of a dict of tensors, by name; DDP's "module." prefix, when every key has it,
/// is stripped (said in `notes`).
NamedTensors named_tensors(const Value& dict, const std::string& path, std::vector<std::string>* notes) {
  NamedTensors out;
  bool all_module = true;
  for (auto& [k, v] : dict.dict) {
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

}  // namespace

NamedTensors read_state_dict(const std::string& path, std::vector<std::string>* notes) {
  const FileKind kind = identify(path);
  if (kind == FileKind::kMissing)
    throw DataError("cannot open weights '" + path + "': No such file or directory");
  if (const std::string why = unreadable_kind(path, kind); !why.empty()) throw DataError(why);
  if (kind == FileKind::kTorchScript) refuse_torchscript(path);
  verify_records(path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception&) {
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
  const std::string pkl = read_data_pkl(*reader, path);
  std::unique_ptr<pickle::Unpickled> unpickled;  // owns every value until the tensors are out
  try {
    unpickled = std::make_unique<pickle::Unpickled>(pkl, *reader, path);
  } catch (const c10::Error&) {  // a storage record that cannot be read: the zip is damaged
    throw DataError(unreadable_kind(path, FileKind::kCorruptZip));
  }
  return named_tensors(*find_tensor_dict(unpickled->root(), path, notes), path, notes);
}

void write_state_dict(const std::string& path, const NamedTensors& tensors, const std::string& what) {
  NamedTensors storages;  // each tensor's own bytes, contiguous, on the CPU
  for (const auto& [name, t] : tensors) storages.emplace_back(name, t.detach().to(at::kCPU).contiguous());
  const std::string pkl = pickle::state_dict_pickle(storages);
  // Through ptune's checked writer (see files::Output::sink): the zip writer never sees a
  // failed write, which it would raise from its destructor.
  files::write_atomically(path, what, [&](files::Output& out) {
    caffe2::serialize::PyTorchStreamWriter writer(out.sink());
    writer.writeRecord("data.pkl", pkl.data(), pkl.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t k = 0; k < storages.size(); ++k) {
      const at::Tensor& t = storages[k].second;
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
