#include "engine/grad_scaler.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include "engine/sgd.hpp"

namespace ptune::engine {
namespace {

constexpr const char* kFixHint = " This may mean scaler.scale(loss) was not called earlier in the iteration.";

void validate(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (!(growth_factor > 1.0)) {
    throw std::invalid_argument("GradScaler growth_factor " + std::to_string(growth_factor) +
                                " must be > 1.0 (PyTorch's default is 2.0)");
  }
  if (!(backoff_factor < 1.0)) {
    throw std::invalid_argument("GradScaler backoff_factor " + std::to_string(backoff_factor) +
                                " must be < 1.0 (PyTorch's default is 0.5)");
  }
  if (growth_interval < 1) {
    throw std::invalid_argument("GradScaler growth_interval " + std::to_string(growth_interval) +
                                " must be >= 1 (PyTorch's default is 2000)");
  }
  if (!(init_scale > 0.0) || !std::isfinite(init_scale)) {
    throw std::invalid_argument("GradScaler init_scale " + std::to_string(init_scale) +
                                " must be a positive finite number (PyTorch's default is 65536)");
  }
}

/// `t` on `device`: `t` itself when already there, else an asynchronous copy.
at::Tensor on_device(const at::Tensor& t, c10::Device device) {
  return t.device() == device ? t : t.to(device, /*non_blocking=*/true);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : enabled_(options.enabled),
      init_scale_(options.init_scale),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval) {
  if (enabled_) {
    validate(init_scale_, growth_factor_, backoff_factor_, growth_interval_);
  }
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!enabled_) {
    return loss;
  }
  if (!scale_.defined()) {
    const auto device = loss.device();
    scale_ = at::full({}, init_scale_, at::TensorOptions().dtype(at::kFloat).device(device));
    growth_tracker_ = at::full({}, init_growth_tracker_, at::TensorOptions().dtype(at::kInt).device(device));
  }
  return loss * on_device(scale_, loss.device());
}

GradScaler::OptimizerState& GradScaler::state_for(const torch::optim::Optimizer& optimizer) {
  for (auto& s : per_optimizer_) {
    if (s.optimizer == &optimizer) {
      return s;
    }
  }
  per_optimizer_.push_back(OptimizerState{&optimizer, Stage::kReady, {}});
  return per_optimizer_.back();
}

void GradScaler::require_initialized(const char* what) const {
  if (!scale_.defined()) {
    throw std::logic_error(std::string("GradScaler::") + what + " called before the scale was created." +
                           kFixHint);
  }
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!enabled_) {
    return;
  }
  require_initialized("unscale_");
  auto& state = state_for(optimizer);
  if (state.stage == Stage::kUnscaled) {
    throw std::logic_error(
        "GradScaler::unscale_ has already been called on this optimizer since the last update(); call it at "
        "most once per iteration");
  }
  if (state.stage == Stage::kStepped) {
    throw std::logic_error("GradScaler::unscale_ called after step(); call it before step() or not at all");
  }

  at::NoGradGuard no_grad;
  // FP32 division can be imprecise for some compile options: PyTorch takes the reciprocal in FP64.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  const at::Tensor found_inf =
      at::full({}, 0.0, at::TensorOptions().dtype(at::kFloat).device(scale_.device()));

  // Gradients grouped by device, then dtype, in first-seen order.
  struct DtypeGroup {
    at::ScalarType dtype;
    std::vector<at::Tensor> grads;
  };
  struct DeviceGroup {
    c10::Device device;
    std::vector<DtypeGroup> by_dtype;
  };
  std::vector<DeviceGroup> groups;
  for (auto& group : optimizer.param_groups()) {
    for (auto& param : group.params()) {
      const at::Tensor& grad = param.grad();
      if (!grad.defined()) {
        continue;
      }
      if (grad.scalar_type() == at::kHalf) {
        throw std::invalid_argument(
            "GradScaler::unscale_: attempting to unscale FP16 gradients; keep the parameters the optimizer "
            "updates in float32 and autocast the forward pass instead");
      }
      at::Tensor to_unscale = grad.is_sparse() ? grad._values() : grad;
      const auto device = to_unscale.device();
      DeviceGroup* dg = nullptr;
      for (auto& g : groups) {
        if (g.device == device) {
          dg = &g;
          break;
        }
      }
      if (dg == nullptr) {
        groups.push_back(DeviceGroup{device, {}});
        dg = &groups.back();
      }
      DtypeGroup* tg = nullptr;
      for (auto& g : dg->by_dtype) {
        if (g.dtype == to_unscale.scalar_type()) {
          tg = &g;
          break;
        }
      }
      if (tg == nullptr) {
        dg->by_dtype.push_back(DtypeGroup{to_unscale.scalar_type(), {}});
        tg = &dg->by_dtype.back();
      }
      tg->grads.push_back(std::move(to_unscale));
    }
  }

  std::vector<DeviceFlag> flags;
  for (auto& dg : groups) {
    at::Tensor device_found_inf = on_device(found_inf, dg.device);
    const at::Tensor device_inv_scale = on_device(inv_scale, dg.device);
    for (auto& tg : dg.by_dtype) {
      at::_amp_foreach_non_finite_check_and_unscale_(tg.grads, device_found_inf, device_inv_scale);
    }
    flags.push_back(DeviceFlag{dg.device, device_found_inf});
  }
  state.found_inf_per_device = std::move(flags);
  state.stage = Stage::kUnscaled;
}

