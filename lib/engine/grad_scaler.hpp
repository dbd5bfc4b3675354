#pragma once
/// Dynamic loss scaling for fp16 mixed precision: a C++ port of torch.amp.GradScaler.
///
/// Usage per iteration (same contract as PyTorch):
///   scaler.scale(loss).backward();
///   scaler.unscale_(opt);        // optional, e.g. before gradient clipping
///   scaler.step(opt);            // or scaler.step_masked(opt): no host sync
///   scaler.update();
///
/// The scale lives in a float32 0-dim tensor on the loss's device, the count of consecutive
/// clean steps in an int32 0-dim tensor beside it; both are created by the first scale().
/// Numbers follow PyTorch exactly: unscale_ multiplies grads by float(1/double(scale)) with
/// at::_amp_foreach_non_finite_check_and_unscale_, update() is at::_amp_update_scale_.

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim
namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace ptune::engine {

/// Construction options; the defaults are torch.amp.GradScaler's.
struct GradScalerOptions {
  double init_scale = 65536.0;     // first scale, 2^16
  double growth_factor = 2.0;      // scale *= this after growth_interval clean steps; > 1
  double backoff_factor = 0.5;     // scale *= this after a step with inf/NaN grads; < 1
  int64_t growth_interval = 2000;  // consecutive clean steps before growing; >= 1
  bool enabled = true;             // false: scale() is the identity, step() just steps
};

/// What a checkpoint keeps of a scaler (PyTorch's GradScaler.state_dict() fields).
struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t growth_tracker = 0;  // consecutive clean steps since the last growth or backoff
};

/// Dynamic loss scaler with PyTorch's GradScaler semantics. Not thread-safe. The optimizers
/// passed in are tracked by address between update() calls only.
class GradScaler {
 public:
  /// Throws std::invalid_argument when enabled and growth_factor <= 1, backoff_factor >= 1,
  /// growth_interval < 1 or init_scale is not a positive finite number.
  explicit GradScaler(GradScalerOptions options = {});

  /// Returns loss * scale (the loss's dtype, e.g. fp16 stays fp16). The first call creates the
  /// scale and growth-tracker tensors on the loss's device. Disabled: returns `loss` itself.
  at::Tensor scale(const at::Tensor& loss);

  /// Multiplies every gradient of `optimizer` by 1/scale in place, grouped by device and dtype,
  /// and records whether any was inf/NaN (no host sync). At most once per optimizer between
  /// update() calls, and before step(). No-op when disabled.
  /// Throws std::logic_error before the first scale() or when called twice / after step();
  /// std::invalid_argument for fp16 gradients (keep fp32 master params, as PyTorch requires).
  void unscale_(torch::optim::Optimizer& optimizer);

  /// unscale_(optimizer) unless already done, then optimizer.step() unless a gradient was
  /// inf/NaN. Reads found_inf on the host: one sync, as in PyTorch. Returns whether the
  /// optimizer stepped. Disabled: always steps. Throws std::logic_error when called twice
  /// between update() calls or before the first scale().
  bool step(torch::optim::Optimizer& optimizer);

  /// Like step() but never syncs or branches on tensor values, so it can be captured in a
  /// CUDA graph: the torch::optim::SGD update (lr, momentum, dampening, weight decay, nesterov)
  /// with ATen's fused SGD kernel (engine::fused_sgd_step, as torch.optim.SGD(fused=True)),
  /// which skips on the device where found_inf > 0, so an inf/NaN step leaves params and
  /// momentum buffers bit-for-bit unchanged. Uses the optimizer's own SGDParamState, so it
  /// mixes freely with step() / SGD::step().
  /// Rule for a missing momentum buffer: it is created as zeros and the kernel's first-step
  /// rule (buffer = d_p) runs, skipped on inf. After an inf first step the buffer is thus zero,
  /// and the next step computes 0 * momentum + (1 - dampening) * d_p: identical to PyTorch's
  /// first step (buf = d_p) when dampening == 0, scaled by (1 - dampening) otherwise.
  /// Throws std::invalid_argument when `optimizer` is not a torch::optim::SGD (names the fix:
  /// use step()) or a gradient is sparse; the same errors as step() otherwise.
  void step_masked(torch::optim::Optimizer& optimizer);

