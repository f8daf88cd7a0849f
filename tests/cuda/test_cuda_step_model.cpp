// The step model on the GPU (plan/step_model.h): the op list of plan/step_ops.h against the
// ops a real CUDA step issues (bf16 compute, split masters, bf16 gradients, cuDNN attention),
// on one GPU and, where present, ddp and fsdp on two; and --write-op-table's table read back
// and used for bench step's prediction.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "comm/device.h"
#include "core/json.h"
#include "plan/step_model.h"
#include "../plan_case.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {
namespace {

struct GpuCase {
  ParallelMode mode;
  int world;
  Recompute recompute;
};

std::vector<std::string> bench_args(const GpuCase& k, int64_t seq_len = 64) {
  std::vector<std::string> a = {"bench", "step", "--device", "cuda", "--preset", "tiny", "--seq-len",
                                std::to_string(seq_len), "--steps", "3", "--warmup", "1", "--op-times",
                                "--no-overlap-optimizer", "--mode",
                                parallel_mode_name(k.mode), "--recompute", recompute_name(k.recompute)};
  if (k.world > 1) a.insert(a.end(), {"--nproc-per-node", std::to_string(k.world)});
  return a;
}

Json bench_line(const testing::RunResult& r) {
  const size_t key = r.out.find("\"bench\":\"step\"");
  EXPECT_NE(key, std::string::npos) << r.out;
  const size_t line = r.out.rfind('\n', key);
  const size_t begin = line == std::string::npos ? 0 : line + 1;
  return json_parse(r.out.substr(begin, r.out.find('\n', key) - begin), "bench step's line");
}

testing::PlanCase gpu_input(const GpuCase& k) {
  testing::PlanCase in(preset_config("tiny"));
  in.parallel.mode = k.mode;
  in.world = k.world;
  in.data.seq_len = 64;
  in.parallel.recompute = k.recompute;
  in.compute_dtype = DType::kBF16;
  in.parallel.grad_dtype = GradDType::kBF16;  // --grad-dtype auto on a GPU with one micro-batch
  return in;
}

TEST(CudaStepModel, OpListIsWhatTheGpuStepIssues) {
  REQUIRE_GPU();
  std::vector<GpuCase> cases = {{ParallelMode::kDdp, 1, Recompute::kNone}, {ParallelMode::kDdp, 1, Recompute::kFull}};
  if (gpu_count() >= 2)
    cases.insert(cases.end(),
                 {{ParallelMode::kDdp, 2, Recompute::kNone}, {ParallelMode::kFsdp, 2, Recompute::kSelective}});
  for (const GpuCase& k : cases) {
    SCOPED_TRACE(std::string(parallel_mode_name(k.mode)) + " x" + std::to_string(k.world));
    const testing::RunResult r = testing::run_anvil(bench_args(k));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::map<std::string, double> recorded, issued;
    const Json line = bench_line(r);  // named: a temporary's ops would die before the loop reads them
    for (const Json& op : line.at("op_times").at("ops"))
      recorded[op.at("op").get<std::string>()] = op.at("calls").get<double>();
    for (const StepItem& it : step_program(gpu_input(k).run()))
      if (it.kind == StepItem::Kind::kOp) issued[it.op.label()] += 1;
    EXPECT_EQ(issued, recorded);
  }
}

TEST(CudaStepModel, WritesAMeasuredTableThatPredicts) {
  REQUIRE_GPU();
  // 4096 rows: the tiny preset's smallest GEMM (4096x128x128) is 134 MFLOP, above the least
  // work the fit rates (plan/op_costs.cpp: smaller calls are timed by their launch).
  constexpr int64_t kRows = 4096;
  std::vector<std::string> args = bench_args({ParallelMode::kDdp, 1, Recompute::kNone}, kRows);
  const testing::RunResult probe = testing::run_anvil(args);
  ASSERT_EQ(probe.exit_code, 0) << probe.out;
  const std::string device = bench_line(probe).at("device").get<std::string>();
  if (!find_gpu_spec(device)) GTEST_SKIP() << device << " is not a GPU the step model knows";
  const std::string table = testing::temp_dir("op-table") + "/table.json";
  args.insert(args.end(), {"--write-op-table", table});
  const testing::RunResult r = testing::run_anvil(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const OpCostTable t = OpCostTable::load(table);
  EXPECT_TRUE(t.measured);
  // One measured rate at the MFLOP of each of the step's forward GEMMs (op_costs.h: a bf16
  // GEMM is keyed by its MFLOP per call; the built-in table's measured sizes, merged in, are
  // the H200 models' larger ones).
  testing::PlanCase in = gpu_input({ParallelMode::kDdp, 1, Recompute::kNone});
  in.data.seq_len = kRows;
  std::set<int64_t> sizes;
  for (const StepItem& it : step_program(in.run()))
    if (it.kind == StepItem::Kind::kOp && it.op.op == "linear_forward") sizes.insert(it.op.size);
  ASSERT_FALSE(sizes.empty());
  for (int64_t size : sizes) {
    int measured = 0;
    for (const OpRate& rate : t.rates) measured += rate.measured && rate.op == "linear_forward" && rate.size == size;
    EXPECT_EQ(measured, 1) << "one rate for the step's " << size << "-MFLOP GEMMs of 4096 rows";
  }
  const testing::RunResult again =
      testing::run_anvil({"bench", "step", "--device", "cuda", "--preset", "tiny", "--seq-len", std::to_string(kRows),
                          "--steps", "3", "--warmup", "1", "--op-table", table});
  ASSERT_EQ(again.exit_code, 0) << again.out;
  const Json p = bench_line(again).at("predicted");
  EXPECT_TRUE(p.at("op_table_measured").get<bool>());
  EXPECT_GT(p.at("tokens_per_s").get<double>(), 0);
}

}  // namespace
}  // namespace anvil
