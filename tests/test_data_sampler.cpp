// data/sampler: PyTorch's CPU generator and DistributedSampler.
//
// Oracle for the generator: the tiny-qwen3 golden_adamw.safetensors batches were drawn by
// torch.randint(0, 1000, (2, 37), generator=torch.Generator().manual_seed(99)), which takes
// one random() per value, modulo 1000; reproducing all 8 batches pins down seeding and draw
// order. randperm's shuffle is transcribed from ATen's randperm_cpu; the sampler tests check
// its structure (disjoint ranks, drop_last and padding sizes, per-epoch reshuffle) and values
// worked out by hand from the generator's first draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/fs.h"
#include "core/json.h"
#include "data/sampler.h"
#include "testing.h"

namespace anvil {
namespace {

TEST(TorchGenerator, ReproducesTorchRandintGoldenBatches) {
  const std::string bytes = read_file(testing::shared_dir() + "/fixtures/tiny-qwen3/golden_adamw.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const Json header = json_parse(bytes.substr(8, n), "golden_adamw.safetensors");
  TorchGenerator g(99);
  for (int b = 0; b < 8; ++b) {
    const Json& e = header.at("batch" + std::to_string(b));
    ASSERT_EQ(e.at("dtype"), "I64");
    const auto off = e.at("data_offsets").get<std::vector<size_t>>();
    const size_t count = (off[1] - off[0]) / 8;
    ASSERT_EQ(count, 74u);
    for (size_t k = 0; k < count; ++k) {
      int64_t v = 0;
      std::memcpy(&v, bytes.data() + 8 + n + off[0] + 8 * k, 8);
      ASSERT_EQ(static_cast<int64_t>(g.random() % 1000), v) << "batch " << b << " index " << k;
    }
  }
}

TEST(TorchRandperm, IsTheForwardSwapShuffleOfTheGeneratorDraws) {
  // randperm_cpu for small n: for i in [0, n-1): swap(r[i], r[i + random() % (n - i)]).
  for (const uint64_t seed : {0ull, 1ull, 42ull, 12345ull}) {
    TorchGenerator g(seed);
    std::vector<int64_t> want = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int64_t i = 0; i < 9; ++i) std::swap(want[static_cast<size_t>(i)], want[static_cast<size_t>(i + g.random() % (10 - i))]);
    EXPECT_EQ(torch_randperm(10, seed), want) << "seed " << seed;
  }
  const auto p = torch_randperm(1000, 7);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < 1000; ++k) ASSERT_EQ(sorted[static_cast<size_t>(k)], k);
  EXPECT_TRUE(torch_randperm(0, 1).empty());
  EXPECT_EQ(torch_randperm(1, 1), std::vector<int64_t>{0});
}

TEST(DistributedSampler, RanksTakeDisjointStridedSlicesOfTheEpochPermutation) {
  const int64_t n = 103;
  const int world = 4;
  for (int64_t epoch : {0, 1, 5}) {
    const auto perm = torch_randperm(n, 3 + static_cast<uint64_t>(epoch));
    std::set<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(n, world, r, /*seed=*/3);
      s.set_epoch(epoch);
      const auto idx = s.indices();
      ASSERT_EQ(static_cast<int64_t>(idx.size()), 25);  // drop_last: floor(103 / 4)
      for (size_t k = 0; k < idx.size(); ++k) {
        EXPECT_EQ(idx[k], perm[static_cast<size_t>(r) + k * world]);
        seen.insert(idx[k]);
      }
    }
    EXPECT_EQ(seen.size(), 100u);
  }
  DistributedSampler a(n, world, 0, 3), b(n, world, 0, 3);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices());
  EXPECT_EQ(a.indices(), DistributedSampler(n, world, 0, 3).indices());
}

TEST(DistributedSampler, WithoutDropLastPadsByWrapping) {
  DistributedSampler s(5, 3, 2, /*seed=*/0, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(s.num_samples(), 2);
  EXPECT_EQ(s.indices(), (std::vector<int64_t>{2, 0}));  // [0..4] + [0] -> rank 2 takes 2, 0
  DistributedSampler t(2, 8, 7, 0, false, false);       // padding longer than the data
  EXPECT_EQ(t.indices(), (std::vector<int64_t>{1}));     // [0,1,0,1,0,1,0,1][7]
  DistributedSampler u(3, 8, 0, 0, true, true);          // fewer items than ranks
  EXPECT_EQ(u.num_samples(), 0);
  EXPECT_TRUE(u.indices().empty());
}

}  // namespace
}  // namespace anvil
