// anvil bench on CPU ranks: the bus-bandwidth factors, the sweep, the closed forms against
// a naive reduction, the data check (including a comm that corrupts data), the table and
// JSON, and the command through the launcher.
#include <algorithm>
#include <functional>
#include <sstream>

#include "comm/bench.h"
#include "comm/device.h"
#include "core/bf16.h"
#include "core/json.h"
#include "comm_ranks.h"
#include "testing.h"

namespace anvil {
namespace {

// The table's cells: data rows are the lines that do not begin with '#'; comment lines are
// found by a word they hold (a column name, "GiB"), and read as words (trailing
// punctuation off).
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string c; in >> c;) out.push_back(c);
  return out;
}

std::vector<std::vector<std::string>> data_rows(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#' && !cells(line).empty()) rows.push_back(cells(line));
  return rows;
}

std::vector<std::string> comment_with(const std::string& table, const std::string& word) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    auto c = cells(line);
    for (auto& w : c)
      while (w.size() > 1 && (w.back() == ',' || w.back() == ';' || w.back() == ':')) w.pop_back();
    if (!line.empty() && line[0] == '#' && std::find(c.begin(), c.end(), word) != c.end()) return c;
  }
  return {};
}

bool holds(const std::vector<std::string>& c, const std::string& word) {
  return std::find(c.begin(), c.end(), word) != c.end();
}

TEST(Bench, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllReduce, 3), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kAllGather, 3), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bench_bus_factor(BenchCollective::kBroadcast, 8), 1.0);
}

TEST(Bench, SweepSizes) {
  BenchOptions o;  // 8 B to 4 GiB by 2, bf16
  std::vector<int64_t> s = bench_sizes(o, 1);
  ASSERT_EQ(s.size(), 30u);
  EXPECT_EQ(s.front(), 8);
  EXPECT_EQ(s.back(), int64_t{4} << 30);
  o.collective = BenchCollective::kAllGather;
  o.max_bytes = 64;
  EXPECT_EQ(bench_sizes(o, 3), (std::vector<int64_t>{6, 12, 30, 60}));  // counts 3, 6, 15, 30
  o.collective = BenchCollective::kReduceScatter;
  o.dtype = DType::kF32;
  EXPECT_EQ(bench_sizes(o, 8), (std::vector<int64_t>{32, 64}));  // 8 and 16 B hold no element per rank
  o.collective = BenchCollective::kAllReduce;
  o.dtype = DType::kBF16;
  o.min_bytes = 8;
  o.max_bytes = 12;
  o.factor = 1.1;
  // 8, 8.8, 9.68, 10.65, 11.71 bytes: whole bf16 elements give 8, 8, 8, 10, 10; repeats dropped
  EXPECT_EQ(bench_sizes(o, 1), (std::vector<int64_t>{8, 10}));
  o.factor = 1.0;
  EXPECT_THROW(bench_sizes(o, 1), Error);
}

// The closed forms against a naive evaluation of each collective over bench_input.
TEST(Bench, ClosedFormsMatchANaiveReduction) {
  for (int n : {1, 2, 3, 5, 8}) {
    const int64_t count = 8 * n * 7;
    const int64_t m = count / n;
    for (int rank = 0; rank < n; ++rank)
      for (int64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += bench_input(r, i);
        EXPECT_EQ(bench_expected(BenchCollective::kAllReduce, n, rank, 0, count, i), sum);
        EXPECT_EQ(bench_expected(BenchCollective::kAllGather, n, rank, 0, count, i),
                  bench_input(static_cast<int>(i / m), i % m));
        EXPECT_EQ(bench_expected(BenchCollective::kBroadcast, n, rank, n - 1, count, i), bench_input(n - 1, i));
        if (i < m) {
          float rs = 0;
          for (int r = 0; r < n; ++r) rs += bench_input(r, rank * m + i);
          EXPECT_EQ(bench_expected(BenchCollective::kReduceScatter, n, rank, 0, count, i), rs);
        }
      }
  }
  // Every partial sum stays an integer below 256, so bf16 holds it exactly up to 42 ranks.
  for (int64_t i = 0; i < 10; ++i)
    EXPECT_EQ(round_bf16(bench_expected(BenchCollective::kAllReduce, 42, 0, 0, 10, i)),
              bench_expected(BenchCollective::kAllReduce, 42, 0, 0, 10, i));
}

std::vector<BenchReport> bench_on_ranks(int n, const BenchOptions& o) {
  std::vector<BenchReport> reports(static_cast<size_t>(n));
  const std::vector<std::string> errors = testing::run_comm_ranks(
      n, [&](Comm& comm) { reports[static_cast<size_t>(comm.rank())] = run_bench(comm, o); }, 30);
  for (auto& e : errors) EXPECT_EQ(e, "");
  return reports;
}

