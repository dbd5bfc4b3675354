#pragma once
/// The batch loader: worker threads that each build whole batches (read, transform, collate
/// into one buffer), a bounded prefetch queue per worker, batches delivered in a fixed order.
/// For a given seed the batches and their order are identical for any number of workers.
/// Workers are persistent: at the end of an epoch they go on building the next epoch's first
/// batches, so starting that epoch (start_epoch(e + 1) after epoch e was read to its end)
/// neither joins nor starts threads and finds batches ready.

#include <array>
#include <condition_variable>
#include <deque>
#include <map>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "data/dataset.hpp"
#include "data/normalize.hpp"

namespace ptune::data {

struct LoaderOptions {
  int64_t batch_size = 32;   // samples per batch
  int64_t num_workers = 0;   // 0 = build batches in the calling thread
  int64_t prefetch = 2;      // ready batches each worker may hold
  bool shuffle = true;       // reshuffle every epoch from (seed, epoch)
  bool drop_last = true;     // drop the last partial batch
  bool pin_memory = false;   // allocate batches in page-locked memory (CUDA builds only)
  bool float_output = true;  // true: float32 normalized; false: uint8 as the dataset wrote it
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};  // used when float_output
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};   // used when float_output
  uint64_t seed = 0;                               // shuffling and augmentation seed
  int64_t rank = 0;                                // this process's shard ...
  int64_t world_size = 1;                          // ... of this many
  bool even_shards = true;  // true: every rank gets size / world_size samples, the tail is
                            // dropped (ranks step together); false: rank r gets r, r + W, ...
                            // to the end, so the shards cover every sample (evaluation)
};

/// One batch: images [n, C, H, W] (float32 or uint8) and labels [n] (int64), on the host.
struct Batch {
  at::Tensor images;
  at::Tensor labels;
  int64_t index = 0;  // position in the epoch
};

/// The sample indices of one rank's shard for an epoch, in order (shuffled from the seed and
/// epoch if asked). Every rank computes the same permutation and takes every world_size-th
/// sample from position `rank`; with `even` the tail that does not divide evenly is dropped
/// (all shards the same size), without it the first ranks get one sample more.
std::vector<int64_t> epoch_order(int64_t dataset_size, bool shuffle, uint64_t seed, int64_t epoch,
                                 int64_t rank, int64_t world_size, bool even = true);

class Loader {
 public:
  /// Throws std::invalid_argument for options out of range.
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  /// Stops the workers (mid-epoch too) and joins them.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Batches this rank gets per epoch.
  int64_t batches_per_epoch() const;
  /// Samples this rank gets per epoch (after drop_last).
  int64_t samples_per_epoch() const;
  /// Samples of this rank's shard of an epoch, before drop_last.
  int64_t shard_samples() const;
  /// Starts epoch `epoch`. After the previous epoch was read to its end, the running workers
  /// are already on it; otherwise (the first epoch, a jump, an epoch left part way) the workers
  /// are restarted at its first batch.
  void start_epoch(int64_t epoch);
  /// The next batch of the current epoch, or nullopt at its end. Rethrows a worker's error.
  std::optional<Batch> next();
  /// Stops and joins the workers; next() then returns nullopt until start_epoch().
  void stop();
  /// Holds the workers between two samples until resume(): a paused loader uses no CPU and
  /// builds no batches ahead, so a pipeline left idle while another is timed (interleaved
  /// measurement) neither competes with it nor stockpiles batches it would later get for free.
  /// next() still works while paused (it waits for a worker that is held: resume first).
  void pause();
  /// Lets paused workers go on. Throws nothing.
  void resume();

  const LoaderOptions& options() const { return opt_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  struct Slot {  // one worker's output queue
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Batch> ready;
    std::exception_ptr error;
  };

  /// Builds batch `b` of epoch `epoch`; a worker (`in_worker`) waits while paused before
  /// each sample.
  Batch build(int64_t epoch, int64_t b, bool in_worker = false);
  /// Blocks while paused (and not stopping).
  void wait_while_paused();
  /// The shard's sample order of `epoch`, computed once and shared by the workers.
  std::shared_ptr<const std::vector<int64_t>> order_of(int64_t epoch);
  at::Tensor take_buffer(at::IntArrayRef sizes, at::ScalarType dtype);
  void worker_loop(int64_t worker);
  /// Starts the workers on the batches from `epoch`'s first on.
  void start_workers(int64_t epoch);

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions opt_;
  Normalization norm_;         // float output: x * scale + shift == (x / 255 - mean) / std
  const int64_t num_batches_;  // per epoch
  // Batches are numbered across epochs: g = epoch * num_batches_ + b. Worker w builds
  // g = first_ + w, first_ + w + num_workers, ...; slot (g - first_) % num_workers holds them.
  int64_t first_ = 0;
  int64_t epoch_ = 0;       // the epoch next() reads
  int64_t next_batch_ = 0;  // next() returns batch next_batch_ of epoch_
  bool running_ = false;
  std::mutex orders_mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;  // epoch -> order
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::mutex pause_mu_;
  std::condition_variable pause_cv_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> threads_;
  std::mutex pool_mu_;
  std::vector<at::Tensor> pool_;  // reusable pageable buffers (free when only the pool holds one)
};

}  // namespace ptune::data
