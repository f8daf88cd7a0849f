// The parallel section of the run's config (train/config.h): how the ranks share the model
// and its gradients, and what each keeps in memory. It lives in plan/, the lowest layer that
// reads it: the memory plan and the step model read it as the trainer runs it. Here too the
// context-parallel rule, which anvil train and anvil plan check alike.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/fp8_recipe.h"
#include "parallel/mode.h"

namespace anvil {

struct ParallelSection {
  ParallelMode mode = ParallelMode::kAuto;  // auto: of those the plan fits, the faster predicted (advise)
  DType reduce_dtype = DType::kF32;         // gradient reduction: F32 or BF16
  GradDType grad_dtype = GradDType::kAuto;  // the blocks' gradients (model/params.h)
  Recompute recompute = Recompute::kAuto;   // auto: the fastest the plan fits
  int64_t mlp_tile = kMlpTileAuto;          // tokens per MLP tile (model/activations.h); 0: auto
  bool offload_activations = false;         // the checkpoints in host memory (model/activations.h; full)
  bool overlap_optimizer = true;  // AdamW beside the next forward (optim/optimizer.h)
  bool fsdp_defer_sync = false;   // FSDP: reduce-scatter once per step, not per micro-batch
  // The ranks that share each sequence (model/context_parallel.h): every rank today.
  int64_t context_parallel = 1;
  // The ranks that share each sparse layer's experts, E/N each (model/expert_parallel.h); 1: none.
  int64_t expert_parallel = 1;
  Fp8Recipe fp8 = Fp8Recipe::kOff;  // the blocks' linear layers in FP8 (ops/fp8_recipe.h)
  bool operator==(const ParallelSection&) const = default;
};

// The blocks' gradient dtype of a resolved section (kInternal while it is auto).
DType blocks_grad_dtype(const ParallelSection& p);

// The context-parallel rule: Ulysses (model/context_parallel.h) splits each sequence and the
// attention heads over P ranks, which are every rank of the run (no data-parallel groups beside
// them yet). P is at least 1, and 1 or `world`; ranks_flag names the flag that sets the ranks
// (--nproc-per-node; anvil plan's --nproc). kUsage, naming the fix.
void check_context_parallel_world(int64_t P, int world, const std::string& ranks_flag);
// The whole rule: P also divides the model's key/value heads and the sequence.
void check_context_parallel(int64_t P, int world, const ModelConfig& model, int64_t seq_len,
                            const std::string& ranks_flag);

}  // namespace anvil