  /// Ends the iteration: backs off the scale if any optimizer saw inf/NaN this iteration, else
  /// counts a clean step and grows the scale every growth_interval of them
  /// (at::_amp_update_scale_; no host sync), then forgets this iteration's per-optimizer
  /// state. No-op when disabled. Throws std::logic_error when no unscale_/step happened since
  /// the last update(), or before the first scale().
  void update();

  /// Sets the scale to `new_scale` instead of the automatic rule (growth tracker untouched) and
  /// forgets this iteration's state, as PyTorch's update(new_scale). No-op when disabled.
  /// Throws std::logic_error before the first scale().
  void update(double new_scale);

  /// Forgets this iteration's per-optimizer state (what unscale_/step recorded) without
  /// touching the scale or the growth tracker: for an iteration abandoned part way (a failed
  /// CUDA-graph capture), so that the next one starts clean. Never throws.
  void reset_iteration() { per_optimizer_.clear(); }

  /// float32 0-dim tensor on the scale's device: the sum over this iteration's optimizers and
  /// devices of the per-check found_inf flags, > 0 if any grad was inf/NaN. No host sync.
  /// Throws std::logic_error when no unscale_/step happened since the last update().
  at::Tensor found_inf() const;

  /// The scale tensor (float32, 0-dim); undefined before the first scale() or when disabled.
  at::Tensor scale_tensor() const { return scale_; }
  /// The growth tracker tensor (int32, 0-dim); undefined before the first scale() or disabled.
  at::Tensor growth_tracker() const { return growth_tracker_; }

  /// Current scale read on the host (syncs): init_scale before the first scale(), 1 disabled.
  double get_scale() const;
  /// Consecutive clean steps read on the host (syncs); 0 when disabled.
  int64_t get_growth_tracker() const;
  /// Whether scaling is on.
  bool is_enabled() const { return enabled_; }
  /// The growth factor.
  double growth_factor() const { return growth_factor_; }
  /// The backoff factor.
  double backoff_factor() const { return backoff_factor_; }
  /// The growth interval.
  int64_t growth_interval() const { return growth_interval_; }

  /// The checkpointable state (syncs); std::nullopt when disabled, as PyTorch's empty dict.
  /// Call after update(), not mid-iteration.
  std::optional<GradScalerState> state_dict() const;
  /// Restores a state from state_dict(). No-op when disabled. Throws std::invalid_argument on
  /// factors or interval the constructor would reject.
  void load_state_dict(const GradScalerState& state);

  /// Writes state_dict() into `archive` under "grad_scaler.*" keys (nothing when disabled).
  void save(torch::serialize::OutputArchive& archive) const;
  /// Reads what save() wrote. No-op when disabled. Throws std::runtime_error when the archive
  /// holds no scaler state (it was saved by a disabled scaler, or by none).
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct DeviceFlag {
    c10::Device device;
    at::Tensor found_inf;  // float32 0-dim on `device`
  };
  struct OptimizerState {
    const torch::optim::Optimizer* optimizer;
    Stage stage = Stage::kReady;
    std::vector<DeviceFlag> found_inf_per_device;
  };

  OptimizerState& state_for(const torch::optim::Optimizer& optimizer);
  void require_initialized(const char* what) const;
  /// Sum of `state`'s per-device flags on `device` (no host sync).
  at::Tensor combined_found_inf(const OptimizerState& state, c10::Device device) const;
  /// Sum of every optimizer's flags this iteration on the scale's device; throws
  /// std::logic_error naming `caller` when nothing was recorded.
  at::Tensor found_inf_all(const char* caller) const;

  bool enabled_;
  double init_scale_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t init_growth_tracker_ = 0;
  at::Tensor scale_;           // float32 {}, lazily created by scale()
  at::Tensor growth_tracker_;  // int32 {}, lazily created by scale()
  std::vector<OptimizerState> per_optimizer_;
};

}  // namespace ptune::engine
