#include "models/vit.hpp"

#include <cmath>
#include <stdexcept>

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

namespace ptune::models {

namespace nn = torch::nn;

namespace {
constexpr double kEps = 1e-6;  // torchvision's ViT norm_layer: LayerNorm(eps=1e-6)
}

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t h, double p) : heads(h), dropout(p) {
  if (dim % h != 0) throw std::invalid_argument("hidden size must be divisible by the number of heads");
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
  out_proj = register_module("out_proj", nn::Linear(dim, dim));
  // MultiheadAttention._reset_parameters: xavier_uniform_ in_proj, zero biases.
  torch::NoGradGuard no_grad;
  nn::init::xavier_uniform_(in_proj_weight);
  out_proj->bias.zero_();
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0), l = x.size(1), e = x.size(2), d = e / heads;
  // (N, L, 3E) -> q, k, v as (N, H, L, D), as F.multi_head_attention_forward lays them out.
  at::Tensor qkv =
      at::linear(x, in_proj_weight, in_proj_bias).view({n, l, 3, heads, d}).permute({2, 0, 3, 1, 4});
  // unbind, not three selects: its backward stacks the three gradients in one pass instead of
  // scattering each into a zeroed copy of the whole and summing those.
  const std::vector<at::Tensor> parts = qkv.unbind(0);
  at::Tensor out =
      at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, is_training() ? dropout : 0.0);
  out = out.transpose(1, 2).reshape({n, l, e});
  return linear(out_proj, out);
}

EncoderBlockImpl::EncoderBlockImpl(int64_t heads, int64_t hidden, int64_t mlp_dim, double p,
                                   double attention_p)
    : dropout(p) {
  ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(kEps)));
  self_attention = register_module("self_attention", SelfAttention(hidden, heads, attention_p));
  ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(kEps)));
  mlp = register_module("mlp", MLP(hidden, std::vector<int64_t>{mlp_dim, hidden}, Act::kGELU, p));
  // torchvision's MLPBlock: xavier_uniform_ weights, biases normal(std=1e-6).
  torch::NoGradGuard no_grad;
  for (auto& lin : mlp->linears) {
    nn::init::xavier_uniform_(lin->weight);
    lin->bias.normal_(0.0, 1e-6);
  }
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& input) {
  at::Tensor x = self_attention(ln_1(input));
  x = torch::dropout(x, dropout, is_training());
  x = x + input;
  return x + mlp(ln_2(x));
}

ViTOptions vit_b_16_options(int64_t image_size) {
  ViTOptions o;
  o.image_size = image_size;
  return o;
}

VisionTransformerImpl::VisionTransformerImpl(const std::string& arch_name, const ViTOptions& o,
                                             int64_t num_classes)
    : ModelImpl(arch_name), options(o) {
  if (o.image_size % o.patch_size != 0)
    throw std::invalid_argument("image size " + std::to_string(o.image_size) +
                                " is not a multiple of the patch size " + std::to_string(o.patch_size));
  conv_proj = register_module(
      "conv_proj", nn::Conv2d(nn::Conv2dOptions(3, o.hidden_dim, o.patch_size).stride(o.patch_size)));
  const int64_t side = o.image_size / o.patch_size, seq = side * side + 1;
  class_token = register_parameter("class_token", torch::zeros({1, 1, o.hidden_dim}));
  auto encoder = register_module("encoder", std::make_shared<nn::Module>());
  pos_embedding =
      encoder->register_parameter("pos_embedding", torch::empty({1, seq, o.hidden_dim}).normal_(0.0, 0.02));
  auto blocks = encoder->register_module("layers", std::make_shared<nn::Module>());
  for (int64_t i = 0; i < o.num_layers; ++i)
    layers.push_back(blocks->register_module(
        "encoder_layer_" + std::to_string(i),
        EncoderBlock(o.num_heads, o.hidden_dim, o.mlp_dim, o.dropout, o.attention_dropout)));
  ln = encoder->register_module("ln", nn::LayerNorm(nn::LayerNormOptions({o.hidden_dim}).eps(kEps)));
  auto heads = register_module("heads", std::make_shared<nn::Module>());
  head = heads->register_module("head", nn::Linear(o.hidden_dim, num_classes));

  torch::NoGradGuard no_grad;
  const double fan_in = 3.0 * o.patch_size * o.patch_size;
  trunc_normal_(conv_proj->weight, 0.0, std::sqrt(1.0 / fan_in));
  conv_proj->bias.zero_();
  head->weight.zero_();
  head->bias.zero_();
}

torch::Tensor VisionTransformerImpl::forward(torch::Tensor x) {
  const int64_t n = x.size(0);
  if (x.size(2) != options.image_size || x.size(3) != options.image_size)
    throw std::invalid_argument("ViT built for " + std::to_string(options.image_size) + "x" +
                                std::to_string(options.image_size) + " images got " +
                                std::to_string(x.size(2)) + "x" + std::to_string(x.size(3)));
  x = conv_proj(x);
  x = x.reshape({n, options.hidden_dim, -1}).permute({0, 2, 1});
  x = at::cat({class_token.expand({n, -1, -1}), x}, 1);
  x = x + pos_embedding;
  x = torch::dropout(x, options.dropout, is_training());
  for (auto& block : layers) x = block(x);
  x = ln(x);
  return head(x.select(1, 0));
}

}  // namespace ptune::models
