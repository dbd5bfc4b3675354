#include "models/resnet.hpp"

#include <stdexcept>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

namespace ptune::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

nn::Sequential downsample_if_needed(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nn::Sequential(nullptr);
  return nn::Sequential(conv(in, out, 1, stride, 0), nn::BatchNorm2d(out));
}

template <class Block, class... Extra>
nn::Sequential make_layer(int64_t& in_planes, int64_t planes, int64_t blocks, int64_t stride,
                          Extra... extra) {
  nn::Sequential layer;
  layer->push_back(Block(in_planes, planes, stride, extra...));
  in_planes = planes * Block::Impl::kExpansion;
  for (int64_t i = 1; i < blocks; ++i) layer->push_back(Block(in_planes, planes, 1, extra...));
  return layer;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(in, planes, 3, stride, 1));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  auto ds = downsample_if_needed(in, planes * kExpansion, stride);
  if (ds) downsample = register_module("downsample", ds);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  auto identity = downsample ? downsample->forward(x) : x;
  auto out = bn1(conv1(x));
  out.relu_();
  out = bn2(conv2(out));
  out += identity;
  return out.relu_();
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t planes, int64_t stride, int64_t groups,
                               int64_t width_per_group) {
  const int64_t width = planes * width_per_group / 64 * groups;
  conv1 = register_module("conv1", conv(in, width, 1, 1, 0));
  bn1 = register_module("bn1", nn::BatchNorm2d(width));
  conv2 = register_module(
      "conv2",
      nn::Conv2d(nn::Conv2dOptions(width, width, 3).stride(stride).padding(1).groups(groups).bias(false)));
  bn2 = register_module("bn2", nn::BatchNorm2d(width));
  conv3 = register_module("conv3", conv(width, planes * kExpansion, 1, 1, 0));
  bn3 = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  auto ds = downsample_if_needed(in, planes * kExpansion, stride);
  if (ds) downsample = register_module("downsample", ds);
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  auto identity = downsample ? downsample->forward(x) : x;
  auto out = bn1(conv1(x));
  out.relu_();
  out = bn2(conv2(out));
  out.relu_();
  out = bn3(conv3(out));
  out += identity;
  return out.relu_();
}

ResNetImpl::ResNetImpl(const std::string& arch_name, int64_t num_classes) : ModelImpl(arch_name) {
  std::vector<int64_t> blocks;
  bool bottleneck = true;
  int64_t groups = 1, width_per_group = 64;
  if (arch == "resnet18") {
    blocks = {2, 2, 2, 2};
    bottleneck = false;
  } else if (arch == "resnet34") {
    blocks = {3, 4, 6, 3};
    bottleneck = false;
  } else if (arch == "resnet50") {
    blocks = {3, 4, 6, 3};
  } else if (arch == "resnet101") {
    blocks = {3, 4, 23, 3};
  } else if (arch == "resnet152") {
    blocks = {3, 8, 36, 3};
  } else if (arch == "resnext50_32x4d") {
    blocks = {3, 4, 6, 3};
    groups = 32;
    width_per_group = 4;
  } else if (arch == "wide_resnet50_2") {
    blocks = {3, 4, 6, 3};
    width_per_group = 128;
  } else {
    throw std::invalid_argument("unknown architecture '" + arch + "'");
  }
  conv1 = register_module("conv1", conv(3, 64, 7, 2, 3));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  int64_t in = 64;
  auto layer = [&](int64_t planes, int64_t n, int64_t stride) {
    return bottleneck ? make_layer<Bottleneck>(in, planes, n, stride, groups, width_per_group)
                      : make_layer<BasicBlock>(in, planes, n, stride);
  };
  layer1 = register_module("layer1", layer(64, blocks[0], 1));
  layer2 = register_module("layer2", layer(128, blocks[1], 2));
  layer3 = register_module("layer3", layer(256, blocks[2], 2));
  layer4 = register_module("layer4", layer(512, blocks[3], 2));
  fc = register_module("fc", nn::Linear(in, num_classes));  // Linear's default init = torch's

  // torchvision: kaiming_normal_(fan_out, relu) for convs; BatchNorm weight 1 and bias 0 is
  // already BatchNorm2d's own initialization.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>())
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = bn1(conv1(x));
  x.relu_();
  x = torch::max_pool2d(x, 3, 2, 1);
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc(x);
}

}  // namespace ptune::models
