#include "engine/grad_scaler.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>
#include <torch/torch.h>

using ptune::engine::GradScaler;
using ptune::engine::GradScalerOptions;
using ptune::engine::GradScalerState;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// A 1-D parameter [1, -2] and the loss sum(p * [3, 0.25]) whose gradient is [3, 0.25].
struct Toy {
  torch::Tensor p = torch::tensor({1.0f, -2.0f}).requires_grad_(true);
  torch::Tensor loss() const { return (p * torch::tensor({3.0f, 0.25f})).sum(); }
};

/// Backward of scaler.scale(loss), then optionally poisons grad[index] with `poison`.
void backward(GradScaler& scaler, torch::optim::Optimizer& opt, const Toy& toy, float poison = 0.0f,
              int64_t index = 0) {
  opt.zero_grad();
  scaler.scale(toy.loss()).backward();
  if (poison != 0.0f) {
    toy.p.grad()[index].fill_(poison);
  }
}

torch::Tensor momentum_buffer(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) {
    return {};
  }
  return static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
}

}  // namespace

TEST_CASE("scale multiplies the loss by 2^16 exactly", "[grad_scaler]") {
  GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);  // before the tensor exists: init_scale
  auto loss = torch::tensor(1.5f);
  auto scaled = scaler.scale(loss);
  CHECK(scaled.item<float>() == 98304.0f);  // 1.5 * 65536
  CHECK(scaler.scale_tensor().scalar_type() == torch::kFloat);
  CHECK(scaler.scale_tensor().dim() == 0);
  CHECK(scaler.growth_tracker().scalar_type() == torch::kInt);
  CHECK(scaler.get_growth_tracker() == 0);
  // Non-0-dim fp16 outputs stay fp16 (the 0-dim scale does not promote them), as in PyTorch;
  // a 0-dim fp16 loss becomes float32 (both 0-dim: ordinary promotion), also as in PyTorch.
  auto half = scaler.scale(torch::full({2}, 0.5f, torch::kHalf));
  CHECK(half.scalar_type() == torch::kHalf);
  CHECK(half[0].item<float>() == 32768.0f);
  CHECK(scaler.scale(torch::tensor(0.5f).to(torch::kHalf)).scalar_type() == torch::kFloat);
}

TEST_CASE("unscale_ multiplies grads by 1/scale exactly and records found_inf", "[grad_scaler]") {
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler;
  backward(scaler, opt, toy);
  // Scaled grads: [3 * 65536, 0.25 * 65536] = [196608, 16384].
  CHECK(toy.p.grad()[0].item<float>() == 196608.0f);
  CHECK(toy.p.grad()[1].item<float>() == 16384.0f);
  scaler.unscale_(opt);
  CHECK(toy.p.grad()[0].item<float>() == 3.0f);
  CHECK(toy.p.grad()[1].item<float>() == 0.25f);
  CHECK(scaler.found_inf().item<float>() == 0.0f);
  CHECK_THROWS_AS(scaler.unscale_(opt), std::logic_error);  // once per iteration
  CHECK(scaler.step(opt));
  CHECK_THROWS_AS(scaler.unscale_(opt), std::logic_error);  // not after step
  CHECK_THROWS_AS(scaler.step(opt), std::logic_error);      // step once per iteration
  scaler.update();
  CHECK_THROWS_AS(scaler.update(), std::logic_error);  // nothing recorded since
  CHECK_THROWS_AS(scaler.found_inf(), std::logic_error);
}

TEST_CASE("unscale_ and step need a scale first, fp16 grads are refused", "[grad_scaler]") {
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.1));
  GradScaler scaler;
  toy.loss().backward();
  CHECK_THROWS_AS(scaler.unscale_(opt), std::logic_error);
  CHECK_THROWS_AS(scaler.step(opt), std::logic_error);
  CHECK_THROWS_AS(scaler.update(), std::logic_error);

  auto h = torch::ones({2}, torch::kHalf).requires_grad_(true);
  torch::optim::SGD hopt({h}, torch::optim::SGDOptions(0.1));
  scaler.scale(h.sum()).backward();
  CHECK_THROWS_AS(scaler.unscale_(hopt), std::invalid_argument);
}

