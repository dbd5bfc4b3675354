#pragma once
/// Values by correlation id, the number that links a CUDA runtime call to the device work it
/// launched: in one flat table built once per trace, looked up per event (a hash map's node per
/// id costs an allocation and a cache miss each).

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ptune::analyze {

template <typename V>
class ByCorrelation {
 public:
  ByCorrelation() = default;
  /// The (id, value) pairs in file order; an id given more than once has them folded in that
  /// order by `fold(V& kept, const V& next)`.
  template <typename Fold>
  ByCorrelation(std::vector<std::pair<int64_t, V>> pairs, Fold fold) {
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [id, v] : pairs) {
      if (!ids_.empty() && ids_.back() == id)
        fold(values_.back(), v);
      else
        ids_.push_back(id), values_.push_back(std::move(v));
    }
    // CUPTI numbers its launches one after another: ids in a range not much wider than their
    // count are looked up by position.
    if (!ids_.empty() && ids_.size() < INT32_MAX &&
        static_cast<uint64_t>(ids_.back() - ids_.front()) < 4 * ids_.size() + 1024) {
      first_ = ids_.front();
      slot_.assign(static_cast<size_t>(ids_.back() - first_) + 1, -1);
      for (size_t i = 0; i < ids_.size(); ++i)
        slot_[static_cast<size_t>(ids_[i] - first_)] = static_cast<int32_t>(i);
    }
  }
  /// The value of `id`; nullptr: none.
  const V* find(int64_t id) const {
    if (!slot_.empty()) {
      if (id < first_ || static_cast<uint64_t>(id - first_) >= slot_.size()) return nullptr;
      const int32_t i = slot_[static_cast<size_t>(id - first_)];
      return i < 0 ? nullptr : &values_[static_cast<size_t>(i)];
    }
    auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    return it != ids_.end() && *it == id ? &values_[static_cast<size_t>(it - ids_.begin())] : nullptr;
  }

 private:
  std::vector<int64_t> ids_;  // sorted, distinct
  std::vector<V> values_;
  int64_t first_ = 0;
  std::vector<int32_t> slot_;  // id - first_ -> index in values_ (-1: none); empty: search ids_
};

}  // namespace ptune::analyze
