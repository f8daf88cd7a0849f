// The CPU comm against closed forms: 1 to 4 ranks (threads, each with its own TCP comm),
// every collective (all_to_all included), F32 and BF16, in place and out of place, compared exactly, on host
// tensors and on "GPU" tensors staged through a HostStager (here one that copies host
// memory and counts the copies); the determinism of reductions; and the errors: timeout,
// dead peer, mismatched collectives.
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "comm/comm.h"
#include "comm/socket.h"
#include "core/bf16.h"
#include "core/error.h"
#include "comm_ranks.h"
#include "testing.h"

namespace anvil {
namespace {

// A stager whose "GPU" memory is host memory: the comm's staging logic (in inside out, in
// place) runs as with a GPU; every copy is counted.
class CopyingStager final : public HostStager {
 public:
  explicit CopyingStager(std::atomic<int64_t>& copies) : copies_(copies) {}
  int gpu() const override { return 0; }
  void set_compute_stream(void*) override {}
  void to_host(void* host, const void* device, size_t bytes) override { copy(host, device, bytes); }
  void to_device(void* device, const void* host, size_t bytes) override { copy(device, host, bytes); }

 private:
  void copy(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    ++copies_;
  }
  std::atomic<int64_t>& copies_;
};

// Whether the tests below stage through a CopyingStager (tensors then say Device::kCUDA),
// and the copies it made.
bool g_staged = false;
std::atomic<int64_t> g_staged_copies{0};

// Runs fn(comm) on n ranks, one thread each (staged through a CopyingStager when g_staged);
// returns each rank's error message ("" if none).
std::vector<std::string> run_ranks(int n, const std::function<void(Comm&)>& fn, double timeout_s = 20) {
  return testing::run_comm_ranks(n, fn, timeout_s, [](const CommOptions& o) {
    return make_cpu_comm(o, g_staged ? std::make_unique<CopyingStager>(g_staged_copies) : nullptr);
  });
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Values of rank r at index i: small integers, so every sum below is exact in bf16 too.
float value(int r, int64_t i) { return static_cast<float>((r + 1) * (i % 13 + 1)); }

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16_bits(v[i]);
  return b;
}

std::vector<float> read(const void* data, DType dtype, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = dtype == DType::kF32 ? static_cast<const float*>(data)[i]
                                  : bf16_bits_to_f32(static_cast<const uint16_t*>(data)[i]);
  return out;
}

// Host storage for one tensor of either dtype.
struct Buf {
  std::vector<float> f;
  std::vector<uint16_t> b;
  DType dtype;
  Buf(const std::vector<float>& v, DType d) : dtype(d) {
    if (d == DType::kF32) f = v;
    else b = to_bf16(v);
  }
  void* data() { return dtype == DType::kF32 ? static_cast<void*>(f.data()) : static_cast<void*>(b.data()); }
  size_t size() const { return dtype == DType::kF32 ? f.size() : b.size(); }
  Tensor view(size_t begin = 0, size_t n = SIZE_MAX) {
    n = std::min(n, size() - begin);
    return Tensor(static_cast<char*>(data()) + begin * dtype_size(dtype), dtype, {static_cast<int64_t>(n)},
                  g_staged ? Device::kCUDA : Device::kCPU);
  }
  std::vector<float> values(size_t begin = 0, size_t n = SIZE_MAX) {
    n = std::min(n, size() - begin);
    return read(static_cast<char*>(data()) + begin * dtype_size(dtype), dtype, n);
  }
};

// (ranks, dtype, staged through a HostStager).
class CommRanks : public ::testing::TestWithParam<std::tuple<int, DType, bool>> {
 protected:
  void SetUp() override {
    g_staged = std::get<2>(GetParam());
    g_staged_copies = 0;
  }
  void TearDown() override {
    if (g_staged && !IsSkipped()) {
      EXPECT_GT(g_staged_copies.load(), 0) << "nothing was staged";
    }
    g_staged = false;
  }
};

TEST_P(CommRanks, AllReduceMatchesClosedForm) {
  const auto [n, dtype, staged] = GetParam();
  (void)staged;
  for (int64_t N : {1, 7, 1000, 65537}) {
    for (bool in_place : {true, false}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        auto errors = run_ranks(n, [&, N, in_place, op](Comm& c) {
          std::vector<float> v(static_cast<size_t>(N));
          for (int64_t i = 0; i < N; ++i) v[static_cast<size_t>(i)] = value(c.rank(), i);
          Buf in(v, dtype), out(std::vector<float>(static_cast<size_t>(N), -1.0f), dtype);
          if (in_place) {
            c.all_reduce(in.view(), op, "grads");
          } else {
            c.all_reduce(out.view(), in.view(), op, "grads");
          }
          std::vector<float> got = in_place ? in.values() : out.values();
          const float tri = static_cast<float>(n * (n + 1) / 2);
          for (int64_t i = 0; i < N; ++i) {
            float want = tri * static_cast<float>(i % 13 + 1);
            if (op == ReduceOp::kAvg) want /= static_cast<float>(n);
            ASSERT_EQ(got[static_cast<size_t>(i)], want)
                << "rank " << c.rank() << " index " << i << " N " << N << " op " << reduce_op_name(op);
          }
          if (!in_place) {
            EXPECT_EQ(in.values(), read(Buf(v, dtype).data(), dtype, v.size()));
          }
        });
        expect_no_errors(errors);
      }
    }
  }
}

TEST_P(CommRanks, ReduceScatterMatchesClosedForm) {
  const auto [n, dtype, staged] = GetParam();
  (void)staged;
  for (int64_t M : {1, 5, 4099}) {
    for (bool in_place : {true, false}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        auto errors = run_ranks(n, [&, M, in_place, op](Comm& c) {
          const int64_t N = M * n;
          std::vector<float> v(static_cast<size_t>(N));
          for (int64_t j = 0; j < N; ++j) v[static_cast<size_t>(j)] = value(c.rank(), j);
          Buf in(v, dtype), out(std::vector<float>(static_cast<size_t>(M), -1.0f), dtype);
          const size_t mine = static_cast<size_t>(c.rank() * M);
          Tensor dst = in_place ? in.view(mine, static_cast<size_t>(M)) : out.view();
          c.reduce_scatter(dst, in.view(), op, "unit 3");
          std::vector<float> got = in_place ? in.values(mine, static_cast<size_t>(M)) : out.values();
          const float tri = static_cast<float>(n * (n + 1) / 2);
          for (int64_t i = 0; i < M; ++i) {
            float want = tri * static_cast<float>((c.rank() * M + i) % 13 + 1);
            if (op == ReduceOp::kAvg) want /= static_cast<float>(n);
            ASSERT_EQ(got[static_cast<size_t>(i)], want) << "rank " << c.rank() << " index " << i;
          }
        });
        expect_no_errors(errors);
      }
    }
  }
}

