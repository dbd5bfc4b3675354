#pragma once
/// The building blocks torchvision's models share (torchvision.ops.misc and
/// torchvision.ops.stochastic_depth), written once: conv-norm-activation, squeeze-excitation,
/// stochastic depth, the MLP, and ConvNeXt's LayerNorm2d. Children are registered under the
/// indices torchvision's nn.Sequential gives them ("0" the conv, "1" the norm; the activation
/// and dropout have no parameters and keep their index free), so state_dict keys match.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace ptune::models {

enum class Act { kNone, kReLU, kHardswish, kHardsigmoid, kGELU };

/// `l` applied as Python's F.linear applies it: ATen's linear, which folds a contiguous input
/// of any rank into one addmm (bias fused). LibTorch's Linear::forward does not: above 2-d it
/// runs matmul and then adds the bias in place, two passes over the output and another
/// backward (and, under autocast, the bias added in the output's bf16).
torch::Tensor linear(const torch::nn::Linear& l, const torch::Tensor& x);

/// Applies `act` (in place where torchvision's module is inplace=True: ReLU, Hardswish).
torch::Tensor activate(torch::Tensor x, Act act);

/// torchvision.ops.stochastic_depth: in training with p > 0, zeroes whole rows ("row" mode) or
/// the whole input ("batch" mode) with probability p and scales survivors by 1 / (1 - p). The
/// noise is drawn as torchvision draws it (one bernoulli_ per call on the input's device), so
/// the same seed gives the same rows.
torch::Tensor stochastic_depth(const torch::Tensor& x, double p, bool row_mode, bool training);

/// LayerNorm over the channels of an NCHW tensor (ConvNeXt's LayerNorm2d: permute to NHWC,
/// layer_norm, permute back). Parameters "weight" and "bias".
struct LayerNorm2dImpl : torch::nn::Module {
  LayerNorm2dImpl(int64_t channels, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
  int64_t channels;
  double eps;
};
TORCH_MODULE(LayerNorm2d);

enum class Norm { kNone, kBatch, kLayer2d };

struct ConvNormActivationOptions {
  int64_t in = 0, out = 0, kernel = 3, stride = 1;
  int64_t padding = -1;  // -1: (kernel - 1) / 2 * dilation, as torchvision
  int64_t groups = 1, dilation = 1;
  Norm norm = Norm::kBatch;
  Act act = Act::kReLU;
  double eps = 1e-5, momentum = 0.1;  // the norm's
  int bias = -1;                      // -1: a bias when there is no norm, as torchvision
};

/// torchvision.ops.Conv2dNormActivation: "0" Conv2d, "1" the norm (BatchNorm2d or
/// LayerNorm2d), then the activation.
struct ConvNormActivationImpl : torch::nn::Module {
  explicit ConvNormActivationImpl(const ConvNormActivationOptions& o);
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  LayerNorm2d ln{nullptr};
  Act act;
};
TORCH_MODULE(ConvNormActivation);

/// torchvision.ops.SqueezeExcitation: global average, fc1 (1x1 conv), activation, fc2,
/// scale activation, times the input.
struct SqueezeExcitationImpl : torch::nn::Module {
  SqueezeExcitationImpl(int64_t channels, int64_t squeeze, Act act, Act scale_act);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
  Act act, scale_act;
};
TORCH_MODULE(SqueezeExcitation);

/// torchvision.ops.MLP (no norm): Linear, activation, Dropout for each hidden size, then the
/// last Linear and Dropout; the Linears sit at torchvision's indices (0, 3, ...).
struct MLPImpl : torch::nn::Module {
  MLPImpl(int64_t in, const std::vector<int64_t>& hidden, Act act, double dropout);
  torch::Tensor forward(torch::Tensor x);
  std::vector<torch::nn::Linear> linears;
  Act act;
  double dropout;
};
TORCH_MODULE(MLP);

/// An nn.Sequential that nests inside another (LibTorch's Sequential cannot: its forward is a
/// template): a stage of blocks, each taking and returning one tensor.
struct StackImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(Stack);

/// torch.nn.init.trunc_normal_ (values in [a, b], absolute), drawn as PyTorch draws it.
void trunc_normal_(torch::Tensor t, double mean, double std, double a = -2.0, double b = 2.0);

/// torchvision's _make_divisible(v, divisor): rounded to a multiple, never 10% below v.
int64_t make_divisible(double v, int64_t divisor);

}  // namespace ptune::models
