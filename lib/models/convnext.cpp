#include "models/convnext.hpp"

#include <stdexcept>

namespace ptune::models {

namespace nn = torch::nn;

namespace {
constexpr double kEps = 1e-6;  // torchvision's LayerNorm and LayerNorm2d in ConvNeXt
}

CNBlockImpl::CNBlockImpl(int64_t dim, double scale, double p) : stochastic_depth_prob(p) {
  auto block = register_module("block", std::make_shared<nn::Module>());
  dwconv = block->register_module(
      "0", nn::Conv2d(nn::Conv2dOptions(dim, dim, 7).padding(3).groups(dim).bias(true)));
  norm = block->register_module("2", nn::LayerNorm(nn::LayerNormOptions({dim}).eps(kEps)));
  pw1 = block->register_module("3", nn::Linear(dim, 4 * dim));
  pw2 = block->register_module("5", nn::Linear(4 * dim, dim));
  layer_scale = register_parameter("layer_scale", torch::ones({dim, 1, 1}) * scale);
}

torch::Tensor CNBlockImpl::forward(const torch::Tensor& x) {
  at::Tensor y = dwconv(x).permute({0, 2, 3, 1});
  y = linear(pw2, at::gelu(linear(pw1, norm(y)))).permute({0, 3, 1, 2});
  at::Tensor result = layer_scale * y;
  result = stochastic_depth(result, stochastic_depth_prob, /*row_mode=*/true, is_training());
  result += x;
  return result;
}

ConvNeXtImpl::ConvNeXtImpl(const std::string& arch_name, int64_t num_classes) : ModelImpl(arch_name) {
  if (arch != "convnext_tiny") throw std::invalid_argument("unknown architecture '" + arch + "'");
  struct Stage {
    int64_t in, out, layers;
  };  // torchvision's CNBlockConfig; out 0 = None
  const std::vector<Stage> setting = {{96, 192, 3}, {192, 384, 3}, {384, 768, 9}, {768, 0, 3}};
  const double stochastic_depth_prob = 0.1, layer_scale = 1e-6;

  features = nn::Sequential();
  ConvNormActivationOptions stem;
  stem.in = 3;
  stem.out = setting[0].in;
  stem.kernel = 4;
  stem.stride = 4;
  stem.padding = 0;
  stem.norm = Norm::kLayer2d;
  stem.act = Act::kNone;
  stem.eps = kEps;
  stem.bias = 1;
  features->push_back(ConvNormActivation(stem));
  int64_t total = 0, id = 0;
  for (const auto& s : setting) total += s.layers;
  for (const auto& s : setting) {
    Stack stage;
    for (int64_t i = 0; i < s.layers; ++i, ++id)
      stage->push_back(
          CNBlock(s.in, layer_scale, stochastic_depth_prob * static_cast<double>(id) / (total - 1.0)));
    features->push_back(stage);
    if (s.out != 0) {
      Stack down;
      down->push_back(LayerNorm2d(s.in, kEps));
      down->push_back(nn::Conv2d(nn::Conv2dOptions(s.in, s.out, 2).stride(2)));
      features->push_back(down);
    }
  }
  register_module("features", features);
  const int64_t last = setting.back().in;
  auto classifier = register_module("classifier", std::make_shared<nn::Module>());
  head_norm = classifier->register_module("0", LayerNorm2d(last, kEps));
  head = classifier->register_module("2", nn::Linear(last, num_classes));

  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      trunc_normal_(c->weight, 0.0, 0.02);
      if (c->bias.defined()) c->bias.zero_();
    } else if (auto* l = m->as<nn::Linear>()) {
      trunc_normal_(l->weight, 0.0, 0.02);
      l->bias.zero_();
    }
  }
}

torch::Tensor ConvNeXtImpl::forward(torch::Tensor x) {
  x = features->forward(x);
  x = at::adaptive_avg_pool2d(x, {1, 1});
  return head(head_norm(x).flatten(1));
}

}  // namespace ptune::models
