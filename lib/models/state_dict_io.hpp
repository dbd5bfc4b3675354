#pragma once
/// Reads and writes state_dict files in the format of Python's torch.save (a zip archive with
/// a pickle and one record per tensor storage), so weights move both ways between ptune and
/// torchvision. Only what a state_dict holds is understood: ordered dicts of tensors.

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace ptune::models {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// What a file given as weights or as a checkpoint is, from its first bytes and zip records.
enum class FileKind {
  kMissing,      // no such file (or unreadable)
  kFolder,       // a directory
  kSpecial,      // a FIFO, a device or a socket: never opened (a FIFO would wait for a writer)
  kEmpty,        // zero bytes
  kNotZip,       // not a zip archive (e.g. torch.save's legacy format, or not PyTorch at all)
  kCorruptZip,   // starts as a zip archive but cannot be read (truncated, damaged)
  kTorchScript,  // a TorchScript-style archive: ptune's checkpoints, torch.jit.save files
  kTorchSave,    // a torch.save archive (a pickle and tensor records): a state_dict or more
};

/// Identifies `path`. Never throws.
FileKind identify(const std::string& path);

/// One line naming `path` and what is wrong with it for kinds no reader takes (missing, folder,
/// empty, not a zip, damaged); "" for kTorchScript and kTorchSave.
std::string unreadable_kind(const std::string& path, FileKind kind);

/// Reads a torch.save(state_dict) file. Also accepted, with a note appended to `notes` (if
/// given): a state_dict saved under a key ({"state_dict": ...}, {"model": ...},
/// {"model_state_dict": ...}, as training scripts save checkpoints) and DDP's "module."
/// prefix on every key (stripped). Throws DataError naming the file and what it is when it is
/// not a state_dict: a folder, an empty, truncated or non-zip file, a ptune checkpoint ("use
/// --resume"), a TorchScript archive, a whole pickled module (torch.save(model)), a dict
/// without tensors, a record that fails its CRC-32 check (models/zip_records.hpp); never LibTorch's
/// internal messages. Executes nothing from the pickle.
NamedTensors read_state_dict(const std::string& path, std::vector<std::string>* notes = nullptr);

/// Writes tensors as torch.save(state_dict) does (loadable by torch.load with
/// weights_only=True), atomically (files::write_atomically; `what` names the file's origin in
/// errors, e.g. "--save-weights"). Throws WriteError ("cannot write <what> '<path>': <reason>").
void write_state_dict(const std::string& path, const NamedTensors& tensors,
                      const std::string& what = "weights");

/// The module's parameters and buffers by their dotted names (its state_dict).
NamedTensors state_dict(const torch::nn::Module& module);

/// Copies a state_dict into the module. Every key must match a parameter or buffer of the
/// same shape, except a classifier head (ResNet's "fc", or ModelImpl::head_keys()) whose shape differs: then
/// the module's freshly initialized head is kept (fine-tuning to other classes) and a note
/// is returned. A missing BatchNorm "num_batches_tracked" becomes 0, as PyTorch's
/// load_state_dict(strict=True) does for state_dicts saved without it. Throws DataError
/// naming `source` for missing, unexpected or mis-shaped keys.
std::string load_into(torch::nn::Module& module, const NamedTensors& tensors, const std::string& source);

}  // namespace ptune::models
