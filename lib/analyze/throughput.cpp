#include "analyze/throughput.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string_view>
#include <unordered_map>

#include "analyze/breakdown.hpp"
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

/// What one operator call computes and moves.
struct OpCost {
  const char* cls = nullptr;  // nullptr: not counted
  double flops = 0;
  double bytes = -1;  // -1: unknown
  const char* precision = "fp32";
};

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
  static const char* names[] = {"add",
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
  for (const char* n : names)
    if (op == n) return true;
  return false;
}

bool is_norm(std::string_view op) {
  for (const char* p : {"batch_norm", "native_batch_norm", "native_batch_norm_backward", "layer_norm",
                        "native_layer_norm", "native_layer_norm_backward", "group_norm", "native_group_norm",
                        "native_group_norm_backward", "cudnn_batch_norm", "cudnn_batch_norm_backward"})
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

OpCost cost_of(std::string_view name, const OpInputs& in) {
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

/// An operator counted: its cost, with the trace's FLOPs where it gives them.
struct Counted {
  const Event* e;
  OpCost cost;
};

/// Whether `ts` lies in one of `steps` (sorted by start, not overlapping).
bool in_steps(const std::vector<std::pair<double, double>>& steps, double ts) {
  auto it = std::upper_bound(steps.begin(), steps.end(), ts,
                             [](double v, const std::pair<double, double>& s) { return v < s.first; });
  return it != steps.begin() && ts < std::prev(it)->second;
}

/// The operators counted in `steps` that start in [lo, hi): per thread the outermost of those
/// with a class (a class's operators call each other: aten::conv2d calls aten::convolution).
std::vector<Counted> counted_ops(const Trace& t, const std::vector<std::pair<double, double>>& steps,
                                 double lo, double hi, bool* from_trace) {
  std::map<std::pair<int64_t, int64_t>, std::vector<Counted>> threads;
  for (const auto& [idx, in] : t.inputs) {
    const Event& e = t.events[idx];
    if (!in_steps(steps, e.ts)) continue;
    OpCost c = cost_of(e.name, in);
    if (in.flops >= 0) {
      *from_trace = true;
      c.flops = in.flops;
      if (!c.cls && in.flops > 0) c.cls = "other";
    }
    if (!c.cls) continue;
    c.precision = in.types.empty() ? "fp32" : precision_of(in.types[0]);
    threads[{e.pid, e.tid}].push_back({&e, c});
  }
  std::vector<Counted> out;
  for (auto& [key, ops] : threads) {
    std::sort(ops.begin(), ops.end(), [](const Counted& a, const Counted& b) {
      return a.e->ts != b.e->ts ? a.e->ts < b.e->ts : a.e->dur != b.e->dur ? a.e->dur > b.e->dur : a.e < b.e;
    });
    double end = -1e300;
    for (const auto& c : ops) {
      if (c.e->end() <= end) continue;  // inside the one counted before
      if (c.e->ts >= lo && c.e->ts < hi) out.push_back(c);
      end = c.e->end();
    }
  }
  return out;
}

/// The kernel time an operator launched, by the precision the kernels' names say (an index in
/// precisions()).
struct KernelTime {
  std::array<double, 8> us{};
  uint32_t present = 0;  // bit i: precision i seen
  void add(size_t i, double d) { us[i] += d, present |= 1u << i; }
  void add(const KernelTime& k) {
    for (size_t i = 0; i < us.size(); ++i)
      if (k.present & (1u << i)) add(i, k.us[i]);
  }
};

/// On a GPU: each counted operator's time is that of the kernels it launched (the runtime calls
/// inside it on its thread, linked by correlation). Returns, for each of `ops`, its kernels' time
/// by precision.
std::vector<KernelTime> kernel_time(const Trace& t, const std::vector<Counted>& ops) {
  std::unordered_map<int64_t, KernelTime> by_corr;
  for (const auto& e : t.events)
    if (e.kind == Kind::kKernel && e.correlation >= 0) by_corr[e.correlation].add(precision_index(e), e.dur);
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<const Event*, const KernelTime*>>> launches;
  for (const auto& e : t.events)
    if (e.kind == Kind::kRuntime && e.correlation >= 0) {
      auto k = by_corr.find(e.correlation);
      if (k != by_corr.end()) launches[{e.pid, e.tid}].emplace_back(&e, &k->second);
    }
  for (auto& [k, v] : launches)
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.first->ts < b.first->ts; });
  std::vector<KernelTime> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const Event* e = ops[i].e;
    auto it = launches.find({e->pid, e->tid});
    if (it == launches.end()) continue;
    auto l = std::lower_bound(it->second.begin(), it->second.end(), e->ts,
                              [](const auto& x, double ts) { return x.first->ts < ts; });
    for (; l != it->second.end() && l->first->ts <= e->end(); ++l) out[i].add(*l->second);
  }
  return out;
}