TEST_CASE("constructor rejects bad factors", "[grad_scaler]") {
  CHECK_THROWS_AS(GradScaler(GradScalerOptions{65536.0, 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(GradScaler(GradScalerOptions{65536.0, 2.0, 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(GradScaler(GradScalerOptions{65536.0, 2.0, 0.5, 0}), std::invalid_argument);
  CHECK_THROWS_AS(GradScaler(GradScalerOptions{-1.0}), std::invalid_argument);
  CHECK_NOTHROW(GradScaler(GradScalerOptions{-1.0, 1.0, 1.0, 0, false}));  // disabled: unchecked
}

TEST_CASE("an inf or NaN gradient skips the step and halves the scale", "[grad_scaler]") {
  // (Index-based: Catch2 2.13's GENERATE can dangle on temporaries such as -kInf.)
  const float poison = std::array<float, 3>{kInf, -kInf, kNaN}[GENERATE(0, 1, 2)];
  INFO("poison " << poison);
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.5).momentum(0.9));
  GradScaler scaler;

  // A clean step first so that a momentum buffer exists: buf = [3, 0.25],
  // p = [1 - 0.5*3, -2 - 0.5*0.25] = [-0.5, -2.125]; tracker 1, scale unchanged.
  backward(scaler, opt, toy);
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.get_growth_tracker() == 1);
  auto p_before = toy.p.detach().clone();
  auto buf_before = momentum_buffer(opt, toy.p).clone();
  CHECK(torch::equal(p_before, torch::tensor({-0.5f, -2.125f})));
  CHECK(torch::equal(buf_before, torch::tensor({3.0f, 0.25f})));

  backward(scaler, opt, toy, poison, 1);
  CHECK_FALSE(scaler.step(opt));
  CHECK(scaler.found_inf().item<float>() == 1.0f);
  scaler.update();
  CHECK(torch::equal(toy.p.detach(), p_before));
  CHECK(torch::equal(momentum_buffer(opt, toy.p), buf_before));
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(scaler.get_growth_tracker() == 0);
}

TEST_CASE("the scale doubles after growth_interval clean steps", "[grad_scaler]") {
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.01));
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler scaler(o);
  const std::vector<int64_t> trackers{1, 2, 0, 1};
  const std::vector<double> scales{65536.0, 65536.0, 131072.0, 131072.0};
  for (size_t i = 0; i < trackers.size(); ++i) {
    backward(scaler, opt, toy);
    CHECK(scaler.step(opt));
    scaler.update();
    CHECK(scaler.get_growth_tracker() == trackers[i]);
    CHECK(scaler.get_scale() == scales[i]);
  }
}

TEST_CASE("training with the scaler equals training without", "[grad_scaler]") {
  torch::manual_seed(7);
  torch::nn::Linear a(4, 3);
  torch::nn::Linear b(4, 3);
  {
    torch::NoGradGuard no_grad;
    b->weight.copy_(a->weight);
    b->bias.copy_(a->bias);
  }
  auto x = torch::randn({8, 4});
  auto y = torch::randn({8, 3});
  torch::optim::SGD opt_a(a->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt_b(b->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  GradScaler scaler;
  for (int i = 0; i < 5; ++i) {
    opt_a.zero_grad();
    scaler.scale(torch::mse_loss(a(x), y)).backward();
    CHECK(scaler.step(opt_a));
    scaler.update();

    opt_b.zero_grad();
    torch::mse_loss(b(x), y).backward();
    opt_b.step();
  }
  for (auto [pa, pb] : {std::pair{a->weight, b->weight}, std::pair{a->bias, b->bias}}) {
    auto fa = pa.detach().flatten();
    auto fb = pb.detach().flatten();
    for (int64_t i = 0; i < fa.numel(); ++i) {
      CHECK(fa[i].item<float>() == Approx(fb[i].item<float>()).epsilon(1e-6));
    }
  }
}

TEST_CASE("step_masked matches step for clean steps and is a no-op for inf steps", "[grad_scaler]") {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case c =
      std::array<Case, 4>{Case{0.0, 0.0, 0.0, false}, Case{0.9, 0.0, 0.0, false}, Case{0.9, 0.1, 0.01, false},
                          Case{0.9, 0.0, 0.01, true}}[GENERATE(0, 1, 2, 3)];
  INFO("momentum " << c.momentum << " dampening " << c.dampening << " weight_decay " << c.weight_decay
                   << " nesterov " << c.nesterov);
  auto sgd_options = torch::optim::SGDOptions(0.5)
                         .momentum(c.momentum)
                         .dampening(c.dampening)
                         .weight_decay(c.weight_decay)
                         .nesterov(c.nesterov);
  Toy eager_toy, masked_toy;
  torch::optim::SGD eager_opt({eager_toy.p}, sgd_options);
  torch::optim::SGD masked_opt({masked_toy.p}, sgd_options);
  GradScaler eager, masked;
  // clean, clean, inf, clean, NaN, clean; the masked run mixes in an eager step at i == 3.
  const std::vector<float> poison{0.0f, 0.0f, kInf, 0.0f, kNaN, 0.0f};
  for (size_t i = 0; i < poison.size(); ++i) {
    backward(eager, eager_opt, eager_toy, poison[i]);
    eager.step(eager_opt);
    eager.update();

    auto p_before = masked_toy.p.detach().clone();
    auto buf = momentum_buffer(masked_opt, masked_toy.p);
    auto buf_before = buf.defined() ? buf.clone() : buf;
    backward(masked, masked_opt, masked_toy, poison[i]);
    if (i == 3) {
      masked.step(masked_opt);
    } else {
      masked.step_masked(masked_opt);
    }
    CHECK(masked.found_inf().item<float>() == (poison[i] != 0.0f ? 1.0f : 0.0f));
    masked.update();

    INFO("step " << i);
    // The fused kernel rounds buf * momentum + (1 - dampening) * d_p in its own order: bit-
    // identical without dampening (ptune's SGD), equal to rounding with it.
    auto same = [&](const at::Tensor& a, const at::Tensor& b) {
      return c.dampening == 0.0 ? torch::equal(a, b) : torch::allclose(a, b, 1e-6, 1e-7);
    };
    CHECK(same(masked_toy.p.detach(), eager_toy.p.detach()));
    if (poison[i] != 0.0f) {
      CHECK(torch::equal(masked_toy.p.detach(), p_before));
      if (buf_before.defined()) {
        CHECK(torch::equal(momentum_buffer(masked_opt, masked_toy.p), buf_before));
      }
    }
    if (c.momentum != 0.0) {
      CHECK(same(momentum_buffer(masked_opt, masked_toy.p), momentum_buffer(eager_opt, eager_toy.p)));
    }
    CHECK(masked.get_scale() == eager.get_scale());
    CHECK(masked.get_growth_tracker() == eager.get_growth_tracker());
  }
}

TEST_CASE("step_masked on an inf first step: zero buffer, next step acts as a first step", "[grad_scaler]") {
  Toy eager_toy, masked_toy;
  auto sgd_options = torch::optim::SGDOptions(0.5).momentum(0.9);
  torch::optim::SGD eager_opt({eager_toy.p}, sgd_options);
  torch::optim::SGD masked_opt({masked_toy.p}, sgd_options);
  GradScaler eager, masked;

  backward(eager, eager_opt, eager_toy, kInf);
  CHECK_FALSE(eager.step(eager_opt));  // skipped: PyTorch creates no buffer
  eager.update();
  backward(masked, masked_opt, masked_toy, kInf);
  masked.step_masked(masked_opt);  // creates the buffer as zeros, params unchanged
  masked.update();
  CHECK(torch::equal(masked_toy.p.detach(), torch::tensor({1.0f, -2.0f})));
  CHECK(torch::equal(momentum_buffer(masked_opt, masked_toy.p), torch::zeros({2})));

  // Next clean step: eager buf = clone(grad) = [3, 0.25]; masked buf = 0 * 0.9 + grad, the same.
  backward(eager, eager_opt, eager_toy);
  eager.step(eager_opt);
  eager.update();
  backward(masked, masked_opt, masked_toy);
  masked.step_masked(masked_opt);
  masked.update();
  CHECK(torch::equal(momentum_buffer(masked_opt, masked_toy.p), torch::tensor({3.0f, 0.25f})));
  CHECK(torch::equal(momentum_buffer(eager_opt, eager_toy.p), torch::tensor({3.0f, 0.25f})));
  CHECK(torch::equal(masked_toy.p.detach(), eager_toy.p.detach()));
  CHECK(torch::equal(masked_toy.p.detach(), torch::tensor({-0.5f, -2.125f})));
}

TEST_CASE("step_masked refuses optimizers other than SGD", "[grad_scaler]") {
  Toy toy;
  torch::optim::Adam opt({toy.p}, torch::optim::AdamOptions(0.1));
  GradScaler scaler;
  backward(scaler, opt, toy);
  CHECK_THROWS_AS(scaler.step_masked(opt), std::invalid_argument);
  GradScaler disabled(GradScalerOptions{65536.0, 2.0, 0.5, 2000, false});
  CHECK_THROWS_AS(disabled.step_masked(opt), std::invalid_argument);
}

TEST_CASE("a disabled scaler is the identity and step just steps", "[grad_scaler]") {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  CHECK_FALSE(scaler.is_enabled());
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.5));
  auto loss = toy.loss();
  auto scaled = scaler.scale(loss);
  CHECK(scaled.is_same(loss));
  scaled.backward();
  toy.p.grad()[0].fill_(kInf);  // not checked when disabled
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(std::isinf(toy.p[0].item<float>()));
  CHECK(toy.p[1].item<float>() == -2.125f);
  CHECK(scaler.get_scale() == 1.0);
  CHECK_FALSE(scaler.scale_tensor().defined());
  CHECK_FALSE(scaler.state_dict().has_value());
  // step_masked on a disabled scaler is the same plain SGD step (no inf check either).
  Toy toy2;
  torch::optim::SGD opt2({toy2.p}, torch::optim::SGDOptions(0.5));
  scaler.scale(toy2.loss()).backward();
  toy2.p.grad()[0].fill_(kInf);
  scaler.step_masked(opt2);
  CHECK(std::isinf(toy2.p[0].item<float>()));
  CHECK(toy2.p[1].item<float>() == -2.125f);
}

TEST_CASE("scale sequence and params match torch.amp.GradScaler", "[grad_scaler]") {
  // Reference (torch 2.11, CPU):
  //   p = Parameter([1., -2.]); opt = SGD([p], lr=0.5, momentum=0.9)
  //   sc = torch.amp.GradScaler("cpu", growth_interval=2)
  //   per step: sc.scale((p * [3., .25]).sum()).backward(); poison grad; sc.step(opt); sc.update()
  // By hand, with interval 2 (tracker counts clean steps, grows at 2, resets on inf/NaN):
  //   clean 65536/1, clean 131072/0, inf 65536/0, clean 65536/1, clean 131072/0,
  //   clean 131072/1, NaN 65536/0, inf 32768/0, clean 32768/1, clean 65536/0.
  // Params: step 1 buf = [3, .25], p = [-0.5, -2.125]; step 2 buf = [5.7, .475],
  //   p = [-3.35, -2.3625]; after all ten PyTorch prints p = [-33.5700798034668,
  //   -4.880839824676514], buf = [15.651092529296875, 1.3042576313018799].
  enum Kind { kClean, kInfStep, kNaNStep };
  const std::vector<Kind> pattern{kClean, kClean,   kInfStep, kClean, kClean,
                                  kClean, kNaNStep, kInfStep, kClean, kClean};
  const std::vector<double> scales{65536, 131072, 65536, 65536, 131072, 131072, 65536, 32768, 32768, 65536};
  const std::vector<int64_t> trackers{1, 0, 0, 1, 0, 1, 0, 0, 1, 0};
  const bool masked = GENERATE(false, true);
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.5).momentum(0.9));
  GradScalerOptions o;
  o.growth_interval = 2;
  GradScaler scaler(o);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == kInfStep) {
      backward(scaler, opt, toy, kInf, 0);
    } else if (pattern[i] == kNaNStep) {
      backward(scaler, opt, toy, kNaN, 1);
    } else {
      backward(scaler, opt, toy);
    }
    if (masked) {
      scaler.step_masked(opt);
    } else {
      scaler.step(opt);
    }
    scaler.update();
    INFO("step " << i);
    CHECK(scaler.get_scale() == scales[i]);
    CHECK(scaler.get_growth_tracker() == trackers[i]);
    if (i == 1) {
      CHECK(torch::equal(toy.p.detach(), torch::tensor({-3.35f, -2.3625f})));
    }
  }
  CHECK(torch::equal(toy.p.detach(), torch::tensor({static_cast<float>(-33.5700798034668),
                                                    static_cast<float>(-4.880839824676514)})));
  CHECK(torch::equal(momentum_buffer(opt, toy.p), torch::tensor({static_cast<float>(15.651092529296875),
                                                                 static_cast<float>(1.3042576313018799)})));
}

