// The NCCL comm on the GPUs of this machine: world size 1 always, and one rank per GPU
// (threads) where there are two or more; closed-form inputs compared exactly, as on the CPU
// (every collective, all_to_all included).
#include <functional>

#include "comm/comm.h"
#include "comm/device.h"
#include "../comm_ranks.h"
#include "../testing.h"

namespace anvil {
namespace {

std::vector<std::string> run_gpu_ranks(int n, const std::function<void(Comm&)>& fn) {
  return testing::run_comm_ranks(n, fn, 60, make_nccl_comm);
}

void collectives_match_closed_forms(Comm& c) {
  const int n = c.world(), me = c.rank();
  const int64_t m = 1000;
  std::vector<float> host(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m * n; ++i) host[static_cast<size_t>(i)] = static_cast<float>((me + 1) * (i % 13 + 1));
  DeviceBuffer in(c.gpu(), host.size() * 4), out(c.gpu(), host.size() * 4);
  in.upload(host.data(), host.size() * 4);
  const float tri = static_cast<float>(n * (n + 1) / 2);
  std::vector<float> got(host.size());

  c.wait(c.all_reduce(Tensor(out.data(), DType::kF32, {m * n}, Device::kCUDA),
                      Tensor(in.data(), DType::kF32, {m * n}, Device::kCUDA), ReduceOp::kAvg, "ar"));
  c.synchronize();
  out.download(got.data(), got.size() * 4);
  for (int64_t i = 0; i < m * n; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], tri * static_cast<float>(i % 13 + 1) / static_cast<float>(n)) << i;

  c.reduce_scatter(Tensor(out.data(), DType::kF32, {m}, Device::kCUDA),
                   Tensor(in.data(), DType::kF32, {m * n}, Device::kCUDA), ReduceOp::kSum, "rs");
  c.synchronize();
  out.download(got.data(), static_cast<size_t>(m) * 4);
  for (int64_t i = 0; i < m; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], tri * static_cast<float>((me * m + i) % 13 + 1)) << i;

  c.all_gather(Tensor(out.data(), DType::kF32, {m * n}, Device::kCUDA),
               Tensor(in.data(), DType::kF32, {m}, Device::kCUDA), "ag");
  c.synchronize();
  out.download(got.data(), got.size() * 4);
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < m; ++i)
      ASSERT_EQ(got[static_cast<size_t>(p * m + i)], static_cast<float>((p + 1) * (i % 13 + 1))) << p << "," << i;

  c.broadcast(Tensor(in.data(), DType::kF32, {m}, Device::kCUDA), n - 1, "bc");  // root's in: n * (i % 13 + 1)
  c.synchronize();
  in.download(got.data(), static_cast<size_t>(m) * 4);
  for (int64_t i = 0; i < m; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(n * (i % 13 + 1))) << i;
  // all_to_all, after the broadcast (it overwrites in, the broadcast's input): chunk p of rank
  // r's input is r * 1000 + p * 10 + i % 7.
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < m; ++i)
      host[static_cast<size_t>(p * m + i)] = static_cast<float>(me * 1000 + p * 10 + i % 7);
  in.upload(host.data(), host.size() * 4);
  c.all_to_all(Tensor(out.data(), DType::kF32, {m * n}, Device::kCUDA),
               Tensor(in.data(), DType::kF32, {m * n}, Device::kCUDA), "a2a");
  c.synchronize();
  out.download(got.data(), got.size() * 4);
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < m; ++i)
      ASSERT_EQ(got[static_cast<size_t>(p * m + i)], static_cast<float>(p * 1000 + me * 10 + i % 7)) << p << "," << i;

  c.barrier("end");
}

TEST(NcclComm, WorldOfOne) {
  ASSERT_GT(gpu_count(), 0);
  auto errors = run_gpu_ranks(1, collectives_match_closed_forms);
  EXPECT_EQ(errors[0], "");
}

TEST(NcclComm, OneRankPerGpu) {
  const int n = gpu_count();
  if (n < 2) GTEST_SKIP() << "one GPU: collectives between GPUs need two or more";
  auto errors = run_gpu_ranks(n, collectives_match_closed_forms);
  for (auto& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclComm, BenchOnOneGpuMeasuresDeviceCopy) {
  ASSERT_GT(gpu_count(), 0);
  auto r = testing::run_anvil({"bench", "all_reduce", "-b", "1M", "-e", "64M", "--iters", "5", "--warmup", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  if (gpu_count() == 1)
    EXPECT_NE(r.out.find("collectives need two or more GPUs"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