/// The time of `k`, summed in the order of the precisions' names.
double total(const KernelTime& k) {
  double s = 0;
  for (size_t i = 0; i < k.us.size(); ++i)
    if (k.present & (1u << i)) s += k.us[i];
  return s;
}

double total(const std::map<std::string, double>& k) {
  double s = 0;
  for (const auto& [p, us] : k) s += us;
  return s;
}

std::string pct_text(double v) { return std::to_string(static_cast<int>(v + 0.5)) + "%"; }

/// Why a class's FLOP/s pass its ceiling: the assumption that failed.
std::string over_reason(const ClassRate& c, const std::string& source) {
  double unnamed = 0, all = 0;
  for (const auto& [p, us] : c.us_by_precision) (p.empty() ? unnamed : all) += us;
  all += unnamed;
  if (all > 0 && unnamed > 0)
    return pct_text(100.0 * unnamed / all) +
           " of its kernel time is in kernels whose names say no precision " +
           "(an unknown family, read as " + c.precision + "): a ceiling too low if they ran on Tensor Cores";
  return source == "trace"
             ? "the trace's FLOPs are more than its kernels can do in their time"
             : "its FLOPs, counted from the input shapes, are more than its kernels did (a count "
               "the kernels did not do)";
}

/// The ceilings of a GPU class from the precisions its kernels ran in, time-weighted.
void class_ceiling(ClassRate& c, const std::string& device, std::vector<system::Peak>& peaks,
                   std::string& missing) {
  std::map<std::string, double> by = c.us_by_precision;
  if (const auto it = by.find(""); it != by.end()) {  // kernels that say no precision: the op's
    const double us = it->second;
    by.erase(it);
    by[c.precision] += us;
  }
  const double all = total(by);
  if (all <= 0) return;
  double weighted = 0;
  std::string text;
  for (const auto& [p, us] : by) {
    const auto peak = system::known_gpu_peak(device, p);
    if (!peak) {
      missing = "no datasheet figure for `" + device + "` in " + p;
      return;
    }
    if (std::none_of(peaks.begin(), peaks.end(),
                     [&p = p](const system::Peak& q) { return q.precision == p; }))
      peaks.push_back(*peak);
    weighted += us * peak->flops_per_s;
    text += (text.empty() ? "" : ", ") + p + (by.size() > 1 ? " " + pct_text(100.0 * us / all) : "");
  }
  c.ceiling = weighted / all;
  c.ceiling_text = by.size() > 1 ? text + " of its kernel time" : text;
}

/// Each class's ceiling, the step's, and why a figure above its ceiling is left out.
void class_ceilings(Throughput& th, const Breakdown& b) {
  const std::string device = b.devices.empty() ? "" : b.devices.front();
  double ideal_us = 0;  // the step's FLOPs at their classes' ceilings
  for (auto& c : th.classes) {
    if (b.has_gpu && !device.empty()) {
      std::string missing;
      class_ceiling(c, device, th.peaks, missing);
      if (!missing.empty() && th.no_ceilings.empty()) th.no_ceilings = missing;
    } else if (th.ceilings && c.precision == th.precision) {
      c.ceiling = th.ceilings->peak.flops_per_s;
      c.ceiling_text = th.precision;
    }
    if (c.ceiling > 0 && c.flops_per_s() > c.ceiling) c.over = over_reason(c, th.source);
    const double ceiling = c.ceiling > 0 ? c.ceiling : th.ceilings ? th.ceilings->peak.flops_per_s : 0;
    if (ceiling > 0) ideal_us += c.flops / ceiling * 1e6;
  }
  if (th.ceilings && th.peaks.empty()) th.peaks.push_back(th.ceilings->peak);
  if (ideal_us > 0 && th.flops > 0) th.step_ceiling = th.flops * 1e6 / ideal_us;
  if (th.step_ceiling > 0 && th.flops_per_s() > th.step_ceiling)
    th.step_over = "the step's FLOPs are more than its time at the classes' ceilings allows";
}

/// The precision of the most FLOPs (bytes where none) in `by`; fp32 when empty.
std::string most_of(const std::map<std::string, double>& by) {
  std::string p = "fp32";
  double most = 0;
  for (const auto& [name, f] : by)
    if (f > most) most = f, p = name;
  return p;
}

