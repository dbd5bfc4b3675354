#include "data/loader.hpp"

#include <stdexcept>

#include "runtime/compat.hpp"
#include "core/ranges.hpp"

namespace ptune::data {

namespace {
/// Samples in `rank`'s shard of `size` among `world` ranks.
int64_t shard_size(int64_t size, int64_t rank, int64_t world, bool even) {
  return even ? size / world : size / world + (rank < size % world ? 1 : 0);
}
}  // namespace

std::vector<int64_t> epoch_order(int64_t dataset_size, bool shuffle, uint64_t seed, int64_t epoch,
                                 int64_t rank, int64_t world_size, bool even) {
  std::vector<int64_t> all(static_cast<size_t>(dataset_size));
  for (int64_t i = 0; i < dataset_size; ++i) all[i] = i;
  if (shuffle) {
    SplitMix64 rng(mix_seed(seed, static_cast<uint64_t>(epoch), 0x5EED));
    for (int64_t i = dataset_size - 1; i > 0; --i) {
      int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
      std::swap(all[i], all[j]);
    }
  }
  const int64_t per_rank = shard_size(dataset_size, rank, world_size, even);
  std::vector<int64_t> mine(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) mine[k] = all[rank + k * world_size];
  return mine;
}

namespace {
const Dataset& checked(const std::shared_ptr<const Dataset>& d) {
  if (!d) throw std::invalid_argument("loader: no dataset");
  return *d;
}
int64_t batches_of(const Dataset& d, const LoaderOptions& o) {
  if (o.batch_size < 1) throw std::invalid_argument("loader: batch_size must be >= 1");
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw std::invalid_argument("loader: rank must be in [0, world_size)");
  const int64_t shard = shard_size(d.size(), o.rank, o.world_size, o.even_shards);
  return o.drop_last ? shard / o.batch_size : (shard + o.batch_size - 1) / o.batch_size;
}
}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), opt_(options), num_batches_(batches_of(checked(dataset_), opt_)) {
  if (opt_.num_workers < 0) throw std::invalid_argument("loader: num_workers must be >= 0");
  if (opt_.prefetch < 1) throw std::invalid_argument("loader: prefetch must be >= 1");
  if (dataset_->shape().channels != 3 && opt_.float_output)
    throw std::invalid_argument("loader: normalization needs 3-channel images");
  norm_ = normalization(opt_.mean, opt_.std);
}

Loader::~Loader() { stop(); }

int64_t Loader::shard_samples() const {
  return shard_size(dataset_->size(), opt_.rank, opt_.world_size, opt_.even_shards);
}

int64_t Loader::samples_per_epoch() const {
  const int64_t shard = shard_samples();
  return opt_.drop_last ? shard / opt_.batch_size * opt_.batch_size : shard;
}

int64_t Loader::batches_per_epoch() const { return num_batches_; }

void Loader::pause() { paused_ = true; }

void Loader::resume() {
  std::lock_guard<std::mutex> lock(pause_mu_);
  paused_ = false;
  pause_cv_.notify_all();
}

void Loader::wait_while_paused() {
  if (!paused_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(pause_mu_);
  pause_cv_.wait(lock, [&] { return !paused_ || stop_; });
}

void Loader::stop() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(pause_mu_);
    pause_cv_.notify_all();
  }
  for (auto& s : slots_) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->cv.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  slots_.clear();
  running_ = false;
  stop_ = false;
}

void Loader::start_epoch(int64_t epoch) {
  const bool continues =
      running_ && opt_.num_workers > 0 && epoch == epoch_ + 1 && next_batch_ >= num_batches_;
  epoch_ = epoch;
  next_batch_ = 0;
  {
    // Orders of epochs already read are not needed any more.
    std::lock_guard<std::mutex> lock(orders_mu_);
    orders_.erase(orders_.begin(), orders_.lower_bound(epoch));
  }
  if (continues) return;  // the workers are already building this epoch
  stop();
  running_ = true;
  start_workers(epoch);
}

