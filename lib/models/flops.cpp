#include "models/flops.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "models/model.hpp"

namespace ptune::models {
namespace {

enum class Op { kNone, kConv, kAddmm, kMm, kBmm, kBaddbmm, kAttention };

Op op_of(const char* name) {
  static const std::map<std::string, Op, std::less<>> kOps = {
      {"aten::convolution", Op::kConv},
      {"aten::addmm", Op::kAddmm},
      {"aten::mm", Op::kMm},
      {"aten::bmm", Op::kBmm},
      {"aten::baddbmm", Op::kBaddbmm},
      {"aten::scaled_dot_product_attention", Op::kAttention},
      {"aten::_scaled_dot_product_flash_attention_for_cpu", Op::kAttention},
      {"aten::_scaled_dot_product_flash_attention", Op::kAttention},
      {"aten::_scaled_dot_product_efficient_attention", Op::kAttention},
      {"aten::_scaled_dot_product_cudnn_attention", Op::kAttention},
  };
  auto it = kOps.find(std::string_view(name));
  return it == kOps.end() ? Op::kNone : it->second;
}

/// What the observer has counted on this thread: `depth` counted calls are open (a counted
/// call inside another, as bmm inside attention's math path, is the outer one's work).
struct Tally {
  int depth = 0;
  double forward = 0, backward = 0;
};
thread_local Tally* tally = nullptr;

const at::Tensor* tensor_at(const at::RecordFunction& fn, size_t i) {
  const auto in = fn.inputs();
  return i < in.size() && in[i].isTensor() ? &in[i].toTensor() : nullptr;
}

bool needs_grad(const at::Tensor* t) { return t && t->requires_grad(); }

std::vector<int64_t> int_list(const at::RecordFunction& fn, size_t i) {
  const auto in = fn.inputs();
  return i < in.size() && in[i].isIntList() ? in[i].toIntVector() : std::vector<int64_t>{};
}

/// Element i of a conv's per-dimension option (a list of one value applies to every dimension).
int64_t dim_opt(const std::vector<int64_t>& v, size_t i, int64_t dflt) {
  if (v.empty()) return dflt;
  return v.size() == 1 ? v[0] : v[i];
}

/// aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
/// groups): 2 x the weight's elements x the output positions of one image x the batch (each
/// weight element meets one input element per output position, grouped or not); transposed,
/// the input positions instead.
double conv_flops(const at::RecordFunction& fn) {
  const at::Tensor *x = tensor_at(fn, 0), *w = tensor_at(fn, 1);
  if (!x || !w || x->dim() < 3) return 0;
  const auto stride = int_list(fn, 3), pad = int_list(fn, 4), dil = int_list(fn, 5);
  const auto in = fn.inputs();
  const bool transposed = in.size() > 6 && in[6].isBool() && in[6].toBool();
  double positions = 1;
  for (int64_t d = 2; d < x->dim(); ++d) {
    const auto i = static_cast<size_t>(d - 2);
    const int64_t size = x->size(d), k = w->size(d);
    positions *= static_cast<double>(
        transposed
            ? size
            : (size + 2 * dim_opt(pad, i, 0) - dim_opt(dil, i, 1) * (k - 1) - 1) / dim_opt(stride, i, 1) + 1);
  }
  return 2.0 * static_cast<double>(x->size(0)) * positions * static_cast<double>(w->numel());
}

/// 2 x M x K x N for a (..., M, K) @ (..., K, N) product, the leading dims of `a` its batch.
double matmul_flops(const at::Tensor* a, const at::Tensor* b) {
  if (!a || !b || a->dim() < 2 || b->dim() < 2) return 0;
  return 2.0 * static_cast<double>(a->numel()) * static_cast<double>(b->size(-1));
}

/// Attention's two products: Q K^T (L x E by E x S) and P V (L x S by S x Ev), per batch and head.
double attention_flops(const at::Tensor* q, const at::Tensor* k, const at::Tensor* v) {
  if (!q || !k || !v || q->dim() < 2) return 0;
  const double batch_heads = static_cast<double>(q->numel() / (q->size(-1) * q->size(-2)));
  const double l = static_cast<double>(q->size(-2)), s = static_cast<double>(k->size(-2));
  return 2.0 * batch_heads * l * s * static_cast<double>(q->size(-1)) +
         2.0 * batch_heads * l * s * static_cast<double>(v->size(-1));
}

/// Adds a counted call: its forward FLOPs, and its backward as the forward once per operand
/// that needs a gradient (attention: twice, its four backward products, when any does).
void add(const at::RecordFunction& fn, Op op) {
  const auto t = [&](size_t i) { return tensor_at(fn, i); };
  double f = 0;
  int grads = 0;
  switch (op) {
    case Op::kConv:
      f = conv_flops(fn), grads = needs_grad(t(0)) + needs_grad(t(1));
      break;
    case Op::kMm:
    case Op::kBmm:
      f = matmul_flops(t(0), t(1)), grads = needs_grad(t(0)) + needs_grad(t(1));
      break;
    case Op::kAddmm:
    case Op::kBaddbmm:
      f = matmul_flops(t(1), t(2)), grads = needs_grad(t(1)) + needs_grad(t(2));
      break;
    case Op::kAttention:
      f = attention_flops(t(0), t(1), t(2));
      grads = (needs_grad(t(0)) || needs_grad(t(1)) || needs_grad(t(2))) ? 2 : 0;
      break;
    case Op::kNone:
      break;
  }
  tally->forward += f;
  tally->backward += f * grads;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (!tally) return nullptr;
  const Op op = op_of(fn.name());
  if (op == Op::kNone) return nullptr;
  if (tally->depth++ == 0) add(fn, op);
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (tally && op_of(fn.name()) != Op::kNone) --tally->depth;
}

/// Keeps the default CPU generator's state across building a model (make() draws from it).
struct GeneratorStateGuard {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  GeneratorStateGuard() {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  ~GeneratorStateGuard() {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
};

Flops count_once(const std::string& arch, int64_t num_classes, int64_t image_size) {
  GeneratorStateGuard keep_rng;
  Model model = make(arch, num_classes, image_size);
  model->eval();  // the counted operations are the same; one image passes batch norm in eval
  Tally t;
  tally = &t;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_enter, on_exit).needsInputs(true));
  try {
    torch::AutoGradMode grad(true);
    model->forward(torch::zeros({1, 3, image_size, image_size}));
  } catch (...) {
    at::removeCallback(handle);
    tally = nullptr;
    throw;
  }
  at::removeCallback(handle);
  tally = nullptr;
  return Flops{t.forward, t.backward};
}

std::mutex counted_mu;
std::map<std::tuple<std::string, int64_t, int64_t>, Flops> counted;

}  // namespace

Flops count_flops(const std::string& arch, int64_t num_classes, int64_t image_size) {
  const auto key = std::make_tuple(arch, num_classes, image_size);
  {
    std::lock_guard<std::mutex> lock(counted_mu);
    if (auto it = counted.find(key); it != counted.end()) return it->second;
  }
  const Flops f = count_once(arch, num_classes, image_size);
  remember_flops(arch, num_classes, image_size, f);
  return f;
}

void remember_flops(const std::string& arch, int64_t num_classes, int64_t image_size, const Flops& flops) {
  std::lock_guard<std::mutex> lock(counted_mu);
  counted[std::make_tuple(arch, num_classes, image_size)] = flops;
}

}  // namespace ptune::models
