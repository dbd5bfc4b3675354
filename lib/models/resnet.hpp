#pragma once
/// ResNet-18 and ResNet-50 in the LibTorch C++ frontend, exactly as torchvision defines them:
/// the same blocks (BasicBlock, Bottleneck with the stride on the 3x3 conv), the same
/// initialization, and parameter/buffer names and shapes identical to torchvision's state_dict.

#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

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

/// torchvision's Bottleneck (1x1, 3x3 with the stride, 1x1; expansion 4).
struct BottleneckImpl : torch::nn::Module {
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in_planes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

/// The ResNet trunk: conv1, bn1, relu, maxpool, layer1..4, avgpool, fc.
struct ResNetImpl : torch::nn::Module {
  /// `arch` is "resnet18" or "resnet50"; throws std::invalid_argument otherwise.
  ResNetImpl(const std::string& arch, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
  std::string arch;
};
TORCH_MODULE(ResNet);

/// The supported architecture names.
const std::vector<std::string>& architectures();

/// Builds `arch` with torchvision's initialization (the global torch seed decides the draw).
ResNet make(const std::string& arch, int64_t num_classes);

}  // namespace ptune::models