TEST_P(CommRanks, AllGatherMatchesClosedForm) {
  const auto [n, dtype, staged] = GetParam();
  (void)staged;
  for (int64_t M : {1, 3, 5000}) {
    for (bool in_place : {true, false}) {
      auto errors = run_ranks(n, [&, M, in_place](Comm& c) {
        std::vector<float> mine(static_cast<size_t>(M));
        for (int64_t i = 0; i < M; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(c.rank() * 10 + i % 7);
        Buf out(std::vector<float>(static_cast<size_t>(M * n), -1.0f), dtype);
        Buf in(mine, dtype);
        if (in_place) {
          std::memcpy(out.view(static_cast<size_t>(c.rank() * M)).data, in.data(), in.view().bytes());
          c.all_gather(out.view(), out.view(static_cast<size_t>(c.rank() * M), static_cast<size_t>(M)), "weights");
        } else {
          c.all_gather(out.view(), in.view(), "weights");
        }
        std::vector<float> got = out.values();
        for (int p = 0; p < n; ++p)
          for (int64_t i = 0; i < M; ++i)
            ASSERT_EQ(got[static_cast<size_t>(p * M + i)], static_cast<float>(p * 10 + i % 7))
                << "rank " << c.rank() << " slice " << p << " index " << i;
      });
      expect_no_errors(errors);
    }
  }
}

// Element i of the chunk rank r sends to rank p: r * 20 + p * 5 + i % 5 (exact in bf16), so
// every element received names its sender and its place.
TEST_P(CommRanks, AllToAllMatchesClosedForm) {
  const auto [n, dtype, staged] = GetParam();
  (void)staged;
  for (int64_t M : {1, 3, 5000}) {
    auto errors = run_ranks(n, [&, M](Comm& c) {
      std::vector<float> mine(static_cast<size_t>(M * n));
      for (int p = 0; p < n; ++p)
        for (int64_t i = 0; i < M; ++i)
          mine[static_cast<size_t>(p * M + i)] = static_cast<float>(c.rank() * 20 + p * 5 + i % 5);
      Buf in(mine, dtype);
      Buf out(std::vector<float>(static_cast<size_t>(M * n), -1.0f), dtype);
      c.all_to_all(out.view(), in.view(), "attention");
      std::vector<float> got = out.values();
      for (int p = 0; p < n; ++p)
        for (int64_t i = 0; i < M; ++i)
          ASSERT_EQ(got[static_cast<size_t>(p * M + i)], static_cast<float>(p * 20 + c.rank() * 5 + i % 5))
              << "rank " << c.rank() << " chunk " << p << " index " << i;
    });
    expect_no_errors(errors);
  }
}

TEST_P(CommRanks, BroadcastFromEveryRoot) {
  const auto [n, dtype, staged] = GetParam();
  (void)staged;
  for (int root = 0; root < n; ++root) {
    auto errors = run_ranks(n, [&, root](Comm& c) {
      std::vector<float> v(777);
      for (size_t i = 0; i < v.size(); ++i) v[i] = c.rank() == root ? static_cast<float>(i % 50 + root) : -3.0f;
      Buf b(v, dtype);
      c.broadcast(b.view(), root, "init");
      std::vector<float> got = b.values();
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i % 50 + root)) << "index " << i;
      c.barrier("end");
    });
    expect_no_errors(errors);
  }
}

