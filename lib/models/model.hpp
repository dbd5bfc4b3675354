#pragma once
/// The architectures ptune trains, each built in the LibTorch C++ frontend exactly as
/// torchvision 0.26 defines it: the same module tree, parameter and buffer names and shapes
/// (state_dict keys), initialization scheme and defaults. docs/models.md lists them.

#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "config/arch.hpp"

namespace ptune::models {

/// What every architecture is to the trainer: a module with one forward, its name, and the
/// state_dict keys of its classifier head (kept freshly initialized when weights for another
/// number of classes are loaded).
struct ModelImpl : torch::nn::Module {
  explicit ModelImpl(std::string arch_name) : arch(std::move(arch_name)) {}
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  /// The head's weight then bias key, e.g. {"fc.weight", "fc.bias"}.
  virtual std::vector<std::string> head_keys() const = 0;
  std::string arch;
};
TORCH_MODULE(Model);

/// Builds `arch` with torchvision's initialization (the global torch seed decides the draw).
/// `image_size` matters to ViT only (its position embedding is fixed at construction, as
/// torchvision's vit_b_16(image_size=...)). Throws std::invalid_argument for an unknown name
/// or an image size the arch cannot take.
Model make(const std::string& arch, int64_t num_classes, int64_t image_size = 224);

}  // namespace ptune::models
