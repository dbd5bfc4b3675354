#pragma once
/// torchvision's ResNet family in the LibTorch C++ frontend (resnet18/34/50/101/152,
/// resnext50_32x4d, wide_resnet50_2): the same blocks (BasicBlock, Bottleneck with the stride
/// and the groups on the 3x3 conv), the same initialization, and parameter/buffer names and
/// shapes identical to torchvision's state_dict.

#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/model.hpp"

namespace ptune::models {

/// torchvision's BasicBlock (two 3x3 convs; expansion 1).
struct BasicBlockImpl : torch::nn::Module {
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in_planes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

/// torchvision's Bottleneck (1x1, 3x3 with the stride and the groups, 1x1; expansion 4); its
/// inner width is int(planes * width_per_group / 64) * groups.
struct BottleneckImpl : torch::nn::Module {
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride, int64_t groups = 1,
                 int64_t width_per_group = 64);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

/// The ResNet trunk: conv1, bn1, relu, maxpool, layer1..4, avgpool, fc.
struct ResNetImpl : ModelImpl {
  /// `arch` is one of resnet_architectures(); throws std::invalid_argument otherwise.
  ResNetImpl(const std::string& arch, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x) override;
  std::vector<std::string> head_keys() const override { return {"fc.weight", "fc.bias"}; }
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace ptune::models
