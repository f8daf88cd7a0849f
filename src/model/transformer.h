// The transformer's forward and backward pass, written once against the op interface.
//
// One micro-batch of B sequences of T tokens (each one document, or documents packed in it:
// positions): embedding -> L blocks (model/block.h) -> final RMSNorm -> output projection
// fused with cross-entropy -> and back. Parameter gradients are
// accumulated into each unit's F32 gradient buffer, or overwrite it where the source says
// the buffer holds nothing of this step yet (UnitSource::overwrite_grads). The model never
// owns parameters: it asks a UnitSource for each unit's compute weights just before use and
// hands them back right after, and says when a unit's gradient is complete, which is where
// the parallel layer gathers shards (FSDP) or starts the gradient's all-reduce (DDP).
//
// Activations are allocated once, at construction, for the given micro-batch and sequence
// length: one buffer per entry of the table in model/activations.h, which the memory plan
// counts. The block loop applies the policies at its seams, each its own object:
// recomputation (model/recompute.h), the MLP's tiles (model/mlp_tiles.h), the offload ring
// (model/offload.h), the FP8 amax slots (model/fp8_slots.h), and context parallelism inside
// the blocks' attention (model/sequence_attention.h): each of the group's P ranks runs B
// sequences of T/P tokens (its slice), and the parameter gradients are this slice's share (the
// reduction across ranks adds the slices).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/activations.h"
#include "model/block.h"
#include "model/block_linears.h"
#include "model/config.h"
#include "model/fp8_slots.h"
#include "model/mlp_tiles.h"
#include "model/offload.h"
#include "model/params.h"
#include "model/recompute.h"
#include "model/sequence_attention.h"
#include "ops/ops.h"

namespace anvil {

// Where the pass gets each unit's weights and puts its gradients (model/params.h's units):
// the parameter store in training (parallel/param_store.h), the decoder's weights in
// inference (infer/decoder.h).
class UnitSource {
 public:
  virtual ~UnitSource() = default;
  virtual Tensor weights(int unit) = 0;    // compute dtype, the whole unit; valid until release
  virtual void release(int unit) = 0;      // the pass is done with the weights for now
  virtual Tensor grads(int unit) = 0;      // the whole unit, F32 (or BF16: GradDType); accumulated into
  // True when the unit's gradient buffer holds nothing of this step yet (the last step's
  // values): every part's first write overwrites instead of adding. Until grads_ready.
  virtual bool overwrite_grads(int unit) { (void)unit; return false; }
  virtual void grads_ready(int unit) = 0;  // this micro-batch's contribution is complete
  // The unit whose weights will be asked for next: a sharded source starts gathering it so
  // that the transfer overlaps the current unit's compute.
  virtual void prefetch(int unit) { (void)unit; }
};

// An objective whose per-token weights come from the forward's per-token losses (DPO,
// train/dpo.h: a sequence's coefficient is known once its log-probs are summed). The head runs
// the loss forward-only into token_losses (N) F32 (each token's -log p of its target, 0 where
// none; the forward's loss_sum += their sum), calls weigh(), which writes weights (N) F32 on the
// device, then the loss's forward and backward with those weights (weighted_sum (1) F32 += the
// weighted losses; the gradients are of that sum times loss_scale). The logits are computed
// twice, in chunks, and never held.
struct TokenWeighting {
  Tensor token_losses, weights, weighted_sum;
  std::function<void()> weigh;
};

// The policies a Transformer applies (besides its shapes).
struct ModelPolicies {
  Recompute recompute = Recompute::kNone;  // resolved: not kAuto
  int64_t mlp_tile = kMlpTileAuto;  // tokens per MLP tile of this rank's tokens (kMlpTileAuto: auto_mlp_tile)
  // The blocks' gradients as the source hands them (BF16: tiles sum into an F32 buffer, then
  // rounded once).
  DType grad_dtype = DType::kF32;
  Comm* context_parallel = nullptr;  // the group that shares each sequence (its world; null: none)
  Fp8Recipe fp8 = Fp8Recipe::kOff;   // the block linears' (model/block_linears.h)
  bool offload = false;              // the checkpoints in host memory (model/offload.h)
  // Expert parallel (model/expert_parallel.h; the table's ExpertLayout): the group that shares
  // each sparse layer's experts, and the run's comm; null: none.
  Comm* expert_group = nullptr;
  Comm* run_comm = nullptr;
};

class Transformer {
 public:
  // seq_len is the whole sequence's (context parallel: each rank holds seq_len / P of it).
  Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch, int64_t seq_len,
              const ModelPolicies& policies = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  // ids, targets: (B*T) I32 on the ops' device; targets[i] is the token that position i
  // predicts (-100: none). Context parallel: this rank's slice of every sequence, B*T/P
  // (positions, when given, still all B*T). loss_sum (1) F32 += the summed token losses; gradients are of
  // loss_sum * loss_scale. logits (B*T, V) F32, when given, receives the logits.
  // documents (ops/documents.h), when given: documents packed in each sequence, each token's
  // position in its document (ops.h's attention_forward) and their lengths: RoPE takes those
  // positions and attention stays within each document. Empty: each sequence is one
  // document (positions 0..T-1).
  // weighting, when given: the loss's tokens weighted by what the forward's token losses
  // decide (TokenWeighting).
  void forward_backward(UnitSource& source, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                        Tensor logits = Tensor(), const Documents& documents = Documents(),
                        const TokenWeighting* weighting = nullptr);

