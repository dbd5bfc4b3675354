#include "dist/grad_sync.hpp"

#include <stdexcept>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

namespace ptune::dist {

/// The hook AccumulateGrad calls after adding a backward's gradient into a parameter's .grad.
struct GradReadyHook : torch::autograd::PostAccumulateGradHook {
  GradReadyHook(GradSync* sync, size_t index) : sync_(sync), index_(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { sync_->on_grad_ready(index_); }

 private:
  GradSync* sync_;
  size_t index_;
};

GradSync::GradSync(const std::vector<at::Tensor>& params, std::shared_ptr<Group> group, double bucket_mb,
                   double first_bucket_mb)
    : group_(std::move(group)) {
  if (!group_) throw std::invalid_argument("GradSync: no group");
  if (!(bucket_mb > 0)) throw std::invalid_argument("GradSync: bucket_mb must be > 0");
  for (const auto& p : params)
    if (p.requires_grad()) params_.push_back(p);
  const double mib = 1024.0 * 1024.0;
  const double cap = bucket_mb * mib;
  const double first_cap = std::min(first_bucket_mb > 0 ? first_bucket_mb : bucket_mb, bucket_mb) * mib;

  // Reverse parameter order: backward produces the last layer's gradients first.
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  ready_.assign(params_.size(), false);
  double bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const at::Tensor& p = params_[k];
    const double size = static_cast<double>(p.numel()) * static_cast<double>(p.element_size());
    bool fresh = buckets_.empty();
    if (!fresh) {
      const at::Tensor& head = params_[buckets_.back().params.front()];
      const double limit = buckets_.size() == 1 ? first_cap : cap;
      fresh = head.scalar_type() != p.scalar_type() || head.device() != p.device() || bytes + size > limit;
    }
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[k] = buckets_.size() - 1;
    slot_of_[k] = b.params.size();
    b.params.push_back(k);
    bytes += size;
  }
  for (auto& b : buckets_) {
    int64_t total = 0;
    for (size_t k : b.params) total += params_[k].numel();
    const at::Tensor& head = params_[b.params.front()];
    b.flat = at::zeros({total}, head.options().requires_grad(false));
    // Each parameter's place in the bucket, shaped as the parameter: made once, used every step.
    int64_t offset = 0;
    for (size_t k : b.params) {
      b.views.push_back(b.flat.narrow(0, offset, params_[k].numel()).view(params_[k].sizes()));
      offset += params_[k].numel();
    }
  }

  if (!group_->distributed()) return;  // nothing to average: no hooks
  for (size_t k = 0; k < params_.size(); ++k) {
    if (torch::autograd::impl::post_acc_grad_hooks(params_[k]))
      throw std::invalid_argument("GradSync: a parameter already has a post-accumulate-grad hook");
  }
  for (size_t k = 0; k < params_.size(); ++k)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[k], std::make_unique<GradReadyHook>(this, k));
}

GradSync::~GradSync() {
  if (group_->distributed()) {
    for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  }
  for (auto& b : buckets_) {
    try {
      b.work.wait();
    } catch (const std::exception&) {
      // Already reported by finish() or by the step that threw.
    }
  }
}

void GradSync::prepare(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = sync && group_->distributed();
  if (!armed_) return;
  ready_.assign(params_.size(), false);
  for (auto& b : buckets_) {
    b.pending = b.params.size();
  }
  next_launch_ = 0;
}

void GradSync::copy_in(Bucket& bucket, size_t slot, const at::Tensor& grad) {
  at::Tensor& view = bucket.views[slot];
  // Average = sum of (grad / world): dividing on the way in keeps fp16-scaled sums in range,
  // as DDP does, without another pass over the bucket.
  if (grad.defined())
    at::div_out(view, grad, static_cast<double>(group_->size()));
  else
    view.zero_();
}

void GradSync::on_grad_ready(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_ || ready_[k]) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  torch::NoGradGuard no_grad;
  copy_in(b, slot_of_[k], params_[k].grad());
  if (--b.pending == 0) launch_ready_locked();
}

void GradSync::launch_locked(Bucket& b) { b.work = group_->all_reduce_sum_async(b.flat); }

void GradSync::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch_locked(buckets_[next_launch_]);
    ++stats_.buckets_in_backward;
    ++next_launch_;
  }
}

void GradSync::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;
  armed_ = false;
  torch::NoGradGuard no_grad;
  // Buckets with a parameter that got no gradient this backward: ship what .grad holds (or
  // zeros), so that every rank still issues every collective, in the same order.
  for (; next_launch_ < buckets_.size(); ++next_launch_) {
    Bucket& b = buckets_[next_launch_];
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      const size_t k = b.params[slot];
      if (!ready_[k]) copy_in(b, slot, params_[k].grad());
    }
    b.pending = 0;
    launch_locked(b);
    ++stats_.buckets_in_finish;
  }
  for (auto& b : buckets_) b.work.wait();
  for (auto& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      at::Tensor& p = params_[b.params[slot]];
      if (p.grad().defined())
        p.mutable_grad().copy_(b.views[slot]);
      else
        p.mutable_grad() = b.views[slot].clone();
    }
    b.work = Pending();
  }
  ++stats_.syncs;
}

std::vector<std::vector<size_t>> GradSync::buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

GradSyncStats GradSync::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace ptune::dist
