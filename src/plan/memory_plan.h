// The memory plan: every byte a rank allocates on its GPU, from (model, mode, world size,
// sequence length, micro-batch, recomputation), computed before anything is allocated.
//
// The trainer allocates these buffers (parallel/param_store.cpp, model/transformer.cpp);
// the formulas here follow the same layouts (ParamTable's padded units, the table of
// activation buffers in model/activations.h, which the model allocates from), so
// `anvil plan` without a GPU prints what a run will take.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/blocks.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/workspace.h"
#include "plan/parallel_section.h"
#include "sys/host_memory.h"

namespace anvil {

// A run as the plan reads it: the model, the resolved config's data section (its shapes:
// seq_len, micro_batch, grad_accum) and parallel section (train/config.h), the ranks and the
// device's compute dtype. plan_memory takes every setting resolved; advise() chooses the mode,
// and the recomputation and the MLP tile where they are auto.
struct PlannedRun {
  const ModelConfig& model;
  const DataSection& data;
  const ParallelSection& parallel;
  int world = 1;
  DType compute_dtype = DType::kBF16;  // a GPU's
};

// The sequence length of a run without data (anvil plan; anvil bench step's random blocks)
// where --seq-len leaves it to the data (0).
constexpr int64_t kSeqLenWithoutData = 2048;

struct MemoryPlan {
  ParallelMode mode = ParallelMode::kDdp;
  Recompute recompute = Recompute::kNone;
  int64_t mlp_tile = 0;     // tokens per MLP tile, resolved (the micro-batch's tokens: untiled)
  int64_t params = 0;       // masters, 4 bytes each (owned: whole units or one shard; DDP: also the compute weights;
                            // zero2: the compute weights whole, the rest of the masters one shard)
  int64_t grads = 0;        // gradients (owned), the reduce-scatter's outputs, and the store's pooled full-unit
                            // gradients and wire copies (parallel/store_pool.h)
  int64_t optimizer = 0;    // AdamW m and v
  int64_t weights = 0;      // the store's pooled buffers first taken by FSDP's gathers (zero2's whole weights are in params)
  int64_t activations = 0;  // saved activations, scratch, gradients of activations
  int64_t workspace = 0;    // the backend's workspace table (ops/workspace.h), the trainer's ids and scalars
  // Expert parallel: the experts' exchange (model/expert_parallel.h: the rows received, what the
  // local experts' backward reads, the all_to_all's buffers) at planned_expert_rows.
  int64_t exchange = 0;
  int64_t total() const { return params + grads + optimizer + weights + activations + workspace + exchange; }
  // Host memory, not in total(): the snapshot of an asynchronous save (train/checkpoint_async.h),
  // this rank's slice of every unit's masters, AdamW m and v (12 bytes an element).
  int64_t host_snapshot = 0;
  // Host memory, pinned, not in total(): the offloaded activations (model/activations.h).
  int64_t host_activations = 0;
};

MemoryPlan plan_memory(const PlannedRun& run);

// The shapes of the backend's workspaces (ops/workspace.h) for one rank's micro-batch, which
// the plan counts and the Trainer reserves.
WorkspaceShape workspace_shape(const ModelConfig& c, int64_t micro_batch, int64_t seq_len, int64_t context_parallel,
                               Fp8Recipe fp8);
// MemoryPlan::host_snapshot of a rank of the table's world.
int64_t host_snapshot_bytes(const ParamTable& table);

struct PlanAdvice {
  MemoryPlan ddp, zero2, fsdp;  // with the recomputation chosen for each
  const MemoryPlan& of(ParallelMode mode) const;  // a run mode's (kRunModes)
  bool fits = false;          // whether any mode fits
  ParallelMode mode = ParallelMode::kDdp;  // the chosen mode (when fits)
  std::string flags;          // when fits: the chosen mode and recomputation as anvil train's flags
  std::string message;        // why that choice, or (nothing fits) what would make the run fit
};
// Predicted tokens/s of the run as a plan resolved it (its mode, recomputation and MLP tile).
using PlanSpeed = std::function<double(const MemoryPlan&)>;
// Every run mode (kRunModes), whatever run.parallel.mode says. Recompute::kAuto: the fastest setting that fits
// in gpu_bytes, per mode (none, then selective, then full; offloading only full); any other
// setting is planned as given. mlp_tile kMlpTileAuto: untiled where that plan fits, else
// auto_mlp_tile's tiles (for each recomputation tried); MemoryPlan::mlp_tile says which.
// The mode: of those that fit, the one `speed` predicts fastest (the first of kRunModes on a
// tie); without a prediction (an empty speed) the first of kRunModes that fits: ddp, zero2,
// fsdp. When none fits, the message
// names what would: fsdp on more GPUs (the --nproc), offloading, or a shorter sequence where
// the activations are the cause.
// A plan fits when its total plus kPlanReserve (the CUDA context, allocator slack) is at
// most the GPU's memory.
constexpr int64_t kPlanReserve = 1ll << 30;
constexpr int64_t kH200Bytes = 150110011392;  // an H200 as CUDA reports it (139.8 GiB)
bool plan_fits(const MemoryPlan& p, int64_t gpu_bytes);
PlanAdvice advise(const PlannedRun& run, int64_t gpu_bytes, const PlanSpeed& speed = {});

// Why this machine's host memory cannot hold what the plan puts there, or "": the offloaded
// activations, and the snapshot of asynchronous saves when `async_saves`, for each of the
// machine's local_ranks, against m.available.
std::string host_memory_refusal(const MemoryPlan& p, bool async_saves, int local_ranks, const HostMemory& m);

// A readable table of every mode for `anvil plan` and for the trainer's refusal.
std::string plan_table(const PlanAdvice& a, const PlannedRun& run, int64_t gpu_bytes);

}  // namespace anvil
