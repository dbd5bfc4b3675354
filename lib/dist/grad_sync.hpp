#pragma once
/// Gradient averaging as PyTorch's DistributedDataParallel does it: parameters in buckets of
/// about dist.bucket_mb, laid out in reverse parameter order (the order backward produces
/// gradients); a post-accumulate-grad hook on every parameter copies its gradient into its
/// bucket, and a bucket whose gradients are all in starts its all-reduce at once, while
/// backward goes on computing earlier layers (overlap). Buckets start strictly in order, so
/// every rank issues the same collectives in the same order. finish() waits for them and
/// writes the average back into each .grad.
///
/// Per step:
///   sync.prepare(/*sync=*/last_micro_step);  // false: no_sync, gradients accumulate locally
///   loss.backward();
///   if (last_micro_step) sync.finish();      // then unscale (fp16) / clip / optimizer.step()

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/Tensor.h>

#include "dist/group.hpp"

namespace ptune::dist {

/// What a GradSync did, for tests and for judging overlap.
struct GradSyncStats {
  int64_t syncs = 0;                // finish() calls that all-reduced
  int64_t buckets_in_backward = 0;  // buckets whose all-reduce started during backward
  int64_t buckets_in_finish = 0;    // buckets started by finish() (a parameter got no gradient)
};

class GradSync {
 public:
  /// Lays out buckets over the parameters that require grad (reverse order; a new bucket when
  /// adding one would pass the cap, or the dtype or device changes; the first bucket is capped
  /// at min(first_bucket_mb, bucket_mb) so communication starts early, as DDP's 1 MiB first
  /// bucket) and installs a post-accumulate-grad hook on each. Throws std::invalid_argument for
  /// a bucket_mb <= 0, or a parameter that already has such a hook.
  GradSync(const std::vector<at::Tensor>& params, std::shared_ptr<Group> group, double bucket_mb,
           double first_bucket_mb = 1.0);
  /// Removes the hooks; waits for collectives still in flight.
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  /// Arms the next backward: `sync` true all-reduces buckets as they fill; false is DDP's
  /// no_sync (gradients stay local and accumulate into .grad until a synced backward, whose
  /// buckets then carry the accumulated sums).
  void prepare(bool sync);

  /// After a synced backward: starts any bucket not yet started (filling gradients that never
  /// arrived with the parameter's .grad, or zeros), waits for every bucket and copies the
  /// average over ranks into each parameter's .grad. No-op after prepare(false), or in a
  /// single process. Throws std::runtime_error when a collective fails (Pending::wait).
  void finish();

  /// The buckets as lists of parameter indices (into the constructor's list), in launch order.
  std::vector<std::vector<size_t>> buckets() const;
  /// Counters since construction.
  GradSyncStats stats() const;

 private:
  struct Bucket {
    std::vector<size_t> params;     // indices into params_
    at::Tensor flat;                // all the bucket's gradients, contiguous
    std::vector<at::Tensor> views;  // each parameter's slice of `flat`, shaped as the parameter
    size_t pending = 0;             // gradients not yet copied in this backward
    Pending work;
  };

  friend struct GradReadyHook;
  void on_grad_ready(size_t param);  // called by the hooks
  void copy_in(Bucket& bucket, size_t slot, const at::Tensor& grad);
  void launch_ready_locked();  // starts ready buckets, in order
  void launch_locked(Bucket& bucket);

  std::shared_ptr<Group> group_;
  std::vector<at::Tensor> params_;
  std::vector<size_t> bucket_of_, slot_of_;
  std::vector<bool> ready_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  mutable std::mutex mu_;
  GradSyncStats stats_;
};

}  // namespace ptune::dist
