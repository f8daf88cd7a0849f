// The ops a training step issues, in order: what the step model (plan/step_model.h) prices.
//
// step_program() walks one optimizer step as the trainer runs it (train/trainer.cpp: the
// micro-batches, then the optimizer), the model (model/transformer.cpp: the embedding, the
// blocks' forward, recomputation and backward, the head) and the parameter store
// (parallel/replicated_store.cpp, sharded_store.cpp, grad_reducer.cpp: gathers, gradient
// reductions and their wire copies), and lists every op with the label the op front gives
// it (ops/ops.cpp: "linear_forward 2048x4096x2048"), every collective with its bytes, and
// every point where the main queue waits for a collective. Under --expert-parallel N (the
// rank's table: model/params.h, ExpertLayout) the sparse layers' exchange at the balanced
// routing (each rank's n K rows, n K / N to each member; model/expert_parallel.h), its
// all_to_alls waited on at once, and the experts units' all-reduce over their replicas. tests/test_step_model.cpp holds
// the op list against what the CPU backend records in a real step (Runtime::take_op_times),
// so the two cannot drift apart unnoticed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/bench.h"
#include "plan/memory_plan.h"

namespace anvil {

// One op call: its name and shape as the op front labels it, the key the cost table looks
// up its rate by, and the work it is priced by (FLOPs for the matrix products and
// attention, bytes moved to and from memory for the rest). An FP8 linear is priced by both:
// its GEMM's FLOPs, and the bytes its operands' casts move (cast_bytes, at the table's
// fp8_cast rate for its rows).
struct OpCall {
  std::string op;     // "linear_forward"
  std::string shape;  // "2048x4096x2048"
  int64_t size = 0;   // rows (tokens) of a per-token op and an FP8 linear; a bf16 linear's and
                      // the fused cross-entropy's MFLOP per call; attention: the sequence
                      // length T it attends over; elements of the optimizer's
  double flops = 0, bytes = 0;
  double cast_bytes = 0;  // an FP8 linear's casts: amax passes, the casts' reads and FP8 writes
  // The op whose rates price this call where the table has none of its own (a MoE op's
  // kin: linear_* for the experts' GEMMs, priced by FLOPs; embedding_forward, a gather of
  // rows by index, or rmsnorm_forward, a reduction per row, for the routing's ops), or "".
  std::string kin = "";
  std::string label() const { return op + " " + shape; }
};

enum class StepPhase { kForward, kBackward, kOptimizer };

// One entry of the step in issue order: an op on the main queue, a collective (ordered
// after everything queued before it, as the NCCL comm orders it; `bytes` is nccl-tests'
// size: the gathered output, the reduce-scatter input, the all-reduced buffer), or the
// main queue waiting for the collective `id`.
struct StepItem {
  enum class Kind { kOp, kCollective, kWait } kind = Kind::kOp;
  StepPhase phase = StepPhase::kForward;
  OpCall op;
  BenchCollective collective = BenchCollective::kAllReduce;  // all-reduce, all-gather or reduce-scatter
  // Expert parallel: the experts' all_to_all of rows in an expert-parallel group (model/
  // expert_parallel.h; `collective` unused), priced as nccl-tests' alltoall: (n-1)/n of its bytes.
  bool all_to_all = false;
  int ranks = 0;  // the ranks the collective spans: 0, every rank of the run; else its group's
  int64_t bytes = 0;
  int id = 0;
};

// The step of a run whose every setting is resolved (its data section's grad_accum micro-batches).
std::vector<StepItem> step_program(const PlannedRun& run);

}  // namespace anvil
