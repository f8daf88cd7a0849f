// Trainer: one rank's model, parameters and optimizer, and the training step.
//
// A step is: forward+backward of each micro-batch (gradient accumulation), the loss
// normalised by the count of target tokens of the whole step, global-norm clipping and
// AdamW, which zeroes the gradients it applied. It is the loop of the reference trainer
// (loss, backward, clip_grad_norm_(1.0), AdamW step, zero_grad), with accumulation. The
// update may still run on the GPU when step() returns (overlapped with the next forward);
// everything that reads parameters or optimizer state from the host waits for it.
// Context parallel (--context-parallel P, model/context_parallel.h): the P ranks of a group
// are given the same micro-batches and each runs its slice of every sequence; the target
// count and the loss are summed over all ranks, each slice's once, so the gradients the
// ranks' reduction adds up are one rank's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/blocks.h"
#include "model/config.h"
#include "model/params.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "parallel/param_store.h"
#include "plan/memory_plan.h"
#include "train/dpo.h"
#include "train/resolve.h"
#include "train/router_stats.h"

namespace anvil {

// Seconds per phase of the last step, with the device synchronised at each boundary (only
// when timing is enabled: the step benchmark).
struct StepTiming {
  double forward = 0, backward = 0, communication = 0, optimizer = 0;
};

struct StepStats {
  double loss = 0;       // mean over the step's target tokens (dpo: over its pairs)
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t target_tokens = 0;  // dpo: the step's pairs
  DpoSums dpo;                // dpo: the step's sums over its pairs, all ranks (TRL's metrics)
  RouterStats router;         // Qwen3-MoE: the step's routing, all ranks (train/router_stats.h)
};

class Trainer {
 public:
  // settings: the run's config with every auto resolved (train/resolve.h; make_trainer in
  // train/open_run.h resolves and builds). weights: the masters, read unit by unit, each rank
  // only what it owns. comm: null for a single process; otherwise this rank's group (ops on
  // its device). ops: this rank's device.
  Trainer(const ModelConfig& config, const UnitReader& weights, const ResolvedConfig& settings, Comm* comm,
          std::unique_ptr<Ops> ops);
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
  // dpo: the mean pair loss, and the sums over the batch's pairs in *sums when given.
  double loss_and_grads(const TokenBatch& batch, std::vector<float>* logits, DpoSums* sums = nullptr);

  // DPO (train/dpo.h): the reference's log-probs of every pair of the data, by pair index
  // (PreferencePair::index).
  void set_reference(std::vector<double> chosen, std::vector<double> rejected);
  // Forward only: the completion log-probs of each pair of one micro-batch, in its order (the
  // reference pass, evaluation); nothing else is touched.
  std::vector<PairLogps> pair_logps(const TokenBatch& batch);
  DpoSums global_sums(const DpoSums& mine);  // summed over the ranks (every rank calls it)

  // The memory plan of this rank (checked against the GPU's memory before any allocation).
  const MemoryPlan& plan() const { return plan_; }
  const ResolvedConfig& settings() const { return settings_; }
  Recompute recompute() const { return settings_.config.parallel.recompute; }  // never kAuto
  ParallelMode mode() const { return settings_.config.parallel.mode; }         // never kAuto
  DType grad_dtype() const { return grad_dtype_; }                             // F32 or BF16
  // Expert parallel's exchange of this rank (model/expert_parallel.h); null without it.
  const ExpertParallel* expert_parallel() const { return model_->expert_parallel(); }

  void enable_timing(bool on) { timing_ = on; }
  const StepTiming& last_timing() const { return timing_result_; }

  // The data's ranks: the ranks with micro-batches of their own (context parallel: groups).
  int data_world() const;
  int data_rank() const;

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }  // resuming from a checkpoint
  const ModelConfig& config() const { return config_; }
  const ParamTable& table() const { return table_; }
  ParamStore& store() { return *store_; }
  Ops& ops() { return *ops_; }
  HostUnits masters() { return store_->download_masters(); }  // every rank must call
  // The masters in the layout of `whole`, the whole model's table on these ranks: masters(),
  // with expert parallel every rank's experts gathered (a host exchange). Every rank must call.
  HostUnits whole_masters(const ParamTable& whole);
  HostUnits grads() const;

 private:
  // Uploads ids/targets (and positions, where documents are packed) of a micro-batch, checked
  // against the vocabulary; a target is -100 where the next token starts a document.
  void upload_batch(const TokenBatch& b);
  Documents documents_of(const TokenBatch& b) const;  // positions_ and lengths where a sequence holds documents
  int64_t global_sum(int64_t local, const char* what);
  int64_t slice_targets(const TokenBatch& b) const;  // the target tokens of this rank's slice
  bool dpo() const { return settings_.config.data.objective == Objective::kDpo; }
  // The step's count the loss is normalised by, all ranks: target tokens, or (dpo) pairs.
  int64_t step_count_of(const std::vector<TokenBatch>& micro_batches);
  // One uploaded micro-batch's forward and backward under DPO: the pairs' losses (of the mean
  // over `pairs` pairs) weigh the head's tokens (train/dpo.h); their sums are added to `sums`.
  void dpo_forward_backward(const TokenBatch& b, int64_t pairs, DpoSums& sums);
  // Qwen3-MoE: the routing of the micro-batch the model ran last (its moe_stats) into `stats`.
  void add_router_stats(RouterStats& stats);

  ModelConfig config_;
  ResolvedConfig settings_;
  Comm* comm_;
  ParamTable table_;
  // Expert parallel (model/expert_parallel.h): the group exchanging tokens where it is not the
  // run's comm, and the ranks holding this rank's experts where they are several.
  std::unique_ptr<Comm> expert_group_, expert_replicas_;
  std::unique_ptr<Ops> ops_;
  MemoryPlan plan_;
  DType grad_dtype_ = DType::kF32;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<Optimizer> optimizer_;  // on store_'s owned units
  std::unique_ptr<Transformer> model_;
  Tensor ids_, targets_, positions_, loss_sum_;
  Tensor token_losses_, token_weights_, weighted_sum_;  // dpo: TokenWeighting's buffers
  std::vector<double> ref_chosen_, ref_rejected_;       // dpo: by pair index  // ids_, targets_: this rank's slice; positions_: all
  struct {
    int64_t begin = 0, end = 0;
  } slice_;  // this rank's positions of each sequence
  std::vector<void*> buffers_;
  int64_t step_ = 0;
  bool timing_ = false;
  StepTiming timing_result_;
  double phase_start_ = 0;
  double lap();  // seconds since the last lap, after a device sync
};

}  // namespace anvil
