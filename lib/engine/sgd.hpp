#pragma once
/// The optimizer update and gradient reset as PyTorch's fused/foreach paths do them: a few
/// multi-tensor kernels per step instead of several per parameter, which is what keeps eager
/// steps from being launch-bound on a GPU (ResNet-18 has 62 parameters).

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
class SGD;
}  // namespace torch::optim

namespace ptune::engine {

/// One step of `sgd` with ATen's fused SGD kernel (torch.optim.SGD(fused=True)): for every
/// parameter with a gradient, weight decay, momentum (dampening, nesterov) and the update as
/// torch.optim.SGD defines them, using and creating the optimizer's own momentum buffers (so
/// checkpoints and SGD::step mix freely). When `found_inf` (a float 0-dim tensor) is given and
/// > 0 on the device, parameters and momentum buffers are left bit-for-bit unchanged, without
/// a host synchronization (safe inside a CUDA graph).
/// A parameter's first step (no momentum buffer yet) creates the buffer as zeros and runs the
/// kernel's first-step rule (buffer = gradient), so a clean first step equals PyTorch's and an
/// inf first step leaves a zero buffer (PyTorch's fused path would leave it uninitialized).
/// Throws std::invalid_argument for sparse gradients.
void fused_sgd_step(torch::optim::SGD& sgd, const at::Tensor& found_inf = {});

/// optimizer.zero_grad(set_to_none) as torch.optim does it with foreach: gradients dropped, or
/// zeroed with one multi-tensor kernel per device and dtype. Never throws for dense gradients.
void zero_grad(torch::optim::Optimizer& optimizer, bool set_to_none);

}  // namespace ptune::engine
