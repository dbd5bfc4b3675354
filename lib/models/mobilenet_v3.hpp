#pragma once
/// torchvision's MobileNetV3-Large (mobilenet_v3_large): inverted residual blocks with
/// depthwise convs, squeeze-excitation (Hardsigmoid) and Hardswish; BatchNorm with eps 0.001
/// and momentum 0.01; a Linear-Hardswish-Dropout(0.2)-Linear classifier.

#include <vector>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "models/layers.hpp"
#include "models/model.hpp"

namespace ptune::models {

/// torchvision's InvertedResidualConfig, channels already adjusted (width 1.0).
struct InvertedResidualConfig {
  int64_t in, kernel, expanded, out;
  bool use_se, use_hs;
  int64_t stride;
};

/// torchvision.models.mobilenetv3.InvertedResidual: "block" = [expand] depthwise [SE] project.
struct InvertedResidualImpl : torch::nn::Module {
  explicit InvertedResidualImpl(const InvertedResidualConfig& c);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Sequential block{nullptr};
  bool use_res_connect;
};
TORCH_MODULE(InvertedResidual);

struct MobileNetV3Impl : ModelImpl {
  MobileNetV3Impl(const std::string& arch, int64_t num_classes, double dropout = 0.2);
  torch::Tensor forward(torch::Tensor x) override;
  std::vector<std::string> head_keys() const override { return {"classifier.3.weight", "classifier.3.bias"}; }
  torch::nn::Sequential features{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};  // classifier.0 and classifier.3
  double dropout;
};
TORCH_MODULE(MobileNetV3);

}  // namespace ptune::models
