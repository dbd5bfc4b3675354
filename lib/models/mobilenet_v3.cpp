#include "models/mobilenet_v3.hpp"

#include <stdexcept>

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

namespace ptune::models {

namespace nn = torch::nn;

namespace {

// torchvision's MobileNetV3 norm_layer: BatchNorm2d(eps=0.001, momentum=0.01).
constexpr double kEps = 0.001, kMomentum = 0.01;

ConvNormActivation cna(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, Act act) {
  ConvNormActivationOptions o;
  o.in = in;
  o.out = out;
  o.kernel = kernel;
  o.stride = stride;
  o.groups = groups;
  o.act = act;
  o.eps = kEps;
  o.momentum = kMomentum;
  return ConvNormActivation(o);
}

}  // namespace

InvertedResidualImpl::InvertedResidualImpl(const InvertedResidualConfig& c)
    : use_res_connect(c.stride == 1 && c.in == c.out) {
  const Act act = c.use_hs ? Act::kHardswish : Act::kReLU;
  block = nn::Sequential();
  if (c.expanded != c.in) block->push_back(cna(c.in, c.expanded, 1, 1, 1, act));
  block->push_back(cna(c.expanded, c.expanded, c.kernel, c.stride, c.expanded, act));
  if (c.use_se)
    block->push_back(SqueezeExcitation(c.expanded, make_divisible(static_cast<double>(c.expanded / 4), 8),
                                       Act::kReLU, Act::kHardsigmoid));
  block->push_back(cna(c.expanded, c.out, 1, 1, 1, Act::kNone));
  register_module("block", block);
}

torch::Tensor InvertedResidualImpl::forward(torch::Tensor x) {
  at::Tensor result = block->forward(x);
  if (use_res_connect) result += x;
  return result;
}

MobileNetV3Impl::MobileNetV3Impl(const std::string& arch_name, int64_t num_classes, double p)
    : ModelImpl(arch_name), dropout(p) {
  if (arch != "mobilenet_v3_large") throw std::invalid_argument("unknown architecture '" + arch + "'");
  // torchvision's _mobilenet_v3_conf("mobilenet_v3_large"): in, kernel, expanded, out, SE,
  // Hardswish, stride (every channel count is already a multiple of 8).
  const std::vector<InvertedResidualConfig> setting = {
      {16, 3, 16, 16, false, false, 1},  {16, 3, 64, 24, false, false, 2},  {24, 3, 72, 24, false, false, 1},
      {24, 5, 72, 40, true, false, 2},   {40, 5, 120, 40, true, false, 1},  {40, 5, 120, 40, true, false, 1},
      {40, 3, 240, 80, false, true, 2},  {80, 3, 200, 80, false, true, 1},  {80, 3, 184, 80, false, true, 1},
      {80, 3, 184, 80, false, true, 1},  {80, 3, 480, 112, true, true, 1},  {112, 3, 672, 112, true, true, 1},
      {112, 5, 672, 160, true, true, 2}, {160, 5, 960, 160, true, true, 1}, {160, 5, 960, 160, true, true, 1},
  };
  const int64_t last_channel = 1280;
  features = nn::Sequential();
  features->push_back(cna(3, setting.front().in, 3, 2, 1, Act::kHardswish));
  for (const auto& c : setting) features->push_back(InvertedResidual(c));
  const int64_t last_in = setting.back().out, last_out = 6 * last_in;
  features->push_back(cna(last_in, last_out, 1, 1, 1, Act::kHardswish));
  register_module("features", features);
  // classifier = Sequential(Linear, Hardswish, Dropout, Linear): the Linears at 0 and 3.
  auto classifier = register_module("classifier", std::make_shared<nn::Module>());
  fc1 = classifier->register_module("0", nn::Linear(last_out, last_channel));
  fc2 = classifier->register_module("3", nn::Linear(last_channel, num_classes));

  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut);  // nonlinearity leaky_relu, a=0
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      b->weight.fill_(1);
      b->bias.zero_();
    } else if (auto* l = m->as<nn::Linear>()) {
      l->weight.normal_(0, 0.01);
      l->bias.zero_();
    }
  }
}

torch::Tensor MobileNetV3Impl::forward(torch::Tensor x) {
  x = features->forward(x);
  x = at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  x = fc1(x);
  at::hardswish_(x);
  x = torch::dropout(x, dropout, is_training());
  return fc2(x);
}

}  // namespace ptune::models
