// The batch-size finder (tuner.hpp: find_batch_size).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "measure/diagnosis.hpp"
#include "report/results.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "tune/search.hpp"
#include "tune/sweep.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {
namespace {

using Json = nlohmann::ordered_json;

std::string gib(int64_t bytes) {
  return fmt("%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

/// One batch-size search: its limits, the tries (doubling from the config's batch, then a
/// binary search between the largest fit and the smallest failure), the winner.
class BatchSearch {
 public:
  BatchSearch(const config::ExperimentConfig& cfg, const BatchSearchOptions& options)
      : cfg_(cfg), options_(options), hooks_(hooks_of(options)) {}

  BatchSearchResult run() {
    if (options_.margin_pct < 0 || options_.margin_pct >= 100)
      throw ConfigError("--margin: " + fmt("%g", options_.margin_pct) +
                        " is out of range; allowed: 0 <= margin < 100");
    set_limits(runtime::resolve_device(cfg_.device));  // ConfigError for a missing GPU
    hi_ = res_.max_batch + 1;
    res_.table.config = config::to_json(cfg_);
    res_.table.environment = environment(cfg_);
    res_.table.status = report::RunStatus::kRunning;
    t0_ = hooks_.clock();
    double_up();
    bisect();
    res_.stop = stop_.value_or(StopReason{});
    if (res_.stop.is(StopReason::Kind::kBudget))
      res_.notes.push_back("the budget ran out: the search stopped early, after " +
                           std::to_string(res_.tries.size()) + " tries");
    pick_winner();
    res_.table.status = res_.stop.is(StopReason::Kind::kInterrupted) ? report::RunStatus::kInterrupted
                                                                     : report::RunStatus::kComplete;
    return std::move(res_);
  }

 private:
  /// The device's memory limit (CUDA: total less the margin) and the largest batch tried.
  void set_limits(const c10::Device& device) {
    total_ = options_.device_memory_bytes;
    if (total_ <= 0 && device.is_cuda()) total_ = runtime::cuda::total_memory(device.index());
    if (total_ > 0)
      res_.memory_limit_bytes =
          static_cast<int64_t>(static_cast<double>(total_) * (1.0 - options_.margin_pct / 100.0));
    res_.max_batch = options_.max_batch > 0 ? options_.max_batch
                     : device.is_cuda()     ? kDefaultMaxBatchCuda
                                            : kDefaultMaxBatchCpu;
    if (!device.is_cuda() && options_.max_batch <= 0)
      res_.notes.push_back("on the CPU there is no device memory limit to find: the search stops at batch " +
                           std::to_string(res_.max_batch) + " (the CPU default of --max-batch)");
    if (cfg_.data.kind == config::DataKind::kFakeCifar && cfg_.data.num_samples < res_.max_batch) {
      res_.max_batch = cfg_.data.num_samples;
      res_.notes.push_back("capped at data.num_samples (" + std::to_string(res_.max_batch) + ")");
    }
  }

  /// Doubling from the config's batch while it fits.
  void double_up() {
    for (int64_t b = std::min(cfg_.loader.batch_size, res_.max_batch);;) {
      const bool fits = try_batch(b);
      if (stop_) break;
      if (!fits) {
        hi_ = b;
        break;
      }
      lo_ = b;
      if (b >= res_.max_batch) break;
      b = std::min(2 * b, res_.max_batch);
    }
  }

  /// Binary search between the largest fit and the smallest failure, on multiples of
  /// options.granularity, until the gap is within options.resolution_pct.
  void bisect() {
    while (!stop_) {
      const int64_t step = lo_ >= options_.granularity ? std::max<int64_t>(1, options_.granularity) : 1;
      const auto close_enough =
          static_cast<int64_t>(static_cast<double>(lo_) * options_.resolution_pct / 100.0);
      if (hi_ - lo_ <= 1 || (lo_ > 0 && hi_ - lo_ <= std::max(step, close_enough))) break;
      int64_t mid = lo_ + (hi_ - lo_) / 2;
      if (mid >= step && mid / step * step > lo_) mid = mid / step * step;
      if (mid <= lo_ || mid >= hi_) break;
      if (try_batch(mid))
        lo_ = mid;
      else if (!stop_)
        hi_ = mid;
    }
  }

  /// Measures batch `b`; false when it does not fit or the search must stop (`stop_` set).
  bool try_batch(int64_t b) {
    if (!res_.tries.empty()) {
      stop_ = stop_before_next(hooks_.clock, t0_, options_.budget_s, options_.interrupted);
      if (stop_) return false;
    }
    BatchTry t;
    t.batch_size = b;
    config::ExperimentConfig c = cfg_;
    c.loader.batch_size = b;
    c = measured(c, options_.min_repeats);
    try {
      t.m = hooks_.measure(c);
      if (res_.memory_limit_bytes > 0 && t.m->peak_mem_bytes &&
          *t.m->peak_mem_bytes > res_.memory_limit_bytes) {
        t.state = TryState::kOverMargin;
        t.why = "peak " + gib(*t.m->peak_mem_bytes) + " > " + gib(res_.memory_limit_bytes) + " (" +
                fmt("%g", 100.0 - options_.margin_pct) + "% of " + gib(total_) + ")";
      } else {
        t.fits = true;
      }
    } catch (const Interrupted&) {
      stop_ = StopReason{StopReason::Kind::kInterrupted};
      return false;
    } catch (const std::exception& e) {
      const bool oom = is_out_of_memory(e);
      // A failure of the starting batch that is not about memory is the config's, not the size's.
      if (!oom && res_.tries.empty()) throw;
      t.state = oom                                    ? TryState::kOutOfMemory
                : dynamic_cast<const ConfigError*>(&e) ? TryState::kSkipped
                                                       : TryState::kFailed;
      if (!oom) t.why = message_of(e);
      if (oom) hooks_.on_oom();
    }
    add_row(t, c);
    res_.tries.push_back(std::move(t));
    if (options_.on_try) options_.on_try(res_.table);
    return res_.tries.back().fits;
  }

  /// The try's row in the table: its figures, and its peak memory (CUDA) or diagnosis.
  void add_row(const BatchTry& t, const config::ExperimentConfig& c) {
    report::Row row;
    row.name = "batch " + std::to_string(t.batch_size);
    row.changes = Json{{"loader.batch_size", t.batch_size}};
    row.num_workers = c.loader.num_workers;
    row.mode = c.measure.mode;
    row.arch = c.model.arch;
    row.m = t.m;
    row.status = t.row_status();
    if (t.m)
      row.diagnosis = t.m->peak_mem_bytes && total_ > 0
                          ? "peak memory " + gib(*t.m->peak_mem_bytes) + " (" +
                                fmt("%.0f", 100.0 * static_cast<double>(*t.m->peak_mem_bytes) /
                                                static_cast<double>(total_)) +
                                "% of the device)"
                          : side_kind(c).diagnose(*t.m, c, {}, runtime::cpu_info());
    res_.table.rows.push_back(std::move(row));
    report::compute_speedups(res_.table.rows);
    if (report::Row& last = res_.table.rows.back(); last.m)
      last.diagnosis = measure::with_peak(last.diagnosis, report::pct_of_peak(last), last.m->peak_precision);
  }

  /// The winner, the fastest of the batches that fit; its notes; the winning config.
  void pick_winner() {
    const BatchTry* fastest = nullptr;
    for (const auto& t : res_.tries) {
      if (!t.fits) continue;
      res_.largest_fitting = std::max(res_.largest_fitting, t.batch_size);
      if (!fastest || t.m->samples_per_s > fastest->m->samples_per_s) fastest = &t;
    }
    if (!fastest) {
      if (res_.stop.is(StopReason::Kind::kInterrupted)) throw Interrupted();
      std::string why = res_.tries.empty() ? "nothing was tried"
                                           : "batch " + std::to_string(res_.tries.front().batch_size) + ": " +
                                                 res_.tries.front().status_text();
      throw std::runtime_error("no batch size fits: " + why +
                               "; lower loader.batch_size or raise --margin/--max-batch");
    }
    res_.fastest = fastest->batch_size;
    for (size_t i = 0; i < res_.tries.size(); ++i) {
      if (res_.tries[i].batch_size == res_.fastest && res_.tries[i].fits)
        res_.table.rows[i].notes.push_back(fmt("fastest: %.1f samples/s", fastest->m->samples_per_s));
      if (res_.tries[i].batch_size == res_.largest_fitting && res_.tries[i].fits)
        res_.table.rows[i].notes.push_back(
            res_.memory_limit_bytes > 0
                ? "largest batch that fits under the memory margin"
                : "largest batch that fits (no memory limit on this device: bounded by the search range)");
    }
    res_.best = cfg_;
    res_.best.loader.batch_size = res_.fastest;
    res_.best.sweep.clear();
    if (res_.fastest != cfg_.loader.batch_size) {
      res_.best.sweep.push_back({"batch " + std::to_string(cfg_.loader.batch_size) + " (before tuning)",
                                 Json{{"loader.batch_size", cfg_.loader.batch_size}}});
      res_.best.sweep.push_back({"batch " + std::to_string(res_.fastest) + " (fastest)",
                                 Json{{"loader.batch_size", res_.fastest}}});
    }
    res_.table.config = config::to_json(res_.best);
  }

  const config::ExperimentConfig& cfg_;
  const BatchSearchOptions& options_;
  const Hooks hooks_;
  BatchSearchResult res_;
  int64_t total_ = 0;  // the device's memory; 0: none known (the CPU)
  double t0_ = 0;
  int64_t lo_ = 0;  // largest batch known to fit (0: none yet)
  int64_t hi_ = 0;  // smallest batch known not to fit (set by double_up)
  std::optional<StopReason> stop_;
};

}  // namespace

BatchSearchResult find_batch_size(const config::ExperimentConfig& cfg, const BatchSearchOptions& options) {
  return BatchSearch(cfg, options).run();
}

}  // namespace ptune::tune