/// The ceilings of the rank's device in `precision`.
void find_ceilings(Throughput& th, const Breakdown& b, const CpuCeilings& cpu) {
  if (b.has_gpu) {
    const std::string name = b.devices.empty() ? "" : b.devices.front();
    auto peak = system::known_gpu_peak(name, th.precision);
    auto bw = system::known_gpu_bandwidth(name);
    if (peak && bw)
      th.ceilings = Ceilings{*peak, *bw};
    else
      th.no_ceilings = name.empty() ? "the trace names no device (deviceProperties)"
                                    : "no datasheet figures for `" + name + "` in " + th.precision;
    return;
  }
  if (!cpu || (th.precision != "fp32" && th.precision != "bf16")) {
    th.no_ceilings = cpu ? "no " + th.precision + " calibration on a CPU" : "no CPU calibration";
    return;
  }
  auto c = cpu(th.precision);
  if (c && c->peak.under_load)  // load pulls a calibration down by any amount: no ceiling
    th.no_ceilings = "the " + th.precision +
                     " peak was calibrated under competing load, so it is no ceiling (" + c->peak.source +
                     "); analyze again when the cores are quiet";
  else if (c && c->peak.flops_per_s > 0)
    th.ceilings = c;
  else
    th.no_ceilings = c ? c->peak.source : "no " + th.precision + " calibration on this CPU";
}

}  // namespace

std::optional<double> roof_of(const ClassRate& c, const std::optional<Ceilings>& ceil) {
  const auto ai = c.intensity();
  const double peak = c.ceiling > 0 ? c.ceiling : ceil ? ceil->peak.flops_per_s : 0;
  if (!ceil || !ai || peak <= 0 || ceil->bandwidth.bytes_per_s <= 0) return std::nullopt;
  return std::min(peak, *ai * ceil->bandwidth.bytes_per_s);
}

std::optional<double> peak_pct(const ClassRate& c) {
  if (c.ceiling <= 0 || !c.over.empty()) return std::nullopt;
  return 100.0 * c.flops_per_s() / c.ceiling;
}

/// "156 TFLOP/s", "19.5 TFLOP/s", "44.9 GFLOP/s" (`unit` "FLOP/s" or "B/s"): three digits.
std::string rate_text(double v, const char* unit) {
  static const char* kPrefix[] = {"", "k", "M", "G", "T", "P"};
  size_t i = 0;
  while (v >= 999.5 && i + 1 < std::size(kPrefix)) v /= 1000, ++i;
  char buf[48];
  std::snprintf(buf, sizeof buf,
                v >= 99.95   ? "%.0f %s%s"
                : v >= 9.995 ? "%.1f %s%s"
                             : "%.2f %s%s",
                v, kPrefix[i], unit);
  return buf;
}

std::string ceilings_text(const Throughput& th) {
  if (th.peaks.empty()) return "";
  std::string s, source;
  for (const auto& p : th.peaks) {
    s += (s.empty() ? "" : ", ") + rate_text(p.flops_per_s) + " " + p.precision;
    // A datasheet's source names the precision last (", dense tf32"): one source for them all.
    const auto cut = p.source.rfind(", dense ");
    source = cut == std::string::npos ? p.source : p.source.substr(0, cut) + ", dense";
  }
  s += " (" + source + ")";
  if (th.ceilings && th.ceilings->bandwidth.bytes_per_s > 0)
    s += "; " + rate_text(th.ceilings->bandwidth.bytes_per_s, "B/s") + " (" + th.ceilings->bandwidth.source +
         ")";
  return s;
}

std::vector<std::string> over_notes(const Throughput& th) {
  std::vector<std::string> out;
  for (const auto& c : th.classes)
    if (!c.over.empty())
      out.push_back(c.name + ": " + rate_text(c.flops_per_s()) + " is more than its ceiling (" +
                    rate_text(c.ceiling) + " " + c.ceiling_text + "), so no % of peak: " + c.over);
  if (!th.step_over.empty())
    out.push_back("step: " + rate_text(th.flops_per_s()) + " is more than its ceiling (" +
                  rate_text(th.step_ceiling) + "), so no % of peak: " + th.step_over);
  return out;
}

std::optional<double> step_peak_pct(const Throughput& th) {
  if (th.step_ceiling <= 0 || !th.step_over.empty()) return std::nullopt;
  return 100.0 * th.flops_per_s() / th.step_ceiling;
}

std::string bound_of(const ClassRate& c, const std::optional<Ceilings>& ceil) {
  const auto ai = c.intensity();
  if (!roof_of(c, ceil)) return c.bytes && c.flops == 0 ? "memory-bound" : "";
  const double peak = c.ceiling > 0 ? c.ceiling : ceil->peak.flops_per_s;
  return *ai * ceil->bandwidth.bytes_per_s < peak ? "memory-bound" : "compute-bound";
}

