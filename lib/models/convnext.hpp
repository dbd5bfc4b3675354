#pragma once
/// torchvision's ConvNeXt-Tiny (convnext_tiny): a 4x4/4 patchify stem, stages of CNBlocks
/// (depthwise 7x7 conv, LayerNorm, MLP x4 with GELU, layer scale 1e-6, stochastic depth rising
/// linearly to 0.1), LayerNorm2d + 2x2/2 conv downsampling, LayerNorm2d-Flatten-Linear head.

#include <vector>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/layers.hpp"
#include "models/model.hpp"

namespace ptune::models {

/// torchvision.models.convnext.CNBlock: "block" = [0 dwconv, 1 Permute, 2 LayerNorm, 3 Linear,
/// 4 GELU, 5 Linear, 6 Permute], "layer_scale", stochastic depth in "row" mode.
struct CNBlockImpl : torch::nn::Module {
  CNBlockImpl(int64_t dim, double layer_scale, double stochastic_depth_prob);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Conv2d dwconv{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear pw1{nullptr}, pw2{nullptr};
  torch::Tensor layer_scale;
  double stochastic_depth_prob;
};
TORCH_MODULE(CNBlock);

struct ConvNeXtImpl : ModelImpl {
  ConvNeXtImpl(const std::string& arch, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x) override;
  std::vector<std::string> head_keys() const override { return {"classifier.2.weight", "classifier.2.bias"}; }
  torch::nn::Sequential features{nullptr};
  LayerNorm2d head_norm{nullptr};   // classifier.0
  torch::nn::Linear head{nullptr};  // classifier.2
};
TORCH_MODULE(ConvNeXt);

}  // namespace ptune::models
