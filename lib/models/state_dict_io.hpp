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

/// Reads a torch.save(state_dict) file. Throws DataError naming the file and the cause
/// (not a zip archive, an object other than tensors, a missing storage record).
NamedTensors read_state_dict(const std::string& path);

/// Writes tensors as torch.save(state_dict) does (loadable by torch.load with
/// weights_only=True). Writes to a temporary name and renames. Throws std::runtime_error.
void write_state_dict(const std::string& path, const NamedTensors& tensors);

/// The module's parameters and buffers by their dotted names (its state_dict).
NamedTensors state_dict(const torch::nn::Module& module);

/// Copies a state_dict into the module. Every key must match a parameter or buffer of the
/// same shape, except a classifier head ("fc.weight", "fc.bias") whose shape differs: then
/// the module's freshly initialized head is kept (fine-tuning to other classes) and a note
/// is returned. Throws DataError naming `source` for missing, unexpected or mis-shaped keys.
std::string load_into(torch::nn::Module& module, const NamedTensors& tensors,
                      const std::string& source);

}  // namespace ptune::models