// nccl-tests' bus-bandwidth factors for n = 3 ranks, written out (not bench_bus_factor):
// all_reduce 2(n-1)/n = 4/3, all_gather and reduce_scatter (n-1)/n = 2/3, broadcast 1.
double bus_factor_of_3_ranks(BenchCollective c) {
  switch (c) {
    case BenchCollective::kAllReduce: return 4.0 / 3.0;
    case BenchCollective::kAllGather:
    case BenchCollective::kReduceScatter: return 2.0 / 3.0;
    case BenchCollective::kBroadcast: return 1.0;
  }
  return 0;
}

TEST(Bench, EveryCollectiveVerifiesOnCpuRanks) {
  for (BenchCollective c : {BenchCollective::kAllReduce, BenchCollective::kAllGather, BenchCollective::kReduceScatter,
                            BenchCollective::kBroadcast})
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      BenchOptions o;
      o.collective = c;
      o.dtype = dtype;
      o.max_bytes = 256 << 10;
      o.factor = 4;
      o.iters = 2;
      o.warmup = 1;
      o.root = 2;
      auto reports = bench_on_ranks(3, o);
      const BenchReport& r = reports[0];
      ASSERT_EQ(r.rows.size(), bench_sizes(o, 3).size());
      EXPECT_EQ(r.wrong(), 0) << bench_collective_name(c);
      for (const BenchRow& row : r.rows) {
        EXPECT_GT(row.time_us, 0);
        EXPECT_EQ(row.count * static_cast<int64_t>(dtype_size(dtype)), row.bytes);
        EXPECT_DOUBLE_EQ(row.algbw_gbps, static_cast<double>(row.bytes) / (row.time_us * 1e-6) / 1e9);
        EXPECT_DOUBLE_EQ(row.busbw_gbps, row.algbw_gbps * bus_factor_of_3_ranks(c));
      }
      // Every rank reports the same (slowest-rank) times.
      for (const BenchReport& other : reports)
        for (size_t k = 0; k < r.rows.size(); ++k) EXPECT_EQ(other.rows[k].time_us, r.rows[k].time_us);
      EXPECT_FALSE(r.has_headline);  // CPU: the 1 GiB figure is not measured apart
    }
}

// A world-of-one comm whose all_reduce gets element 3 wrong: the check must see it.
class CorruptingComm final : public Comm {
 public:
  CorruptingComm() : Comm(std::make_unique<Bootstrap>(BootstrapOptions{})) {}
  Device device() const override { return Device::kCPU; }
  int gpu() const override { return -1; }
  std::string backend() const override { return "corrupting"; }
  CommWork all_reduce(Tensor out, Tensor in, ReduceOp, std::string_view) override {
    std::memmove(out.data, in.data, in.bytes());
    if (out.numel() > 3) out.ptr<float>()[3] += 1.0f;
    return {};
  }
  CommWork reduce_scatter(Tensor, Tensor, ReduceOp, std::string_view) override { return {}; }
  CommWork all_gather(Tensor, Tensor, std::string_view) override { return {}; }
  CommWork all_to_all(Tensor, Tensor, std::string_view) override { return {}; }
  CommWork broadcast(Tensor, int, std::string_view) override { return {}; }
  void barrier(std::string_view) override {}
  void set_compute_stream(void*) override {}
  void wait(CommWork) override {}
  void synchronize() override {}
};

TEST(Bench, TheCheckCatchesCorruptData) {
  CorruptingComm comm;
  BenchOptions o;
  o.dtype = DType::kF32;
  o.max_bytes = 1024;
  o.iters = 1;
  o.warmup = 0;
  BenchReport r = run_bench(comm, o);
  ASSERT_EQ(r.rows.size(), 8u);  // 8 B .. 1 KiB
  for (const BenchRow& row : r.rows) EXPECT_EQ(row.wrong, row.count > 3 ? 1 : 0) << row.bytes;
  const auto verdict = comment_with(bench_table(r), "bounds");  // "# out of bounds values : N OK|WRONG"
  EXPECT_TRUE(holds(verdict, "7") && holds(verdict, "WRONG")) << bench_table(r);
  for (const auto& row : data_rows(bench_table(r))) EXPECT_EQ(row.back(), std::stoll(row[1]) > 3 ? "1" : "0");
}