void Loader::start_workers(int64_t epoch) {
  first_ = epoch * num_batches_;
  if (num_batches_ == 0) return;
  for (int64_t w = 0; w < opt_.num_workers; ++w) slots_.push_back(std::make_unique<Slot>());
  for (int64_t w = 0; w < opt_.num_workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

std::shared_ptr<const std::vector<int64_t>> Loader::order_of(int64_t epoch) {
  std::lock_guard<std::mutex> lock(orders_mu_);
  auto& order = orders_[epoch];
  if (!order)
    order = std::make_shared<const std::vector<int64_t>>(epoch_order(
        dataset_->size(), opt_.shuffle, opt_.seed, epoch, opt_.rank, opt_.world_size, opt_.even_shards));
  return order;
}

at::Tensor Loader::take_buffer(at::IntArrayRef sizes, at::ScalarType dtype) {
  if (opt_.pin_memory) {
    // The CUDA caching host allocator recycles page-locked blocks once the copies that read
    // them have finished, so a fresh tensor here does not mean a fresh cudaHostAlloc.
    return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(true));
  }
  std::lock_guard<std::mutex> lock(pool_mu_);
  for (auto& t : pool_) {
    // A buffer is free when no batch, view or autograd graph refers to its memory any more.
    if (t.use_count() == 1 && t.storage().use_count() == 1 && t.sizes() == sizes && t.scalar_type() == dtype)
      return t;
  }
  pool_.push_back(at::empty(sizes, at::TensorOptions().dtype(dtype)));
  return pool_.back();
}

Batch Loader::build(int64_t epoch, int64_t b, bool in_worker) {
  const std::shared_ptr<const std::vector<int64_t>> order_ptr = order_of(epoch);
  const std::vector<int64_t>& order = *order_ptr;
  const int64_t begin = b * opt_.batch_size;
  const int64_t n = std::min<int64_t>(opt_.batch_size, static_cast<int64_t>(order.size()) - begin);
  const ImageShape shape = dataset_->shape();
  const int64_t per = shape.numel();
  const int64_t plane = shape.height * shape.width;
  Batch batch;
  batch.index = b;
  batch.labels = take_buffer({n}, at::kLong);
  batch.images =
      take_buffer({n, shape.channels, shape.height, shape.width}, opt_.float_output ? at::kFloat : at::kByte);
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  thread_local std::vector<uint8_t> tmp;
  for (int64_t i = 0; i < n; ++i) {
    if (in_worker) wait_while_paused();
    const int64_t idx = order[begin + i];
    const uint64_t aug = mix_seed(opt_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(idx));
    if (!opt_.float_output) {
      labels[i] = dataset_->get(idx, aug, batch.images.data_ptr<uint8_t>() + i * per);
      continue;
    }
    tmp.resize(static_cast<size_t>(per));
    labels[i] = dataset_->get(idx, aug, tmp.data());
    normalize(tmp.data(), batch.images.data_ptr<float>() + i * per, 1, plane, norm_);
  }
  return batch;
}

void Loader::worker_loop(int64_t w) {
  Slot& slot = *slots_[w];
  try {
    // Across epochs, until stopped: the next epoch's batches are ready when it starts.
    for (int64_t g = first_ + w;; g += opt_.num_workers) {
      {
        std::unique_lock<std::mutex> lock(slot.mu);
        slot.cv.wait(lock, [&] { return stop_ || static_cast<int64_t>(slot.ready.size()) < opt_.prefetch; });
        if (stop_) return;
      }
      wait_while_paused();
      if (stop_) return;
      Batch batch = build(g / num_batches_, g % num_batches_, /*in_worker=*/true);
      std::lock_guard<std::mutex> lock(slot.mu);
      slot.ready.push_back(std::move(batch));
      slot.cv.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(slot.mu);
    slot.error = std::current_exception();
    slot.cv.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  runtime::compat::UserScope range(opt_.num_workers == 0 ? ranges::kLoaderNext : ranges::kLoaderNextWorkers);
  if (!running_ || next_batch_ >= num_batches_) return std::nullopt;
  const int64_t b = next_batch_++;
  if (opt_.num_workers == 0) return build(epoch_, b);
  const int64_t g = epoch_ * num_batches_ + b;
  Slot& slot = *slots_[(g - first_) % opt_.num_workers];
  std::unique_lock<std::mutex> lock(slot.mu);
  slot.cv.wait(lock, [&] { return !slot.ready.empty() || slot.error; });
  if (slot.ready.empty()) {
    auto err = slot.error;
    lock.unlock();
    stop();
    std::rethrow_exception(err);
  }
  Batch batch = std::move(slot.ready.front());
  slot.ready.pop_front();
  slot.cv.notify_all();
  return batch;
}

}  // namespace ptune::data
