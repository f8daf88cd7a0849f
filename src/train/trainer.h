// Trainer: one rank's model, parameters and optimizer, and the training step.
//
// A step is: forward+backward of each micro-batch (gradient accumulation), the loss
// normalised by the count of target tokens of the whole step, global-norm clipping and
// AdamW, which zeroes the gradients it applied. It is the loop of the reference trainer
// (loss, backward, clip_grad_norm_(1.0), AdamW step, zero_grad), with accumulation. The
// update may still run on the GPU when step() returns (overlapped with the next forward);
// everything that reads parameters or optimizer state from the host waits for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "optim/adamw.h"
#include "ops/ops.h"
#include "parallel/param_store.h"
#include "plan/memory_plan.h"

namespace anvil {

// Token blocks of one micro-batch: ids (B*T) and, optionally, labels (B*T, -100 where no
// loss is wanted; empty: labels = ids). Position t is trained to predict label t+1.
struct TokenBatch {
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
};

struct TrainerSettings {
  std::string device = "cpu";  // cpu | cuda
  int device_index = 0;
  ParallelMode mode = ParallelMode::kDdp;  // kAuto: ddp when the plan fits, else fsdp
  int64_t micro_batch = 1, seq_len = 2048;
  Recompute recompute = Recompute::kNone;  // kAuto: the fastest the plan fits in the GPU's memory
  bool fsdp_defer_sync = false;  // FSDP: reduce-scatter once per step, not per micro-batch
  DType reduce_dtype = DType::kF32;  // gradient all-reduce / reduce-scatter in F32 or BF16
  bool overlap_optimizer = true;  // the update overlaps the next forward (parallel/param_store.h)
  int64_t grad_accum = 1;  // micro-batches per step (each step() call must pass this many)
  GradDType grad_dtype = GradDType::kAuto;  // model/params.h
  OptimizerConfig optim;
  int64_t total_steps = 1;  // for the LR schedule
};

// Seconds per phase of the last step, with the device synchronised at each boundary (only
// when timing is enabled: the step benchmark).
struct StepTiming {
  double forward = 0, backward = 0, communication = 0, optimizer = 0;
};

struct StepStats {
  double loss = 0;       // mean over the step's target tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t target_tokens = 0;
};

class Trainer {
 public:
  // comm: null for a single process; otherwise this rank's group (ops on its device).
  // weights: the masters, read unit by unit, each rank only what it owns.
  Trainer(const ModelConfig& config, const UnitReader& weights, const TrainerSettings& settings,
          Comm* comm = nullptr);
  Trainer(const ModelConfig& config, const HostUnits& weights, const TrainerSettings& settings, Comm* comm = nullptr)
      : Trainer(config, host_units_reader(weights), settings, comm) {}
  ~Trainer();

  StepStats step(const std::vector<TokenBatch>& micro_batches);
  // Forward only, no gradient or optimizer state touched (evaluation, train/eval.h): this
  // rank's summed token loss and count of target tokens of one micro-batch.
  struct LossSum {
    double sum = 0;
    int64_t tokens = 0;
  };
  LossSum forward_loss(const TokenBatch& batch);
  // Loss, gradients (left in the store) and optionally logits of one micro-batch, no update.
  double loss_and_grads(const TokenBatch& batch, std::vector<float>* logits);

  // The memory plan of this rank (checked against the GPU's memory before any allocation).
  const MemoryPlan& plan() const { return plan_; }
  Recompute recompute() const { return settings_.recompute; }  // resolved: never kAuto
  ParallelMode mode() const { return settings_.mode; }  // resolved (never kAuto)
  DType grad_dtype() const { return grad_dtype_; }      // resolved: F32 or BF16
  // Why this mode: "as asked", or the rule's reason when the mode was auto.
  const std::string& mode_reason() const { return mode_reason_; }

  void enable_timing(bool on) { timing_ = on; }
  const StepTiming& last_timing() const { return timing_result_; }

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }  // resuming from a checkpoint
  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  ParamStore& store() { return *store_; }
  Ops& ops() { return *ops_; }
  HostUnits masters() { return store_->download_masters(); }  // every rank must call
  HostUnits grads() const;

 private:
  // Uploads ids/targets of a micro-batch; returns its count of target tokens.
  int64_t upload_batch(const TokenBatch& b);
  int64_t global_sum(int64_t local, const char* what);

  ModelConfig config_;
  TrainerSettings settings_;
  Comm* comm_;
  ParamTable table_;
  std::unique_ptr<Ops> ops_;
  MemoryPlan plan_;
  std::string mode_reason_ = "as asked";
  DType grad_dtype_ = DType::kF32;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<Transformer> model_;
  Tensor ids_, targets_, loss_sum_;
  std::vector<void*> buffers_;
  int64_t step_ = 0;
  bool timing_ = false;
  StepTiming timing_result_;
  double phase_start_ = 0;
  double lap();  // seconds since the last lap, after a device sync
};

}  // namespace anvil