TEST(Bench, TableAndJson) {
  BenchReport r;
  r.options.collective = BenchCollective::kAllReduce;
  r.options.dtype = DType::kBF16;
  r.world = 8;
  r.backend = "nccl";
  r.rows = {BenchRow{1 << 30, 1 << 29, 10000.0, 107.37, 187.90, 0}};
  r.avg_busbw_gbps = 187.9;
  r.has_headline = true;
  r.headline_busbw_gbps = 187.9;
  const std::string t = bench_table(r);
  const auto title = comment_with(t, "bench");
  for (const char* w : {"all_reduce", "8", "nccl", "bf16"}) EXPECT_TRUE(holds(title, w)) << w << "\n" << t;
  EXPECT_TRUE(holds(comment_with(t, "busbw"), "1.7500")) << "the bus factor 2(n-1)/n for n = 8\n" << t;
  EXPECT_EQ(comment_with(t, "size(B)"), (std::vector<std::string>{"#", "size(B)", "count", "type", "redop", "time(us)",
                                                                 "algbw(GB/s)", "busbw(GB/s)", "#wrong"}))
      << t;
  EXPECT_EQ(data_rows(t), (std::vector<std::vector<std::string>>{
                              {"1073741824", "536870912", "bf16", "sum", "10000.00", "107.37", "187.90", "0"}}))
      << t;
  EXPECT_TRUE(holds(comment_with(t, "average"), "187.900")) << "the average bus bandwidth\n" << t;
  EXPECT_TRUE(holds(comment_with(t, "GiB"), "187.90")) << "the 1 GiB bf16 headline\n" << t;
  Json j = bench_json(r);
  EXPECT_EQ(j["world"], 8);
  EXPECT_DOUBLE_EQ(j["bus_factor"].get<double>(), 1.75);
  EXPECT_DOUBLE_EQ(j["allreduce_1gib_bf16_busbw_gbps"].get<double>(), 187.9);
  EXPECT_EQ(j["rows"][0]["bytes"], 1 << 30);
}

TEST(BenchCommand, LaunchesCpuRanksAndPrintsJson) {
  auto r = testing::run_anvil({"bench", "reduce_scatter", "--device", "cpu", "--nproc-per-node", "3", "-b", "64",
                               "-e", "64K", "-f", "4", "--iters", "2", "--warmup", "1", "--dtype", "fp32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Json j = json_parse(r.out, "bench output");
  EXPECT_EQ(j["world"], 3);
  EXPECT_EQ(j["collective"], "reduce_scatter");
  EXPECT_EQ(j["wrong"], 0);
  EXPECT_EQ(j["rows"].size(), 6u);  // 60, 252, 1020, 4092, 16380, 65532 bytes
  EXPECT_EQ(j["rows"][0]["bytes"], 60);
}

TEST(BenchCommand, TableThroughTheLauncher) {
  auto r = testing::run_anvil({"bench", "broadcast", "--device", "cpu", "--nproc-per-node", "2", "--root", "1", "-e",
                               "4K", "--iters", "1", "--warmup", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto title = comment_with(r.out, "bench");
  for (const char* w : {"broadcast", "2", "cpu", "bf16", "1"}) EXPECT_TRUE(holds(title, w)) << w << "\n" << r.out;
  const auto verdict = comment_with(r.out, "bounds");
  EXPECT_TRUE(holds(verdict, "0") && holds(verdict, "OK")) << r.out;
  const auto rows = data_rows(r.out);
  ASSERT_FALSE(rows.empty()) << r.out;
  EXPECT_EQ(std::vector<std::string>(rows.back().begin(), rows.back().begin() + 4),
            (std::vector<std::string>{"4096", "2048", "bf16", "none"}))
      << r.out;
  for (const auto& row : rows) EXPECT_EQ(row.back(), "0") << r.out;
}

TEST(BenchCommand, UsageAndDeviceErrors) {
  EXPECT_EQ(testing::run_anvil({"bench", "all_to_all", "--device", "cpu"}).exit_code, 2);
  EXPECT_EQ(testing::run_anvil({"bench", "all_reduce", "--device", "cpu", "--nproc-per-node", "gpu"}).exit_code, 2);
  EXPECT_EQ(testing::run_anvil({"bench", "all_reduce", "--device", "cpu", "-b", "1K", "-e", "8"}).exit_code, 2);
  // bench step times what train would run: a model or a preset, as anvil train and plan ask.
  const auto step = testing::run_anvil({"bench", "step", "--device", "cpu", "--steps", "2", "--warmup", "1"});
  EXPECT_EQ(step.exit_code, 2) << step.out;
  EXPECT_NE(step.out.find("anvil bench step: give exactly one of --model and --preset"), std::string::npos)
      << step.out;
  if (gpu_count() == 0) {  // asked for GPUs where there are none (without --device: the CPU's ranks)
    auto r = testing::run_anvil({"bench", "all_reduce", "--device", "cuda"});
    EXPECT_EQ(r.exit_code, 3) << r.out;
    EXPECT_NE(r.out.find("no GPU"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace anvil
