// DistributedSampler and torch_randperm (see sampler.h for the algorithm and its source).
#include "data/sampler.h"

#include <limits>
#include <numeric>

#include "core/error.h"

namespace anvil {

std::vector<int64_t> torch_randperm(int64_t n, TorchGenerator& g) {
  ANVIL_ENSURE(n >= 0, kInvalidInput, "randperm: n must be >= 0, got ", n);
  std::vector<int64_t> r(static_cast<size_t>(n));
  if (n < static_cast<int64_t>(std::numeric_limits<uint32_t>::max() / 20)) {
    std::iota(r.begin(), r.end(), int64_t{0});
    for (int64_t i = 0; i + 1 < n; ++i) {
      const auto z = static_cast<int64_t>(g.random() % static_cast<uint64_t>(n - i));
      std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
    }
    return r;
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto z = static_cast<int64_t>(g.random64() % static_cast<uint64_t>(i + 1));
    r[static_cast<size_t>(i)] = r[static_cast<size_t>(z)];
    r[static_cast<size_t>(z)] = i;
  }
  return r;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank, uint64_t seed, bool shuffle,
                                       bool drop_last)
    : size_(dataset_size), world_size_(world_size), rank_(rank), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  ANVIL_ENSURE(world_size >= 1 && rank >= 0 && rank < world_size, kInvalidInput, "sampler: rank ", rank,
               " outside world size ", world_size);
  ANVIL_ENSURE(dataset_size >= 0, kInvalidInput, "sampler: negative dataset size");
  if (drop_last_ && size_ % world_size_ != 0) num_samples_ = (size_ - world_size_ + world_size_ - 1) / world_size_;
  else num_samples_ = (size_ + world_size_ - 1) / world_size_;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    all = torch_randperm(size_, seed_ + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(size_));
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const auto total = static_cast<size_t>(total_size());
  if (all.size() > total) {
    all.resize(total);
  } else if (!all.empty()) {
    for (size_t k = 0; all.size() < total; ++k) all.push_back(all[k]);  // wrap around, as torch pads
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t k = static_cast<size_t>(rank_); k < all.size(); k += static_cast<size_t>(world_size_)) mine.push_back(all[k]);
  return mine;
}

}  // namespace anvil