at::Tensor GradScaler::combined_found_inf(const OptimizerState& state, c10::Device device) const {
  at::Tensor combined;
  for (const auto& flag : state.found_inf_per_device) {
    at::Tensor f = on_device(flag.found_inf, device);
    combined = combined.defined() ? combined + f : f;
  }
  return combined;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  require_initialized("step");
  auto& state = state_for(optimizer);
  if (state.stage == Stage::kStepped) {
    throw std::logic_error(
        "GradScaler::step has already been called on this optimizer since the last update(); call update() "
        "once per iteration");
  }
  if (state.stage == Stage::kReady) {
    unscale_(optimizer);
  }
  auto& st = state_for(optimizer);  // unscale_ may have grown per_optimizer_: look up again
  if (st.found_inf_per_device.empty()) {
    throw std::logic_error(
        "GradScaler::step: no inf checks were recorded for this optimizer (none of its parameters has a "
        "gradient); run backward on scaler.scale(loss) first");
  }
  const bool clean = combined_found_inf(st, scale_.device()).item<float>() == 0.0f;
  if (clean) {
    optimizer.step();
  }
  st.stage = Stage::kStepped;
  return clean;
}

void GradScaler::step_masked(torch::optim::Optimizer& optimizer) {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd == nullptr) {
    throw std::invalid_argument(
        "GradScaler::step_masked supports torch::optim::SGD only; use step() for other optimizers");
  }
  if (!enabled_) {
    fused_sgd_step(*sgd);  // the same kernel as the enabled path, without the inf mask
    return;
  }
  require_initialized("step_masked");
  if (state_for(optimizer).stage == Stage::kStepped) {
    throw std::logic_error(
        "GradScaler::step_masked has already been called on this optimizer since the last update(); call "
        "update() once per iteration");
  }
  if (state_for(optimizer).stage == Stage::kReady) {
    unscale_(optimizer);
  }
  auto& st = state_for(optimizer);
  if (st.found_inf_per_device.empty()) {
    throw std::logic_error(
        "GradScaler::step_masked: no inf checks were recorded for this optimizer (none of its parameters has "
        "a gradient); run backward on scaler.scale(loss) first");
  }

  // ATen's fused SGD: the update skipped on the device when found_inf > 0.
  fused_sgd_step(*sgd, combined_found_inf(st, scale_.device()));
  st.stage = Stage::kStepped;
}

void GradScaler::update() {
  if (!enabled_) {
    return;
  }
  require_initialized("update");
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_all("update"), growth_factor_, backoff_factor_,
                         growth_interval_);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!enabled_) {
    return;
  }
  require_initialized("update");
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

at::Tensor GradScaler::found_inf() const { return found_inf_all("found_inf"); }

at::Tensor GradScaler::found_inf_all(const char* caller) const {
  at::Tensor combined;
  for (const auto& state : per_optimizer_) {
    for (const auto& flag : state.found_inf_per_device) {
      at::Tensor f = on_device(flag.found_inf, scale_.device());
      combined = combined.defined() ? combined + f : f;
    }
  }
  if (!combined.defined()) {
    throw std::logic_error(std::string("GradScaler::") + caller +
                           ": no inf checks were recorded since the last update(); call unscale_(), step() "
                           "or step_masked() first");
  }
  return combined;
}

double GradScaler::get_scale() const {
  if (!enabled_) {
    return 1.0;
  }
  return scale_.defined() ? static_cast<double>(scale_.item<float>()) : init_scale_;
}

int64_t GradScaler::get_growth_tracker() const {
  if (!enabled_) {
    return 0;
  }
  return growth_tracker_.defined() ? static_cast<int64_t>(growth_tracker_.item<int32_t>())
                                   : init_growth_tracker_;
}

std::optional<GradScalerState> GradScaler::state_dict() const {
  if (!enabled_) {
    return std::nullopt;
  }
  GradScalerState s;
  s.scale = get_scale();
  s.growth_factor = growth_factor_;
  s.backoff_factor = backoff_factor_;
  s.growth_interval = growth_interval_;
  s.growth_tracker = get_growth_tracker();
  return s;
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!enabled_) {
    return;
  }
  validate(state.scale, state.growth_factor, state.backoff_factor, state.growth_interval);
  init_scale_ = state.scale;
  if (scale_.defined()) {
    scale_.fill_(state.scale);
  }
  growth_factor_ = state.growth_factor;
  backoff_factor_ = state.backoff_factor;
  growth_interval_ = state.growth_interval;
  init_growth_tracker_ = state.growth_tracker;
  if (growth_tracker_.defined()) {
    growth_tracker_.fill_(state.growth_tracker);
  }
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  const auto s = state_dict();
  if (!s) {
    return;
  }
  archive.write("grad_scaler.scale", c10::IValue(s->scale));
  archive.write("grad_scaler.growth_factor", c10::IValue(s->growth_factor));
  archive.write("grad_scaler.backoff_factor", c10::IValue(s->backoff_factor));
  archive.write("grad_scaler.growth_interval", c10::IValue(s->growth_interval));
  archive.write("grad_scaler.growth_tracker", c10::IValue(s->growth_tracker));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!enabled_) {
    return;
  }
  c10::IValue v;
  if (!archive.try_read("grad_scaler.scale", v)) {
    throw std::runtime_error(
        "GradScaler::load: the archive holds no grad_scaler state, possibly because it was saved from a "
        "disabled GradScaler; start from a fresh scaler instead");
  }
  GradScalerState s;
  s.scale = v.toDouble();
  archive.read("grad_scaler.growth_factor", v);
  s.growth_factor = v.toDouble();
  archive.read("grad_scaler.backoff_factor", v);
  s.backoff_factor = v.toDouble();
  archive.read("grad_scaler.growth_interval", v);
  s.growth_interval = v.toInt();
  archive.read("grad_scaler.growth_tracker", v);
  s.growth_tracker = v.toInt();
  load_state_dict(s);
}

}  // namespace ptune::engine
