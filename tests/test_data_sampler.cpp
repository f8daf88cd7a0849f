// data/sampler: PyTorch's CPU generator and DistributedSampler.
//
// Oracle for the generator: the tiny-qwen3 golden_adamw.safetensors batches were drawn by
// torch.randint(0, 1000, (2, 37), generator=torch.Generator().manual_seed(99)), which takes
// one random() per value, modulo 1000; reproducing all 8 batches pins down seeding and draw
// order. randperm and DistributedSampler against PyTorch's values in the shared fixtures;
// padding edge cases worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

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

// PyTorch's own values (../shared/fixtures/sampler/sampler_golden.json): torch.randperm(n,
// generator=torch.Generator().manual_seed(seed)) for n from 1 to 100003 and several seeds,
// and torch.utils.data.DistributedSampler's indices for every case, epoch and rank there.
Json sampler_golden() { return json_read_file(testing::shared_dir() + "/fixtures/sampler/sampler_golden.json"); }

TEST(TorchRandperm, EqualsTorchRandpermForEveryGoldenCase) {
  const Json golden = sampler_golden();
  int cases = 0;
  for (const Json& c : golden.at("randperm")) {
    const auto n = c.at("n").get<int64_t>();
    const auto seed = c.at("seed").get<uint64_t>();
    EXPECT_EQ(torch_randperm(n, seed), c.at("perm").get<std::vector<int64_t>>()) << "n " << n << " seed " << seed;
    ++cases;
  }
  EXPECT_GE(cases, 20);
  std::printf("%d randperm cases equal to torch.randperm\n", cases);
}

TEST(DistributedSampler, EqualsTorchDistributedSamplerForEveryGoldenCase) {
  const Json golden = sampler_golden();
  int cases = 0;
  for (const Json& c : golden.at("distributed_sampler")) {
    DistributedSampler s(c.at("n").get<int64_t>(), c.at("num_replicas").get<int>(), c.at("rank").get<int>(),
                         c.at("seed").get<uint64_t>(), c.at("shuffle").get<bool>(), c.at("drop_last").get<bool>());
    s.set_epoch(c.at("epoch").get<int64_t>());
    const auto want = c.at("indices").get<std::vector<int64_t>>();
    EXPECT_EQ(s.indices(), want) << c.dump();
    EXPECT_EQ(s.num_samples(), static_cast<int64_t>(want.size())) << c.dump();
    ++cases;
  }
  EXPECT_GE(cases, 60);
  std::printf("%d DistributedSampler cases equal to PyTorch's\n", cases);
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
