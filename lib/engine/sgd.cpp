#include "engine/sgd.hpp"

#include <map>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

namespace ptune::engine {
namespace {

/// Tensors grouped as ATen's multi-tensor kernels need them: one device and dtype per list.
using GroupKey = std::pair<c10::Device, at::ScalarType>;
struct DeviceDtypeLess {
  bool operator()(const GroupKey& a, const GroupKey& b) const {
    return std::make_tuple(static_cast<int>(a.first.type()), a.first.index(), static_cast<int>(a.second)) <
           std::make_tuple(static_cast<int>(b.first.type()), b.first.index(), static_cast<int>(b.second));
  }
};

}  // namespace

void fused_sgd_step(torch::optim::SGD& sgd, const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  auto& state = sgd.state();
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    struct Lists {
      std::vector<at::Tensor> params, grads, bufs;
    };
    // Per device and dtype, and apart for parameters whose buffers are created now (the
    // kernel's first-step rule applies to a whole list).
    std::map<GroupKey, Lists, DeviceDtypeLess> lists[2];
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) throw std::invalid_argument("fused SGD does not support sparse gradients");
      bool first = false;
      at::Tensor buf;
      if (o.momentum() != 0) {
        auto it = state.find(p.unsafeGetTensorImpl());
        first = it == state.end();
        if (first) {
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(at::zeros_like(p.data()));
          it = state.emplace(p.unsafeGetTensorImpl(), std::move(s)).first;
        }
        buf = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
      }
      Lists& l = lists[first][{p.device(), p.scalar_type()}];
      l.params.push_back(p.data());
      l.grads.push_back(p.grad().data());
      if (buf.defined()) l.bufs.push_back(buf);
    }
    for (int first = 0; first < 2; ++first) {
      for (auto& [key, l] : lists[first]) {
        std::optional<at::Tensor> inf;
        if (found_inf.defined()) inf = found_inf.to(key.first, at::kFloat, /*non_blocking=*/true);
        at::_fused_sgd_(l.params, l.grads, l.bufs, o.weight_decay(), o.momentum(), o.lr(), o.dampening(),
                        o.nesterov(), /*maximize=*/false, /*is_first_step=*/first == 1,
                        /*grad_scale=*/std::nullopt, inf);
      }
    }
  }
}

void zero_grad(torch::optim::Optimizer& optimizer, bool set_to_none) {
  std::map<GroupKey, std::vector<at::Tensor>, DeviceDtypeLess> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (!p.mutable_grad().defined()) continue;
      if (set_to_none) {
        p.mutable_grad().reset();
        continue;
      }
      at::Tensor& g = p.mutable_grad();
      if (g.grad_fn())
        g.detach_();
      else
        g.requires_grad_(false);
      grads[{g.device(), g.scalar_type()}].push_back(g);
    }
  }
  for (auto& [key, list] : grads) at::_foreach_zero_(list);
}

}  // namespace ptune::engine
