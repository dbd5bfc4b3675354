#include "bench/convergence.hpp"

#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "bench/pipeline.hpp"
#include "dist/group.hpp"
#include "engine/trainer.hpp"
#include "runtime/device.hpp"

namespace ptune::bench {

std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps) {
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  engine::Trainer trainer(cfg, device, group);
  data::Loader loader(engine::make_dataset(cfg),
                      engine::loader_options(cfg, device, group->rank(), group->size()));
  EndlessBatches batches(loader);
  engine::Feeder feeder([&]() -> std::optional<data::Batch> { return batches.next(); }, device);
  std::vector<at::Tensor> losses;
  for (int64_t i = 0; i < steps; ++i) {
    auto [images, labels] = trainer.to_device(*feeder.next());
    losses.push_back(trainer.step(images, labels));
  }
  // One host read at the end, not one per step.
  at::Tensor all = torch::stack(losses).to(at::kDouble).cpu();
  std::vector<double> curve(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  if (group->size() > 1) {
    curve = group->sum(curve);
    for (auto& v : curve) v /= static_cast<double>(group->size());
  }
  return curve;
}

ConvergenceVerdict compare_convergence(const std::vector<double>& curve, const std::vector<double>& reference,
                                       double tolerance) {
  ConvergenceVerdict v;
  const size_t n = std::min(curve.size(), reference.size());
  if (n == 0) return v;
  const size_t from = n - std::max<size_t>(1, n / 4);
  for (size_t i = from; i < n; ++i) {
    v.mean_loss += curve[i];
    v.reference_mean_loss += reference[i];
  }
  v.mean_loss /= static_cast<double>(n - from);
  v.reference_mean_loss /= static_cast<double>(n - from);
  const double rel = v.reference_mean_loss != 0
                         ? std::abs(v.mean_loss - v.reference_mean_loss) / std::abs(v.reference_mean_loss)
                         : 0;
  v.altered = rel > tolerance;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "convergence %s: mean loss %.4f over steps %zu-%zu vs %.4f in the first row (%+.1f%%, "
                "tolerance %.0f%%)",
                v.altered ? "altered" : "unchanged", v.mean_loss, from + 1, n, v.reference_mean_loss,
                100.0 * (v.mean_loss - v.reference_mean_loss) /
                    (v.reference_mean_loss != 0 ? v.reference_mean_loss : 1.0),
                100.0 * tolerance);
  v.text = buf;
  return v;
}

}  // namespace ptune::bench
