#pragma once
/// torchvision's VisionTransformer (vit_b_16: patch 16, 12 layers, 12 heads, hidden 768, MLP
/// 3072, LayerNorm eps 1e-6, no dropout). The image size is fixed at construction, as
/// torchvision's: the position embedding has (image_size / patch)^2 + 1 rows. Attention runs
/// through ATen's scaled_dot_product_attention (the fused kernels on a GPU), with the
/// parameters of torch.nn.MultiheadAttention (in_proj_weight, in_proj_bias, out_proj).

#include <string>
#include <vector>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "models/layers.hpp"
#include "models/model.hpp"

namespace ptune::models {

/// torch.nn.MultiheadAttention(batch_first=True) for self-attention, need_weights=False.
struct SelfAttentionImpl : torch::nn::Module {
  SelfAttentionImpl(int64_t dim, int64_t heads, double dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};
  int64_t heads;
  double dropout;
};
TORCH_MODULE(SelfAttention);

/// torchvision.models.vision_transformer.EncoderBlock: ln_1, self_attention, dropout, ln_2, mlp.
struct EncoderBlockImpl : torch::nn::Module {
  EncoderBlockImpl(int64_t heads, int64_t hidden, int64_t mlp_dim, double dropout, double attention_dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention self_attention{nullptr};
  MLP mlp{nullptr};
  double dropout;
};
TORCH_MODULE(EncoderBlock);

struct ViTOptions {
  int64_t image_size = 224, patch_size = 16, num_layers = 12, num_heads = 12, hidden_dim = 768,
          mlp_dim = 3072;
  double dropout = 0.0, attention_dropout = 0.0;
};

struct VisionTransformerImpl : ModelImpl {
  VisionTransformerImpl(const std::string& arch, const ViTOptions& o, int64_t num_classes);
  torch::Tensor forward(torch::Tensor x) override;
  std::vector<std::string> head_keys() const override { return {"heads.head.weight", "heads.head.bias"}; }
  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token, pos_embedding;
  std::vector<EncoderBlock> layers;
  torch::nn::LayerNorm ln{nullptr};  // encoder.ln
  torch::nn::Linear head{nullptr};   // heads.head
  ViTOptions options;
};
TORCH_MODULE(VisionTransformer);

/// vit_b_16's options at `image_size` (a multiple of 16).
ViTOptions vit_b_16_options(int64_t image_size);

}  // namespace ptune::models
