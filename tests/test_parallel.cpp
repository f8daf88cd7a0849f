// DDP and FSDP on CPU ranks: two ranks follow PyTorch's float64 8-step AdamW run of the
// tiny-qwen3 fixture (losses 1e-5, final parameters 1e-4); with the same global batch, 1, 2
// and 4 ranks, with and without accumulation, reach the same losses and parameters (within
// 1e-5 relative) as one process; and a worker killed mid-run is named by the launcher within
// seconds.
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
    // The fixture's 8 golden batches of 2 rows, in order: read unshuffled by 2 ranks of one
    // row each, step i takes golden batch i.
    SafetensorsFile gold(testing::shared_dir() + "/fixtures/tiny-qwen3/golden_adamw.safetensors");
    std::vector<int64_t> golden;
    for (int b = 0; b < 8; ++b) {
      const auto v = read_as_i64(gold.get("batch" + std::to_string(b)));
      golden.insert(golden.end(), v.begin(), v.end());
    }
    SafetensorsWriter g;
    g.add("input_ids", DType::kI64, {16, 37}, golden.data());
    g.write(*dir_ + "/golden.safetensors");
  }

  static TrainRun train(const std::string& tag, const std::string& mode, int nproc, int micro, int accum,
                        bool defer = false, const std::string& data = "blocks", int steps = 5) {
    const std::string out = *dir_ + "/" + tag;
    std::vector<std::string> args = {"train", "--device", "cpu", "--model",
                                     testing::shared_dir() + "/fixtures/tiny-qwen3", "--data",
                                     *dir_ + "/" + data + ".safetensors", "--mode", mode, "--steps",
                                     std::to_string(steps), "--micro-batch",
                                     std::to_string(micro), "--grad-accum", std::to_string(accum), "--lr", "1e-3",
                                     "--log-every", "1", "--metrics", out + ".jsonl", "--export", out,
                                     "--export-dtype", "fp32"};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    if (defer) args.push_back("--fsdp-defer-sync");
    if (data == "golden") args.push_back("--no-shuffle");
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

TEST_F(Parallel, TwoRanksFollowTheFloat64GoldenRun) {
  const std::string fx = testing::shared_dir() + "/fixtures/tiny-qwen3";
  const Json curve = json_read_file(fx + "/golden_curve.json");
  SafetensorsFile gold(fx + "/golden_adamw.safetensors");
  for (const char* mode : {"ddp", "fsdp"}) {
    // golden_curve.json's settings: lr 1e-3, no weight decay, clipping at 1, 8 steps of 2 rows.
    const TrainRun run = train(std::string("golden_") + mode, mode, 2, 1, 1, false, "golden", 8);
    ASSERT_EQ(run.losses.size(), 8u) << mode;
    for (size_t i = 0; i < 8; ++i) {
      const double want = curve["fp64"][i]["loss"].get<double>();
      EXPECT_NEAR(run.losses[i], want, 1e-5 * want) << mode << " step " << i + 1;
    }
    ASSERT_FALSE(run.params.empty()) << mode;
    for (auto& [name, got] : run.params)
      EXPECT_TRUE(testing::close_rel_l2(got, read_as_f64(gold.get("param." + name)), 1e-4)) << mode << " " << name;
  }
}

TEST_F(Parallel, SameGlobalBatchSameResultInEveryLayout) {
  const TrainRun base = train("base", "ddp", 1, 4, 1);
  ASSERT_EQ(base.losses.size(), 5u);
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
  // The worker is found by pid: the launcher's child whose environment says RANK=1.
  const auto t0 = std::chrono::steady_clock::now();
  auto r = testing::run_command(
      "( " + testing::shell_quote(testing::anvil_binary()) + " train --device cpu --model " +
      testing::shell_quote(testing::shared_dir() + "/fixtures/tiny-qwen3") + " --data " +
      testing::shell_quote(*dir_ + "/blocks.safetensors") + " --steps 100000 --nproc-per-node 2 & launcher=$!; " +
      "sleep 2; for c in $(cat /proc/$launcher/task/*/children); do "
      "if tr '\\0' '\\n' < /proc/$c/environ | grep -qx RANK=1; then kill -KILL $c; fi; done; wait $launcher )");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "the launcher returned within seconds";
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
