// The transformer's forward and backward pass, written once against the op interface.
//
// One micro-batch of B sequences of T tokens (each one document, or documents packed in it:
// positions): embedding -> L blocks -> final RMSNorm -> output projection fused with
// cross-entropy -> and back. Parameter gradients are
// accumulated into each unit's F32 gradient buffer, or overwrite it where the source says
// the buffer holds nothing of this step yet (UnitSource::overwrite_grads). The model never
// owns parameters: it asks a UnitSource for each unit's compute weights just before use and
// hands them back right after, and says when a unit's gradient is complete, which is where
// the parallel layer gathers shards (FSDP) or starts the gradient's all-reduce (DDP).
//
// Activations are allocated once, at construction, for the given micro-batch and sequence
// length: one buffer per entry of the table in model/activations.h, which the memory plan
// counts. With Recompute::kFull only each block's input is kept; the block's forward runs
// again, into one shared set of buffers, just before its backward. With
// Recompute::kSelective every block keeps what the GEMMs and attention wrote (qkv before
// qk-norm and RoPE, attention's output, the residual sum, gate_up) and the statistics;
// the element-wise outputs (both RMSNorms', qk-norm + RoPE's) live in one shared set and
// are recomputed, by the same kernels from the same inputs (the same bits), before the
// block's backward.
//
// The MLP runs in sequence tiles when the table says so (model/activations.h, mlp_tile;
// ALST's TiledMLP): per tile of tokens the gate/up GEMM, the SwiGLU and the down GEMM, and in
// the backward each tile's gate_up recomputed from h2 before its gradients; the weight
// gradients add up over the tiles (rows of the same sums in the same order on the CPU: the
// same bits as untiled). Untiled, gate_up is kept per block as above.
//
// Offloaded activations (--offload-activations, Recompute::kFull): the checkpoints x_1 ..
// x_{L-1} live in host memory and pass through a ring of device buffers (model/activations.h):
// each is copied to the host on the copy queue (ops.h) right after the block that writes it,
// and a block waits for the copy out of its ring slot before overwriting it; in the backward
// each comes back one block ahead of its use (those the forward's last blocks left in the
// ring need no copy), and the block waits for it. The same ops on the same values: the same
// bits as without.
//
// Context parallel (model/context_parallel.h): each of the group's P ranks runs B sequences of
// T/P tokens (its slice); attention's all-to-alls give qk-norm, RoPE and attention all T
// tokens of H/P and KV/P heads, and the parameter gradients are this slice's share (the
// reduction across ranks adds the slices).
//
// With an FP8 recipe (`--fp8`, ops/fp8_recipe.h) the blocks' seven linear layers (the fused
// qkv, o, the fused gate_up, down) run their forward and both backward GEMMs through the ops'
// linear_fp8_*; the embedding, the head, norms, attention and the loss are unchanged.
// Tensorwise, each block's four linears have an amax slot (ops/fp8_recipe.h's Fp8Amax): x's
// and w's amax, taken once in the forward and read by the backward's casts of x^T and w^T
// (the same tensors: recomputed ones are the same bits); x's written by the op that makes x
// where one does (RMSNorm before qkv and gate_up, SwiGLU before down), so no cast of x or w
// reads its tensor for the amax but the forward's of w and of attention's output. The MLP's
// tiles share w's amax; each tile's x takes its own (a tile's amax is not the tensor's).
// ANVIL_FP8_AMAX_REUSE=0 (read when the model is built): every amax taken by the cast that
// needs it, as before the slots; the same bits either way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/context_parallel.h"
#include "model/params.h"
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

