// DDP and FSDP on CPU ranks: with the same global batch, 1, 2 and 4 ranks, with and
// without accumulation, reach the same losses and parameters (within 1e-5 relative) as one
// process; and a worker killed mid-run is named by the launcher within seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>

#include "core/json.h"
#include "io/safetensors.h"
#include "testing.h"

namespace anvil {
namespace {

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;
};

class Parallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("parallel"));
    std::mt19937 rng(7);
    std::vector<int64_t> ids(40 * 37);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
    SafetensorsWriter w;
    w.add("input_ids", DType::kI64, {40, 37}, ids.data());
    w.write(*dir_ + "/blocks.safetensors");
  }

  static TrainRun train(const std::string& tag, const std::string& mode, int nproc, int micro, int accum,
                        bool defer = false) {
    const std::string out = *dir_ + "/" + tag;
    std::vector<std::string> args = {"train", "--device", "cpu", "--model",
                                     testing::shared_dir() + "/fixtures/tiny-qwen3", "--data",
                                     *dir_ + "/blocks.safetensors", "--mode", mode, "--steps", "5", "--micro-batch",
                                     std::to_string(micro), "--grad-accum", std::to_string(accum), "--lr", "1e-3",
                                     "--log-every", "1", "--metrics", out + ".jsonl", "--export", out,
                                     "--export-dtype", "fp32"};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    if (defer) args.push_back("--fsdp-defer-sync");
    auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
    TrainRun run;
    std::ifstream m(out + ".jsonl");
    std::string line;
    while (std::getline(m, line)) run.losses.push_back(json_parse(line, tag)["loss"].get<double>());
    if (r.exit_code == 0) {
      SafetensorsFile f(out + "/model.safetensors");
      for (auto& t : f.tensors()) run.params[t.name] = read_as_f64(t);
    }
    return run;
  }

  static void expect_same(const TrainRun& got, const TrainRun& want, const std::string& what) {
    ASSERT_EQ(got.losses.size(), 5u) << what;
    for (size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what << " step " << i + 1;
    ASSERT_EQ(got.params.size(), want.params.size()) << what;
    for (auto& [name, w] : want.params)
      EXPECT_TRUE(testing::close_rel_l2(got.params.at(name), w, 1e-5)) << what << " " << name;
  }

  static std::string* dir_;
};
std::string* Parallel::dir_ = nullptr;

TEST_F(Parallel, SameGlobalBatchSameResultInEveryLayout) {
  const TrainRun base = train("base", "ddp", 1, 4, 1);
  ASSERT_EQ(base.losses.size(), 5u);
  EXPECT_LT(base.losses.back(), base.losses.front()) << "the loss moves";
  struct Layout {
    int nproc, micro, accum;
  };
  for (const char* mode : {"ddp", "fsdp"})
    for (Layout l : {Layout{1, 1, 4}, Layout{2, 2, 1}, Layout{2, 1, 2}, Layout{4, 1, 1}}) {
      const std::string tag = std::string(mode) + "_n" + std::to_string(l.nproc) + "_b" + std::to_string(l.micro) +
                              "_k" + std::to_string(l.accum);
      expect_same(train(tag, mode, l.nproc, l.micro, l.accum), base, tag);
    }
  expect_same(train("fsdp_defer_n2_b1_k2", "fsdp", 2, 1, 2, true), base, "fsdp, gradient sync deferred");
}

TEST_F(Parallel, SameRunSameBits) {
  const TrainRun a = train("bits_a", "fsdp", 2, 1, 2), b = train("bits_b", "fsdp", 2, 1, 2);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

TEST_F(Parallel, KilledWorkerIsNamed) {
  // Rank 1 is killed while the run is under way: the launcher must stop rank 0 and name rank 1.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = testing::run_command(
      "( '" + testing::anvil_binary() + "' train --device cpu --model '" + testing::shared_dir() +
      "/fixtures/tiny-qwen3' --data '" + *dir_ + "/blocks.safetensors' --steps 100000 --nproc-per-node 2 & " +
      "sleep 2; pkill -KILL -f 'anvil train .*--steps 100000' -n; wait $! )");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "the launcher returned within seconds";
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
