#include "models/layers.hpp"

#include <cmath>

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

namespace ptune::models {

namespace nn = torch::nn;

torch::Tensor linear(const torch::nn::Linear& l, const torch::Tensor& x) {
  return at::linear(x, l->weight, l->bias);
}

torch::Tensor activate(torch::Tensor x, Act act) {
  switch (act) {
    case Act::kNone:
      return x;
    case Act::kReLU:
      return x.relu_();
    case Act::kHardswish:
      return at::hardswish_(x);
    case Act::kHardsigmoid:
      return at::hardsigmoid(x);
    case Act::kGELU:
      return at::gelu(x);
  }
  return x;
}

torch::Tensor stochastic_depth(const torch::Tensor& x, double p, bool row_mode, bool training) {
  if (!training || p == 0.0) return x;
  const double survival = 1.0 - p;
  std::vector<int64_t> size(static_cast<size_t>(x.dim()), 1);
  if (row_mode) size[0] = x.size(0);
  at::Tensor noise = at::empty(size, x.options());
  noise.bernoulli_(survival);
  if (survival > 0.0) noise.div_(survival);
  return x * noise;
}

LayerNorm2dImpl::LayerNorm2dImpl(int64_t c, double e) : channels(c), eps(e) {
  weight = register_parameter("weight", torch::ones({c}));
  bias = register_parameter("bias", torch::zeros({c}));
}

torch::Tensor LayerNorm2dImpl::forward(const torch::Tensor& x) {
  return at::layer_norm(x.permute({0, 2, 3, 1}), {channels}, weight, bias, eps).permute({0, 3, 1, 2});
}

ConvNormActivationImpl::ConvNormActivationImpl(const ConvNormActivationOptions& o) : act(o.act) {
  const int64_t pad = o.padding >= 0 ? o.padding : (o.kernel - 1) / 2 * o.dilation;
  const bool bias = o.bias >= 0 ? o.bias == 1 : o.norm == Norm::kNone;
  conv = register_module("0", nn::Conv2d(nn::Conv2dOptions(o.in, o.out, o.kernel)
                                             .stride(o.stride)
                                             .padding(pad)
                                             .dilation(o.dilation)
                                             .groups(o.groups)
                                             .bias(bias)));
  if (o.norm == Norm::kBatch)
    bn = register_module("1", nn::BatchNorm2d(nn::BatchNorm2dOptions(o.out).eps(o.eps).momentum(o.momentum)));
  else if (o.norm == Norm::kLayer2d)
    ln = register_module("1", LayerNorm2d(o.out, o.eps));
}

torch::Tensor ConvNormActivationImpl::forward(torch::Tensor x) {
  x = conv(x);
  if (bn) x = bn(x);
  if (ln) x = ln(x);
  return activate(x, act);
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t channels, int64_t squeeze, Act a, Act s)
    : act(a), scale_act(s) {
  fc1 = register_module("fc1", nn::Conv2d(nn::Conv2dOptions(channels, squeeze, 1)));
  fc2 = register_module("fc2", nn::Conv2d(nn::Conv2dOptions(squeeze, channels, 1)));
}

torch::Tensor SqueezeExcitationImpl::forward(const torch::Tensor& x) {
  at::Tensor scale = at::adaptive_avg_pool2d(x, {1, 1});
  scale = activate(fc1(scale), act);
  scale = activate(fc2(scale), scale_act);
  return scale * x;
}

MLPImpl::MLPImpl(int64_t in, const std::vector<int64_t>& hidden, Act a, double p) : act(a), dropout(p) {
  int64_t index = 0;
  for (size_t i = 0; i < hidden.size(); ++i) {
    linears.push_back(register_module(std::to_string(index), nn::Linear(in, hidden[i])));
    in = hidden[i];
    index += i + 1 < hidden.size() ? 3 : 2;  // Linear, activation, Dropout / Linear, Dropout
  }
}

torch::Tensor MLPImpl::forward(torch::Tensor x) {
  for (size_t i = 0; i < linears.size(); ++i) {
    x = linear(linears[i], x);
    if (i + 1 < linears.size()) x = activate(x, act);
    if (dropout > 0.0) x = torch::dropout(x, dropout, is_training());
  }
  return x;
}

void trunc_normal_(torch::Tensor t, double mean, double std, double a, double b) {
  // torch.nn.init._no_grad_trunc_normal_: inverse CDF of a uniform draw between the bounds.
  torch::NoGradGuard no_grad;
  auto norm_cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = norm_cdf((a - mean) / std), u = norm_cdf((b - mean) / std);
  t.uniform_(2 * l - 1, 2 * u - 1);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.add_(mean);
  t.clamp_(a, b);
}

int64_t make_divisible(double v, int64_t divisor) {
  int64_t new_v = std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (static_cast<double>(new_v) < 0.9 * v) new_v += divisor;
  return new_v;
}

}  // namespace ptune::models