  // The forward and the loss only (evaluation): loss_sum (1) F32 += the summed token losses;
  // token_losses (N) F32, when given, receives each token's. Reads weights from `source` as
  // forward_backward does and touches no gradient.
  void forward_loss(UnitSource& source, Tensor ids, Tensor targets, Tensor loss_sum,
                    const Documents& documents = Documents(), Tensor token_losses = Tensor());

  // Called between the forward (through the final norm) and the loss and backward: the
  // step benchmark's phase clock.
  void set_forward_done_hook(std::function<void()> hook) { forward_done_ = std::move(hook); }

  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  int64_t mlp_tile() const { return tiles_.tile(); }  // tokens per MLP tile (this rank's tokens: untiled)
  // Qwen3-MoE: the last forward's routing, moe_stats (sparse layers, 2, experts) F32 (per expert
  // its top-k assignments and probability sum, model/activations.h); a dense model's is empty.
  Tensor router_stats() const { return one()[Activation::kMoeStats]; }
  // Expert parallel's exchange (its planned and largest rows); null without expert parallelism.
  const ExpertParallel* expert_parallel() const { return experts_.get(); }

 private:
  // Allocates one table entry and points the tensor (or tensors) it holds into it.
  void allocate(const ActivationBuffer& buffer);
  // The embedding and the blocks, into resid_[0..L], attending within `documents`.
  void forward_blocks(UnitSource& source, Tensor ids, const Documents& documents);
  // The final norm, the output projection and loss, and their backward: dx = d loss / d x_L.
  void head_forward_backward(UnitSource& source, Tensor targets, float loss_scale, Tensor loss_sum, Tensor logits,
                             const TokenWeighting* weighting);
  // Layer l's weights (or gradients: grads) from the source, its experts unit's included.
  BlockWeights block_weights(UnitSource& source, int64_t l, bool grads);
  void release_block(UnitSource& source, int64_t l);
  // The blocks' backward, last to first, each recomputed first as recompute_ says: dx = d loss / d x_0.
  void backward_blocks(UnitSource& source);
  const Activations& one() const { return sets_[0]; }  // the buffers the model has one of

  const ModelConfig& c_;
  const ParamTable& table_;
  Ops& ops_;
  int64_t B_, T_;  // T_: the sequence's tokens
  int64_t N_;      // this rank's tokens of the micro-batch
  RecomputePolicy recompute_;
  Fp8Slots fp8_slots_;
  BlockLinears linears_;
  MlpTiles tiles_;
  SequenceAttention attention_;
  OffloadRing offload_;
  Block block_;
  std::unique_ptr<ExpertParallel> experts_;  // expert parallel, else null
  std::vector<void*> buffers_;  // the activations' device allocations, one per table entry
  std::vector<Tensor> resid_;   // x_0 .. x_L, (N, C); offloaded: their ring slots
  std::vector<Activations> sets_;  // one per set of block buffers, each with the model's one-of-each
  std::function<void()> forward_done_;
};

}  // namespace anvil
