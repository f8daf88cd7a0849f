// PyTorch's DistributedSampler(shuffle=True, seed, drop_last) with set_epoch, bit for bit.
//
// Each epoch's order is torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
// on the CPU: a Mersenne Twister (mt19937, seeded with the low 32 bits of the seed, as
// at::mt19937 is) driving randperm_cpu's shuffle: for n < 2^32/20, a forward swap with
// z = random() % (n - i); beyond, the inside-out Fisher-Yates with random64() (two draws, the
// first in the high half). The permutation is then cut to total_size (drop_last) or padded
// by wrapping (not drop_last), and rank r takes every world-th index starting at r.
// Same seed, epoch and world size: the same indices on every run and machine.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace anvil {

// torch.Generator() on the CPU after manual_seed(seed): random() is one mt19937 draw,
// random64() two (the first is the high half).
class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed) : engine_(static_cast<uint32_t>(seed & 0xFFFFFFFFu)) {}
  uint32_t random() { return static_cast<uint32_t>(engine_()); }
  uint64_t random64() {
    const uint64_t hi = random();
    return (hi << 32) | random();
  }

 private:
  std::mt19937 engine_;
};

// torch.randperm(n, generator=g).tolist()
std::vector<int64_t> torch_randperm(int64_t n, TorchGenerator& g);
inline std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  TorchGenerator g(seed);
  return torch_randperm(n, g);
}

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, uint64_t seed = 0, bool shuffle = true,
                     bool drop_last = true);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // This rank's indices for the current epoch, in order (num_samples() of them).
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * world_size_; }

 private:
  int64_t size_;
  int world_size_, rank_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace anvil