struct ThroughputBuilder::Sums {
  std::vector<std::pair<double, double>> windows;  // the steps so far, sorted by start
  size_t seen = 0;                                 // of BreakdownBuilder's steps
  bool from_trace = false, shapes = false;
  std::map<std::string, ClassRate> classes;
  std::map<std::string, double> by_precision;
  std::map<std::string, std::map<std::string, double>> class_precision;  // class -> precision -> FLOPs
};

ThroughputBuilder::ThroughputBuilder(size_t steps, bool has_gpu)
    : nsteps_(static_cast<double>(std::max<size_t>(steps, 1))),
      has_gpu_(has_gpu),
      sums_(std::make_unique<Sums>()) {}
ThroughputBuilder::~ThroughputBuilder() = default;

void ThroughputBuilder::add(const Trace& t, const std::vector<StepBreakdown>& windows,
                            std::pair<double, double> own) {
  Sums& z = *sums_;
  // The windows not seen before, added to the sorted list once (not the whole list per part).
  auto& steps = z.windows;
  const bool in_order =
      z.seen >= windows.size() || steps.empty() || windows[z.seen].start >= steps.back().first;
  for (; z.seen < windows.size(); ++z.seen) steps.emplace_back(windows[z.seen].start, windows[z.seen].end);
  if (!in_order) std::sort(steps.begin(), steps.end());
  z.shapes = z.shapes || std::any_of(t.inputs.begin(), t.inputs.end(),
                                     [](const auto& x) { return !x.second.dims.empty(); });
  const auto ops = counted_ops(t, steps, own.first, own.second, &z.from_trace);
  const auto kernels = has_gpu_ ? kernel_time(t, ops) : std::vector<KernelTime>{};
  // The sums each class and precision adds to, found once per distinct name (the names are the
  // cost functions' literals), not once per operator.
  struct Into {
    ClassRate* r;
    std::map<std::string, double>* precision;
    std::array<double*, 8> us{};  // r->us_by_precision's entries, by index in precisions()
  };
  std::unordered_map<const char*, Into> into;
  std::unordered_map<const char*, double*> by_precision;
  std::map<std::pair<const char*, const char*>, double*> class_precision;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Counted& c = ops[i];
    auto cls = into.find(c.cost.cls);
    if (cls == into.end()) {
      ClassRate& r = z.classes[c.cost.cls];
      r.name = c.cost.cls;
      cls = into.emplace(c.cost.cls, Into{&r, &z.class_precision[c.cost.cls]}).first;
    }
    ClassRate& r = *cls->second.r;
    r.calls += 1 / nsteps_;
    r.flops += c.cost.flops / nsteps_;
    if (c.cost.bytes >= 0) r.bytes = r.bytes.value_or(0) + c.cost.bytes / nsteps_;
    r.us += (has_gpu_ ? total(kernels[i]) : c.e->dur) / nsteps_;
    if (has_gpu_) {
      const KernelTime& k = kernels[i];
      for (size_t j = 0; j < k.us.size(); ++j) {
        if (!(k.present & (1u << j))) continue;
        double*& us = cls->second.us[j];
        if (!us) us = &r.us_by_precision[precisions()[j]];
        *us += k.us[j] / nsteps_;
      }
    }
    const double flops = c.cost.flops > 0 ? c.cost.flops : 1e-9;
    double*& all = by_precision[c.cost.precision];
    if (!all) all = &z.by_precision[c.cost.precision];
    *all += flops;
    double*& mine = class_precision[{c.cost.cls, c.cost.precision}];
    if (!mine) mine = &(*cls->second.precision)[c.cost.precision];
    *mine += flops;
  }
}

Throughput ThroughputBuilder::finish(const Breakdown& b, const CpuCeilings& cpu) {
  Sums& z = *sums_;
  Throughput th;
  const auto mean = b.mean();
  th.step_us = mean.end - mean.start;
  if (!z.from_trace && !z.shapes) {
    th.missing = b.writer == "ptune"
                     ? "no input shapes in the trace"
                     : "add `record_shapes=True` (or `with_flops=True`) to `torch.profiler.profile(...)` for "
                       "FLOP/s and bytes per operator class";
    return th;
  }
  th.source = z.from_trace ? "trace" : "shapes";
  th.precision = most_of(z.by_precision);
  for (auto& [n, r] : z.classes) {
    r.precision = most_of(z.class_precision[n]);
    th.flops += r.flops;
    th.classes.push_back(r);
  }
  std::sort(th.classes.begin(), th.classes.end(),
            [](const ClassRate& x, const ClassRate& y) { return x.us > y.us; });
  find_ceilings(th, b, cpu);
  class_ceilings(th, b);
  return th;
}

}  // namespace ptune::analyze