TEST_CASE("state_dict and archive round-trip", "[grad_scaler]") {
  GradScalerOptions o;
  o.growth_interval = 5;
  GradScaler scaler(o);
  Toy toy;
  torch::optim::SGD opt({toy.p}, torch::optim::SGDOptions(0.1));
  backward(scaler, opt, toy, kInf);
  scaler.step(opt);
  scaler.update();  // 32768, tracker 0
  backward(scaler, opt, toy);
  scaler.step(opt);
  scaler.update();  // 32768, tracker 1
  auto s = scaler.state_dict();
  REQUIRE(s.has_value());
  CHECK(s->scale == 32768.0);
  CHECK(s->growth_tracker == 1);
  CHECK(s->growth_interval == 5);

  // Loaded before the first scale(): the tensors are created with the loaded values.
  GradScaler fresh;
  fresh.load_state_dict(*s);
  CHECK(fresh.get_scale() == 32768.0);
  CHECK(fresh.scale(torch::tensor(1.0f)).item<float>() == 32768.0f);
  CHECK(fresh.get_growth_tracker() == 1);
  CHECK(fresh.growth_interval() == 5);

  std::stringstream stream;
  {
    torch::serialize::OutputArchive out;
    scaler.save(out);
    out.save_to(stream);
  }
  GradScaler loaded;
  loaded.scale(torch::tensor(1.0f));  // already initialized: filled in place
  {
    torch::serialize::InputArchive in;
    in.load_from(stream);
    loaded.load(in);
  }
  auto l = loaded.state_dict();
  REQUIRE(l.has_value());
  CHECK(l->scale == 32768.0);
  CHECK(l->growth_tracker == 1);
  CHECK(l->growth_factor == 2.0);
  CHECK(l->backoff_factor == 0.5);
  CHECK(l->growth_interval == 5);

  // An archive without scaler state (e.g. from a disabled scaler) is an error.
  std::stringstream empty_stream;
  {
    torch::serialize::OutputArchive out;
    out.write("something_else", c10::IValue(int64_t{1}));
    out.save_to(empty_stream);
  }
  torch::serialize::InputArchive in;
  in.load_from(empty_stream);
  GradScaler other;
  CHECK_THROWS_AS(other.load(in), std::runtime_error);
}
