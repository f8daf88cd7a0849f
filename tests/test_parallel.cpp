// DDP and FSDP on CPU ranks: two ranks follow PyTorch's float64 8-step AdamW run of the
// tiny-qwen3 fixture (losses 1e-5, final parameters 1e-4); with the same global batch, 1, 2
// and 4 ranks, with and without accumulation, reach the same losses and parameters (within
// 1e-5 relative) as one process, also as two launchers acting as two nodes and as Slurm
// tasks; gradients reduced in bf16 stay within bf16 noise of fp32; and a worker killed
// mid-run (once the run's first step is logged) is named by the launcher.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <random>

#include "comm/comm.h"
#include "comm/socket.h"
#include "core/fs.h"
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

  static std::vector<std::string> train_args(const std::string& out, const std::string& mode, int micro, int accum,
                                             const std::string& data = "blocks", int steps = 5) {
    return {"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3", "--data",
            *dir_ + "/" + data + ".safetensors", "--mode", mode, "--steps", std::to_string(steps), "--micro-batch",
            std::to_string(micro), "--grad-accum", std::to_string(accum), "--lr", "1e-3", "--log-every", "1",
            "--metrics", out + ".jsonl", "--export", out, "--export-dtype", "fp32"};
  }

  static TrainRun train(const std::string& tag, const std::string& mode, int nproc, int micro, int accum,
                        bool defer = false, const std::vector<std::string>& extra = {},
                        const std::string& data = "blocks", int steps = 5) {
    const std::string out = *dir_ + "/" + tag;
    std::vector<std::string> args = train_args(out, mode, micro, accum, data, steps);
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    if (defer) args.push_back("--fsdp-defer-sync");
    if (data == "golden") args.push_back("--no-shuffle");
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
    return read_run(out, tag);
  }

  // Several anvil processes at once (`env VAR=... anvil ARGS` each), waited for by pid.
  static void run_together(const std::vector<std::string>& commands, const std::string& tag) {
    std::string script = "pids=''; ";
    for (const std::string& c : commands) script += c + " > " + *dir_ + "/" + tag + ".$$.${#pids}.log 2>&1 & pids=\"$pids $!\"; ";
    script += "rc=0; for p in $pids; do wait $p || rc=1; done; cat " + *dir_ + "/" + tag + ".$$.*.log; exit $rc";
    auto r = testing::run_command(script);
    EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
  }

  static std::string command_line(const std::vector<std::string>& args, const std::string& env = "") {
    std::string c = "env " + env + " '" + testing::anvil_binary() + "'";
    for (const std::string& a : args) c += " '" + a + "'";
    return c;
  }

  static TrainRun read_run(const std::string& out, const std::string& tag) {
    TrainRun run;
    std::ifstream m(out + ".jsonl");
    std::string line;
    while (std::getline(m, line))
      if (const Json j = json_parse(line, tag); j.contains("step")) run.losses.push_back(j["loss"].get<double>());
    if (path_exists(out + "/model.safetensors")) {
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
  // The fixture's 8 golden batches of 2 rows, in order: read unshuffled by 2 ranks of one
  // row each, step i takes golden batch i. (Written here, not in SetUpTestSuite: a missing
  // fixture there would have gtest, and ctest with it, report every test as skipped.)
  std::vector<int64_t> golden;
  for (int b = 0; b < 8; ++b) {
    const auto v = read_as_i64(gold.get("batch" + std::to_string(b)));
    golden.insert(golden.end(), v.begin(), v.end());
  }
  SafetensorsWriter g;
  g.add("input_ids", DType::kI64, {16, 37}, golden.data());
  g.write(*dir_ + "/golden.safetensors");
  for (const char* mode : {"ddp", "fsdp"}) {
    // golden_curve.json's settings: lr 1e-3, no weight decay, clipping at 1, 8 steps of 2 rows.
    const TrainRun run = train(std::string("golden_") + mode, mode, 2, 1, 1, false, {}, "golden", 8);
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

// Two launchers on this machine act as two nodes of 2 CPU ranks each, over loopback.
TEST_F(Parallel, TwoNodesOfTwoRanksMatchOneProcess) {
  const TrainRun base = train("nodes_base", "ddp", 1, 4, 1);
  for (const char* mode : {"ddp", "fsdp"}) {
    const std::string tag = std::string("nodes_") + mode, out = *dir_ + "/" + tag;
    const std::string port = std::to_string(net::free_tcp_port());
    std::vector<std::string> cmds;
    for (int node = 0; node < 2; ++node) {
      std::vector<std::string> args = train_args(out, mode, 1, 1);
      args.insert(args.end(), {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", std::to_string(node),
                               "--master-addr", "127.0.0.1", "--master-port", port});
      cmds.push_back(command_line(args));
    }
    run_together(cmds, tag);
    expect_same(read_run(out, tag), base, tag);
  }
}

// srun's task variables, without RANK: four tasks join as one group.
TEST_F(Parallel, SlurmTasksJoinWithoutRank) {
  const TrainRun base = train("slurm_base", "fsdp", 1, 4, 1);
  const std::string out = *dir_ + "/slurm", port = std::to_string(net::free_tcp_port());
  std::vector<std::string> cmds;
  for (int task = 0; task < 4; ++task)
    cmds.push_back(command_line(train_args(out, "fsdp", 1, 1),
                                "-u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR SLURM_PROCID=" + std::to_string(task) +
                                    " SLURM_NTASKS=4 SLURM_LOCALID=" + std::to_string(task % 2) +
                                    " SLURM_JOB_NODELIST='localhost,other[1-3]' MASTER_PORT=" + port));
  run_together(cmds, "slurm");
  expect_same(read_run(out, "slurm"), base, "slurm");
}

TEST_F(Parallel, AutoModeSaysWhichAndWhy) {
  std::vector<std::string> args = train_args(*dir_ + "/auto", "auto", 1, 1);
  args.insert(args.end(), {"--nproc-per-node", "2"});
  auto r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("on 2 x cpu (ddp, auto: host memory is not planned, so ddp)"), std::string::npos) << r.out;
}

TEST(SlurmNodeList, FirstHost) {
  EXPECT_EQ(slurm_first_host("node[01-04,07]"), "node01");
  EXPECT_EQ(slurm_first_host("node[7,9-12]"), "node7");
  EXPECT_EQ(slurm_first_host("gpu-a1,gpu-b2"), "gpu-a1");
  EXPECT_EQ(slurm_first_host("rack[3-4]-n[1-2],x"), "rack3-n[1-2]");
  EXPECT_EQ(slurm_first_host("a[001-100]-ib"), "a001-ib");
  EXPECT_EQ(slurm_first_host("single"), "single");
  EXPECT_THROW(slurm_first_host("node[01-04"), Error);
}

// Gradients reduced in bf16: the losses stay within bf16 noise of the fp32 reduction
// (which is unchanged: the runs above), and they do differ (the bf16 path ran).
TEST_F(Parallel, Bf16ReductionStaysWithinBf16Noise) {
  const TrainRun base = train("bf16_base", "ddp", 1, 4, 1);
  for (const char* mode : {"ddp", "fsdp"}) {
    const std::string tag = std::string("bf16_") + mode;
    const TrainRun fp32 = train(tag + "_fp32", mode, 2, 1, 2, false, {"--reduce-dtype", "fp32"});
    const TrainRun bf16 = train(tag, mode, 2, 1, 2, false, {"--reduce-dtype", "bf16"});
    expect_same(fp32, base, tag + " fp32");
    ASSERT_EQ(bf16.losses.size(), 5u) << tag;
    EXPECT_EQ(bf16.losses[0], fp32.losses[0]) << "the first forward precedes any reduction";
    double worst = 0;
    for (size_t i = 0; i < 5; ++i) worst = std::max(worst, std::abs(bf16.losses[i] - fp32.losses[i]) / fp32.losses[i]);
    EXPECT_GT(worst, 0) << tag << ": identical to fp32, so the bf16 path did not run";
    EXPECT_LT(worst, 1e-3) << tag;
    for (auto& [name, w] : fp32.params)
      EXPECT_TRUE(testing::close_rel_l2(bf16.params.at(name), w, 2e-2)) << tag << " " << name;
  }
}

TEST_F(Parallel, SameRunSameBits) {
  const TrainRun a = train("bits_a", "fsdp", 2, 1, 2), b = train("bits_b", "fsdp", 2, 1, 2);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

TEST_F(Parallel, KilledWorkerIsNamed) {
  // Rank 1 is killed once step 1 is logged (both workers are up and training): the launcher
  // must stop rank 0 and name rank 1 as the rank that was killed, even when it reaps rank 0
  // first (rank 0 fails on rank 1's closed connection while rank 1 is still being torn down).
  // The worker is found by pid: the launcher's child whose environment says RANK=1.
  testing::Background launcher(
      "exec " + testing::shell_quote(testing::anvil_binary()) + " train --device cpu --model " +
      testing::shell_quote(testing::shared_dir() + "/fixtures/tiny-qwen3") + " --data " +
      testing::shell_quote(*dir_ + "/blocks.safetensors") + " --steps 100000 --nproc-per-node 2");
  ASSERT_TRUE(launcher.wait_for_line("step 1/")) << launcher.finish().out;
  const size_t logged = launcher.out().size();
  const pid_t rank1 = testing::child_with_env(launcher.pid(), "RANK=1");
  ASSERT_GT(rank1, 0) << "no worker with RANK=1 under the launcher " << launcher.pid();
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  const testing::RunResult r = launcher.finish();
  EXPECT_NE(r.exit_code, 0) << r.out;
  const size_t named = r.out.find("anvil train: rank 1 (pid " + std::to_string(rank1) + ") was killed by signal 9");
  ASSERT_NE(named, std::string::npos) << "the launcher does not name rank 1 as the rank that was killed\n" << r.out;
  EXPECT_GE(named, logged) << "the error follows the step line\n" << r.out;
  EXPECT_TRUE(r.out.find("The other 1 worker(s) were stopped", named) != std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