class Transformer {
 public:
  // mlp_tile: tokens per MLP tile of this rank's tokens (kMlpTileAuto: auto_mlp_tile);
  // grad_dtype: the blocks' gradients as the source hands them (BF16: tiles sum into an F32
  // buffer, then rounded once); context_parallel: the group that shares each sequence (its
  // world; null: none); seq_len is the whole sequence's; offload: the checkpoints in host
  // memory (above).
  Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch,
              int64_t seq_len, Recompute recompute, int64_t mlp_tile = kMlpTileAuto,
              DType grad_dtype = DType::kF32, Comm* context_parallel = nullptr,
              Fp8Recipe fp8 = Fp8Recipe::kOff, bool offload = false);
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
  void forward_backward(UnitSource& source, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                        Tensor logits = Tensor(), const Documents& documents = Documents());

  // The forward and the loss only (evaluation): loss_sum (1) F32 += the summed token losses.
  // Reads weights from `source` as forward_backward does and touches no gradient.
  void forward_loss(UnitSource& source, Tensor ids, Tensor targets, Tensor loss_sum,
                    const Documents& documents = Documents());

  // Called between the forward (through the final norm) and the loss and backward: the
  // step benchmark's phase clock.
  void set_forward_done_hook(std::function<void()> hook) { forward_done_ = std::move(hook); }

  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return Ta_; }
  int64_t mlp_tile() const { return mlp_tile_; }  // tokens per MLP tile (this rank's tokens: untiled)

 private:
  // One set of block buffers (model/activations.h).
  struct BlockActs {
    Tensor h1, rstd1, qkv_raw, qkv, rstd_qk, att, lse, x_mid, h2, rstd2, gate_up;
    Tensor& of(Activation what);
  };
  // Attention's layout (all Ta_ tokens of Ha_ + 2 KVa_ heads) of a buffer of the section.
  Shape qkv_rows() const { return {B_ * Ta_, Ha_ + 2 * KVa_, c_.head_dim}; }
  Shape qkv_seqs() const { return {B_, Ta_, Ha_ + 2 * KVa_, c_.head_dim}; }
  Shape att_seqs() const { return {B_, Ta_, Ha_, c_.head_dim}; }
  std::vector<int64_t> qkv_segments() const;  // the q, k and v heads' widths of a qkv row
  // Attention's output in this rank's tokens (N_, H*hd): a.att, or under context parallel
  // a.att exchanged into the staging buffer.
  Tensor att_tokens(BlockActs& a);
  // Allocates one table entry and points the tensor (or tensors) it holds into it.
  void allocate(const ActivationBuffer& buffer);
  Tensor& one_of_each(Activation what);  // the model's tensor of an activation it has one of
  void upload_rope_tables();
  BlockActs& block_acts(int64_t layer);  // the set a block's forward writes and its backward reads
  // The embedding and the blocks, into resid_[0..L]; documents_ = documents for the pass.
  void forward_blocks(UnitSource& source, Tensor ids, const Documents& documents);
  // The final norm, the output projection and loss, and their backward: dx_ = d loss / d x_L.
  void head_forward_backward(UnitSource& source, Tensor targets, float loss_scale, Tensor loss_sum, Tensor logits);
  // The blocks' backward, last to first, each recomputed first as recompute_ says: dx_ = d loss / d x_0.
  void backward_blocks(UnitSource& source);
  // x_out empty (kFull, before the block's backward): stops at gate_up, all the backward reads.
  void block_forward(Tensor weights, Tensor x_in, BlockActs& a, Tensor x_out);
  // x_out = the MLP of a.h2 (before the residual add), untiled or tile by tile.
  void mlp_forward(Tensor weights, BlockActs& a, Tensor x_out);
  // dx_ (d loss / d the MLP's output) -> dh_ (d loss / d h2) and the MLP's weight gradients.
  void mlp_backward(Tensor weights, Tensor grads, bool accumulate, BlockActs& a);
  void mlp_backward_tiled(Tensor weights, Tensor grads, bool accumulate, BlockActs& a);
  void qk_norm_rope_forward(Tensor weights, BlockActs& a);
  // accumulate: add to the unit's gradients (false: overwrite them, UnitSource::overwrite_grads)
  void block_backward(Tensor weights, Tensor grads, bool accumulate, Tensor x_in, BlockActs& a);
  void recompute_elementwise(Tensor weights, Tensor x_in, BlockActs& a);  // Recompute::kSelective
  // The blocks' seven linear layers (qkv, o, gate_up, down): the ops' linear_* or, with fp8_,
  // their FP8 forms (ops/fp8_recipe.h). dx is overwritten.
  // `linear` names the layer (its amax slot in layer_'s block); x_known / w_known: its slot
  // holds that operand's amax already (Fp8Amax).
  enum Linear { kQkvLinear, kOLinear, kGateUpLinear, kDownLinear, kBlockLinears };
  void block_linear(Linear linear, Tensor y, Tensor x, Tensor w, Tensor bias, bool x_known, bool w_known);
  void block_linear_dx(Linear linear, Tensor dx, Tensor dy, Tensor w);
  void block_linear_dw(Linear linear, Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate, bool x_known);
  // block_linear_dw then block_linear_dx of one layer (FP8: one op, dy quantized once).
  void block_linear_backward(Linear linear, Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                             bool accumulate);
  // The linear's amax slot in layer_'s block (none without slots), and its x's amax alone: the
  // output a producer writes it into (none without slots or when `when` is false).
  Fp8Amax fp8_amax(Linear linear, bool x_known, bool w_known) const;
  Tensor x_amax(Linear linear, bool when = true) const;
  // The offload (x_l offloaded: 0 < l < L). Ring slot s's copies mark copy slots 2s (out)
  // and 2s + 1 (back).
  bool offloaded(int64_t l) const { return offload_ && l > 0 && l < c_.num_layers; }
  int ring_slot(int64_t l) const { return static_cast<int>((l - 1) % static_cast<int64_t>(ring_.size())); }
  void before_write(int64_t l);  // forward: x_l's ring slot's last copy out is done
  void after_write(int64_t l);   // forward: x_l to the host
  void prefetch_residual(int64_t l);  // backward: x_l back into its ring slot, where needed
  void before_read(int64_t l);        // backward: x_l is back

  const ModelConfig& c_;
  const ParamTable& table_;
  Ops& ops_;
  int64_t B_, T_, N_;  // T_: this rank's tokens of a sequence (all of it without context parallel)
  int64_t Ta_;          // attention's: the sequence's
  int Ha_, KVa_;        // attention's heads: this rank's share
  ContextParallel cp_;
  Recompute recompute_;
  int64_t mlp_tile_;  // tokens per MLP tile; N_: untiled
  Fp8Recipe fp8_;
  Tensor fp8_amax_;    // (L, kBlockLinears, 2) F32: each block linear's x and w amax; empty: no slots
  int64_t layer_ = 0;  // the block the pass is in
  DType compute_dtype_;
  std::vector<void*> buffers_;  // the activations' allocations, one per table entry
  std::function<void()> forward_done_;

  std::vector<Tensor> resid_;  // x_0 .. x_L, (N, C); offloaded: their ring slots
  bool offload_;
  std::vector<Tensor> ring_;         // offload: the device's x_ring buffers
  std::vector<void*> host_resid_;    // offload: x_l's host buffer at l (else null)
  std::vector<BlockActs> acts_;  // the sets of block buffers: one per layer, or one (kFull)
  Tensor rope_cos_, rope_sin_;  // (Ta_, hd/2) F32
  Documents documents_;  // the pass's documents (forward_backward), or none
  Tensor act_, d_act_, d_gate_up_, gate_up_tile_, mlp_dw_, d_att_, d_qkv_, d_qkv_raw_, dx_, dh_, h_final_,
      rstd_final_, cp_send_, cp_recv_;
};

}  // namespace anvil
