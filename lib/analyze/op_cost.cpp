#include "analyze/op_cost.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "analyze/events.hpp"

namespace ptune::analyze {
namespace {

double numel(const std::vector<int64_t>& d) {
  double n = 1;
  for (int64_t v : d) n *= static_cast<double>(std::max<int64_t>(v, 0));
  return n;
}

/// Bytes per element of an "Input type" ("float", "c10::BFloat16", "long int"); 0: not a tensor's.
double elem_bytes(std::string_view t) {
  if (t == "float" || t == "int" || t == "unsigned int") return 4;
  if (t == "double" || t == "long int" || t == "c10::complex<float>") return 8;
  if (t == "c10::BFloat16" || t == "c10::Half" || t == "short int") return 2;
  if (t == "bool" || t == "signed char" || t == "unsigned char" || text::starts_with(t, "c10::Float8"))
    return 1;
  return 0;
}

const char* precision_of(std::string_view t) {
  if (t == "c10::BFloat16") return "bf16";
  if (t == "c10::Half") return "fp16";
  if (t == "double") return "fp64";
  return "fp32";
}

/// The integers of a "Concrete Inputs" value: "[2, 2]" -> {2, 2}, "1" -> {1}, "True" -> {1}.
std::vector<int64_t> ints_of(std::string_view s) {
  std::vector<int64_t> out;
  std::string cur;
  auto flush = [&]() {
    if (cur == "True")
      out.push_back(1);
    else if (cur == "False")
      out.push_back(0);
    else if (!cur.empty() && (std::isdigit(static_cast<unsigned char>(cur.back())) != 0))
      out.push_back(std::strtoll(cur.c_str(), nullptr, 10));
    cur.clear();
  };
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0 || (c == '-' && cur.empty()))
      cur += c;
    else
      flush();
  }
  flush();
  return out;
}

const std::vector<int64_t>& dims_at(const OpInputs& in, size_t i) {
  static const std::vector<int64_t> none;
  return i < in.dims.size() ? in.dims[i] : none;
}
std::vector<int64_t> concrete_at(const OpInputs& in, size_t i) {
  return i < in.concrete.size() ? ints_of(in.concrete[i]) : std::vector<int64_t>{};
}
double size_of(const OpInputs& in) {  // bytes per element of the first tensor input
  for (size_t i = 0; i < in.types.size(); ++i)
    if (!dims_at(in, i).empty() && elem_bytes(in.types[i]) > 0) return elem_bytes(in.types[i]);
  return 4;
}
double inputs_bytes(const OpInputs& in) {
  double b = 0;
  for (size_t i = 0; i < in.dims.size(); ++i) {
    if (in.dims[i].empty()) continue;
    const double size = i < in.types.size() ? elem_bytes(in.types[i]) : 0;
    b += numel(in.dims[i]) * (size > 0 ? size : 4);
  }
  return b;
}

/// A convolution's output spatial sizes from its input's, the kernel's and stride, padding,
/// dilation (at `arg`, `arg`+1, `arg`+2 of its concrete inputs); empty when they are not recorded.
std::vector<int64_t> conv_out(const OpInputs& in, const std::vector<int64_t>& x,
                              const std::vector<int64_t>& w, size_t arg) {
  const size_t n = x.size() >= 3 ? x.size() - 2 : 0;
  const auto s = concrete_at(in, arg), p = concrete_at(in, arg + 1), d = concrete_at(in, arg + 2);
  if (n == 0 || w.size() != n + 2 || s.empty() || p.empty() || d.empty()) return {};
  std::vector<int64_t> o;
  for (size_t i = 0; i < n; ++i) {
    auto at = [&](const std::vector<int64_t>& v) { return v[std::min(i, v.size() - 1)]; };
    const int64_t span = at(d) * (w[i + 2] - 1) + 1;
    o.push_back(at(s) > 0 ? (x[i + 2] + 2 * at(p) - span) / at(s) + 1 : 0);
  }
  return o;
}

/// 2 x N x Cout x prod(out) x Cin/groups x prod(kernel): PyTorch's with_flops formula.
double conv_flops(const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                  const std::vector<int64_t>& out) {
  std::vector<int64_t> k(w.begin() + 2, w.end());
  const double n = static_cast<double>(x[0]), cout = static_cast<double>(w[0]),
               cin = static_cast<double>(w[1]);
  return 2.0 * n * cout * numel(out) * cin * numel(k);
}

OpCost conv_cost(const OpInputs& in, bool generic) {
  OpCost c{"convolution", 0, -1, ""};
  const auto& x = dims_at(in, 0);
  const auto& w = dims_at(in, 1);
  if (generic && !concrete_at(in, 6).empty() && concrete_at(in, 6)[0] != 0) return {};  // transposed
  const auto out = conv_out(in, x, w, 3);
  if (out.empty()) return c;
  c.flops = conv_flops(x, w, out);
  std::vector<int64_t> y{x[0], w[0]};
  y.insert(y.end(), out.begin(), out.end());
  c.bytes = inputs_bytes(in) + numel(y) * size_of(in);
  return c;
}

/// aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
/// transposed, output_padding, groups, output_mask): the forward's FLOPs once per gradient
/// computed (output_mask's first two).
OpCost conv_backward_cost(const OpInputs& in) {
  OpCost c{"convolution backward", 0, -1, ""};
  const auto& g = dims_at(in, 0);
  const auto& x = dims_at(in, 1);
  const auto& w = dims_at(in, 2);
  const auto mask = concrete_at(in, 10);
  if (g.size() < 3 || w.size() != g.size() || x.size() != g.size()) return c;
  if (!concrete_at(in, 7).empty() && concrete_at(in, 7)[0] != 0) return {};  // transposed
  const std::vector<int64_t> out(g.begin() + 2, g.end());
  const double grads = mask.size() >= 2 ? static_cast<double>((mask[0] != 0) + (mask[1] != 0)) : 2.0;
  c.flops = conv_flops(x, w, out) * grads;
  c.bytes = inputs_bytes(in) + size_of(in) * ((mask.empty() || mask[0] ? numel(x) : 0) +
                                              (mask.size() < 2 || mask[1] ? numel(w) : 0));
  return c;
}

OpCost matmul_cost(std::string_view op, const OpInputs& in) {
  OpCost c{"matmul", 0, -1, ""};
  const bool bias = op == "addmm" || op == "baddbmm";
  const auto& a = dims_at(in, bias ? 1 : 0);
  const auto& b = dims_at(in, bias ? 2 : 1);
  const size_t r = text::starts_with(op, "b") ? 3 : 2;
  if (a.size() != r || b.size() != r) return c;
  const double batch = r == 3 ? static_cast<double>(a[0]) : 1.0;
  const double m = static_cast<double>(a[r - 2]), k = static_cast<double>(a[r - 1]),
               n = static_cast<double>(b[r - 1]);
  c.flops = 2.0 * batch * m * k * n;
  c.bytes = inputs_bytes(in) + batch * m * n * size_of(in);
  return c;
}

bool is_elementwise(std::string_view op) {
  static constexpr std::string_view names[] = {"add",
                                               "add_",
                                               "mul",
                                               "mul_",
                                               "sub",
                                               "sub_",
                                               "div",
                                               "div_",
                                               "relu",
                                               "relu_",
                                               "threshold_backward",
                                               "gelu",
                                               "gelu_backward",
                                               "silu",
                                               "silu_",
                                               "silu_backward",
                                               "sigmoid",
                                               "sigmoid_backward",
                                               "tanh",
                                               "tanh_backward",
                                               "hardswish",
                                               "hardswish_",
                                               "hardswish_backward",
                                               "hardsigmoid",
                                               "addcmul_",
                                               "addcdiv_",
                                               "lerp_",
                                               "sqrt",
                                               "exp",
                                               "neg",
                                               "clamp_min",
                                               "clamp",
                                               "where",
                                               "dropout",
                                               "native_dropout"};
  for (const std::string_view n : names)
    if (op == n) return true;
  return false;
}

bool is_norm(std::string_view op) {
  static constexpr std::string_view norms[] = {
      "batch_norm",       "native_batch_norm",        "native_batch_norm_backward",
      "layer_norm",       "native_layer_norm",        "native_layer_norm_backward",
      "group_norm",       "native_group_norm",        "native_group_norm_backward",
      "cudnn_batch_norm", "cudnn_batch_norm_backward"};
  for (const std::string_view p : norms)
    if (op == p) return true;
  return false;
}

/// Elementwise and normalization: every tensor input read, the largest written (in place: the
/// first); FLOPs only for add and mul (one per output element), as PyTorch's formulas.
OpCost pointwise_cost(std::string_view op, const OpInputs& in, const char* cls) {
  OpCost c{cls, 0, -1, ""};
  double largest = 0;
  for (const auto& d : in.dims) largest = std::max(largest, d.empty() ? 0.0 : numel(d));
  if (largest == 0) return {};
  if (op == "add" || op == "mul") c.flops = largest;
  const double written = op.back() == '_' && !dims_at(in, 0).empty() ? numel(dims_at(in, 0)) : largest;
  c.bytes = inputs_bytes(in) + written * size_of(in);
  return c;
}

OpCost class_cost(std::string_view name, const OpInputs& in) {
  if (!text::starts_with(name, "aten::")) return {};
  const std::string_view op = name.substr(6);
  if (op == "conv1d" || op == "conv2d" || op == "conv3d") return conv_cost(in, false);
  if (op == "convolution" || op == "_convolution") return conv_cost(in, true);
  if (op == "convolution_backward") return conv_backward_cost(in);
  if (op == "mm" || op == "addmm" || op == "bmm" || op == "baddbmm") return matmul_cost(op, in);
  if (is_elementwise(op)) return pointwise_cost(op, in, "elementwise");
  if (is_norm(op)) return pointwise_cost(op, in, "normalization");
  return {};
}

}  // namespace

OpCost op_cost(std::string_view name, const OpInputs& in) {
  OpCost c = class_cost(name, in);
  if (in.flops >= 0) {
    c.from_trace = true;
    c.flops = in.flops;
    if (!c.cls && in.flops > 0) c.cls = "other";
  }
  if (c.cls) c.precision = in.types.empty() ? "fp32" : precision_of(in.types[0]);
  return c;
}

}  // namespace ptune::analyze