TEST_P(CommRanks, HostExchangesAddInRankOrder) {
  const auto [n, dtype, staged] = GetParam();
  (void)dtype;
  if (staged) GTEST_SKIP() << "host exchanges carry no tensors";
  auto errors = run_ranks(n, [&](Comm& c) {
    EXPECT_EQ(c.host_sum(static_cast<int64_t>(c.rank() + 1)), n * (n + 1) / 2);
    EXPECT_EQ(c.host_max(static_cast<double>(c.rank()) * 0.5), (n - 1) * 0.5);
    std::vector<int32_t> all(static_cast<size_t>(n));
    int32_t mine = 10 * c.rank();
    c.host_all_gather(&mine, sizeof mine, all.data());
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], 10 * r);
  });
  expect_no_errors(errors);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CommRanks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16), ::testing::Bool()),
                         [](const auto& p) {
                           return cat(std::get<0>(p.param), "ranks_", dtype_name(std::get<1>(p.param)),
                                      std::get<2>(p.param) ? "_staged" : "");
                         });

// Each element is reduced as ((x0 + x1) + x2) + x3 in fp32 on whichever rank owns it:
// arbitrary floats give that exact bit pattern on every rank.
TEST(Comm, ReductionIsRankOrderedAndIdenticalOnEveryRank) {
  const int n = 4;
  const size_t N = 10001;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(N));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1e3f);
  for (auto& v : inputs)
    for (float& x : v) x = dist(rng) * std::exp(dist(rng) / 500.0f);
  std::vector<float> want(N);
  for (size_t i = 0; i < N; ++i) want[i] = ((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + inputs[3][i];
  auto errors = run_ranks(n, [&](Comm& c) {
    std::vector<float> v = inputs[static_cast<size_t>(c.rank())];
    c.all_reduce(Tensor(v.data(), DType::kF32, {static_cast<int64_t>(N)}), ReduceOp::kSum);
    for (size_t i = 0; i < N; ++i)
      ASSERT_EQ(std::memcmp(&v[i], &want[i], sizeof(float)), 0) << "rank " << c.rank() << " index " << i;
  });
  expect_no_errors(errors);
}

// Rank 1 never joins the all_reduce but stays alive (its comm open) until rank 0's call has
// ended; it gives up after 60 times the timeout, which then fails the test on the message (a
// closed connection, not a timeout) instead of hanging.
TEST(Comm, TimeoutNamesCollectiveRankStepAndTag) {
  const double timeout_s = 1.0;
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  auto errors = run_ranks(
      2,
      [&](Comm& c) {
        if (c.rank() == 1) {
          done.wait_for(std::chrono::duration<double>(60 * timeout_s));
          return;
        }
        struct Done {
          std::promise<void>& p;
          ~Done() { p.set_value(); }
        } signal_done{rank0_done};
        std::vector<float> v(10, 1.0f);
        c.set_step(7);
        c.all_reduce(Tensor(v.data(), DType::kF32, {10}), ReduceOp::kAvg, "layers.3");
      },
      timeout_s);
  EXPECT_EQ(errors[1], "");
  EXPECT_NE(errors[0].find("[timeout]"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("all_reduce on rank 0 of 2 (step 7, tag 'layers.3')"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("waiting for data from rank(s) 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("ANVIL_COMM_TIMEOUT_S"), std::string::npos) << errors[0];
}

// "At once": the survivors see the closed connection, not their 30 s timeout.
TEST(Comm, DeadPeerIsNamedAtOnce) {
  auto errors = run_ranks(
      3,
      [](Comm& c) {
        if (c.rank() == 2) return;  // leaves: its comm (and sockets) close
        std::vector<float> v(3072, 1.0f);
        c.all_gather(Tensor(v.data(), DType::kF32, {3072}), Tensor(v.data() + c.rank() * 1024, DType::kF32, {1024}));
      },
      30.0);
  // The first survivor to notice names rank 2; the other may instead see that survivor go.
  int named = 0;
  for (int r : {0, 1}) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("[communication]"), std::string::npos) << e;
    EXPECT_NE(e.find("all_gather on rank " + std::to_string(r) + " of 3"), std::string::npos) << e;
    EXPECT_NE(e.find("closed its connection (did it exit or crash?)"), std::string::npos) << e;
    EXPECT_EQ(e.find("[timeout]"), std::string::npos) << e;
    named += e.find("rank 2 closed its connection") != std::string::npos;
  }
  EXPECT_GE(named, 1) << errors[0] << "\n" << errors[1];
}

TEST(Comm, MismatchedCollectivesAreReported) {
  auto errors = run_ranks(2, [](Comm& c) {
    std::vector<float> v(8, 1.0f);
    if (c.rank() == 0) c.all_reduce(Tensor(v.data(), DType::kF32, {8}), ReduceOp::kSum);
    else c.all_gather(Tensor(v.data(), DType::kF32, {8}), Tensor(v.data() + 4, DType::kF32, {4}));
  });
  const std::string all = errors[0] + errors[1];
  EXPECT_NE(all.find("collective mismatch"), std::string::npos) << all;
  EXPECT_NE(all.find("all_gather"), std::string::npos) << all;
  EXPECT_NE(all.find("all_reduce"), std::string::npos) << all;
}

// Rank 1 starts 300 ms before rank 0 listens: it waits and connects, and the two exchange.
// The delay makes rank 0 late (it kills and signals nothing); rank 1 waits within its 10 s
// timeout, or fails with an error the test reports.
TEST(Comm, RendezvousWaitsForALateRankZero) {
  const int port = net::free_tcp_port();
  int64_t sums[2] = {-1, -1};
  std::string errors[2];
  auto rank = [&](int r) {
    try {
      CommOptions o;
      o.rank = r;
      o.world = 2;
      o.master_port = port;
      o.timeout_s = 10;
      auto c = make_cpu_comm(o);
      EXPECT_EQ(c->rank(), r);
      EXPECT_EQ(c->world(), 2);
      sums[r] = c->host_sum(int64_t{10} * (r + 1));
      c->barrier();
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rank(0);
  });
  rank(1);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  late.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(sums[0], 30);
  EXPECT_EQ(sums[1], 30);
  EXPECT_GE(waited, 0.3) << "rank 1 returned before rank 0 existed";
}

TEST(Comm, RejectsWrongSizesAndDtypes) {
  auto errors = run_ranks(1, [](Comm& c) {
    std::vector<float> v(8);
    std::vector<int32_t> ints(8);
    EXPECT_THROW(c.reduce_scatter(Tensor(v.data(), DType::kF32, {3}), Tensor(v.data(), DType::kF32, {8}),
                                  ReduceOp::kSum),
                 Error);
    EXPECT_THROW(c.all_reduce(Tensor(ints.data(), DType::kI32, {8}), ReduceOp::kSum), Error);
    EXPECT_THROW(c.all_reduce(Tensor(v.data(), DType::kF32, {8}, Device::kCUDA), ReduceOp::kSum), Error);
  });
  expect_no_errors(errors);
}


// Groups of ranks (Comm::group, expert parallelism's): on 4 ranks, {0, 2} and {1, 3} (strided)
// and {0, 1} and {2, 3}, each a view of the run's connections with its own sequence, their
// collectives interleaved with the run's; each result names its senders.
TEST(Comm, GroupsRunTheirCollectivesBesideTheRunsOwn) {
  for (bool staged : {false, true}) {
    g_staged = staged;
    auto errors = run_ranks(4, [](Comm& c) {
      const int r = c.rank();
      const std::unique_ptr<Comm> strided = c.group({r % 2, r % 2 + 2});
      const std::unique_ptr<Comm> halves = c.group({r / 2 * 2, r / 2 * 2 + 1});
      ASSERT_EQ(strided->world(), 2);
      ASSERT_EQ(strided->rank(), r / 2);
      ASSERT_EQ(halves->rank(), r % 2);
      for (int round = 0; round < 3; ++round) {
        Buf all(std::vector<float>(5, static_cast<float>(r + 1)), DType::kF32);
        c.all_reduce(all.view(), ReduceOp::kSum, "run");
        Buf s(std::vector<float>(7, static_cast<float>(r + 1)), DType::kF32);
        strided->all_reduce(s.view(), ReduceOp::kSum, "strided");
        std::vector<float> mine = {static_cast<float>(10 * r), static_cast<float>(10 * r + 1)};
        Buf in(mine, DType::kF32), out(std::vector<float>(2, -1.0f), DType::kF32);
        halves->all_to_all(out.view(), in.view(), "halves");
        for (float x : all.values()) ASSERT_EQ(x, 10.0f);
        for (float x : s.values()) ASSERT_EQ(x, static_cast<float>(r % 2 + 1 + r % 2 + 3));
        const int first = r / 2 * 2;  // chunk p of out comes from group rank p: its element (my group rank)
        ASSERT_EQ(out.values()[0], static_cast<float>(10 * first + r % 2));
        ASSERT_EQ(out.values()[1], static_cast<float>(10 * (first + 1) + r % 2));
      }
      int32_t x = r;
      std::vector<int32_t> got(2);
      EXPECT_THROW(strided->host_all_gather(&x, sizeof x, got.data(), "group"), Error);
    });
    expect_no_errors(errors);
  }
  g_staged = false;
}

}  // namespace
}  // namespace anvil
