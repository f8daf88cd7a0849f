// The activation buffers of one Transformer, declared once: the model allocates one buffer per
// entry, in this order, and points its tensors into them (model/transformer.cpp: an
// Activations array per set of block buffers, indexed by the entry's kind); the memory
// plan (plan/memory_plan.h) counts the sum of the same entries, so the two cannot disagree
// (llm.c's fill_in_activation_sizes / malloc_and_point_activations).
//
// N = micro-batch B x sequence length T tokens; C hidden, I intermediate, H query heads, KV
// key/value heads of hd dimensions, L layers; "cd" the compute dtype.
//   x_0 .. x_L  (N, C) cd       the residual stream: block l's input, and the last block's
//                               output; every policy keeps all of them.
// Offloaded (--offload-activations, kFull only): x_1 .. x_{L-1}, the blocks' checkpoints, are
// host buffers (pinned: the copy queue's, ops/runtime.h), and the device holds them in a ring:
//   x_ring      (N, C) cd       min(kOffloadRing, L-1) of them: x_l in ring slot (l-1) % ring,
//                               copied to the host after the block that writes it, and back
//                               one block ahead of its backward (model/offload.h).
// A set of block buffers: one per block (kNone, kSelective), or one that every block's
// forward runs again into just before its backward (kFull):
//   h1         (N, C) cd        the attention RMSNorm's output     [kSelective: one shared set]
//   rstd1      (N) F32          its reciprocal RMS
//   qkv_raw    (N, H+2KV, hd)   the q/k/v projection, before qk-norm and RoPE
//   qkv        (B, T, H+2KV, hd) after qk-norm and RoPE            [kSelective: one shared set]
//   rstd_qk    (N, H+KV) F32    qk-norm's reciprocal RMS per head
//   att        (N, H*hd) cd     attention's output
//   lse        (B, H, T) F32    attention's log-sum-exp
//   x_mid      (N, C) cd        the residual after attention
//   h2         (N, C) cd        the MLP RMSNorm's output           [kSelective: one shared set]
//   rstd2      (N) F32          its reciprocal RMS
//   gate_up    (N, 2I) cd       the gate/up projection             [not with the MLP tiled]
// A sparse layer's (Qwen3-MoE; E experts, K of them per token, Im each expert's intermediate
// size) in place of gate_up: the routing and what the experts' backward reads. A row of the
// experts' buffers is one (token, choice) assignment, sorted by expert.
//   router_probs (N, E) F32     the router's softmax
//   topk_idx   (N, K) I32       each token's experts, most probable first (ties: lower index)
//   topk_w     (N, K) F32       their routing weights (renormalised: norm_topk_prob)
//   moe_order  (N, K) I32       sorted row -> its assignment (token * K + choice)
//   moe_rows   (N, K) I32       assignment -> its sorted row
//   moe_offsets (E + 1) I32     expert e's rows: [offsets[e], offsets[e + 1])
//   moe_gate_up (N, K, 2Im) cd  the experts' gate/up projections of their rows
//   moe_y      (N, K, C) cd     the experts' outputs, before the routing weights
// Under kFull the one set holds a dense layer's and a sparse layer's buffers where the model
// has both kinds; else each set those of its layer's kind.
// kSelective recomputes the shared three (and their statistics, the same bits) before each
// block's backward; the shared set comes before the per-block ones.
// One of each, under every policy (M: the MLP's tile of tokens, or N untiled):
//   act, d_act (M, I) cd        the SwiGLU's output (rewritten by its backward) and gradient
//   d_gate_up  (M, 2I) cd       gradients of the activations, reused by every block
//   gate_up_tile (M, 2I) cd     tiled only: one tile's gate_up, its forward's and, recomputed
//                               from h2, its backward's (ALST's TiledMLP)
//   mlp_dw     (3 I C) F32      tiled with bf16 gradients only: the MLP's weight gradients
//                               summed over the tiles, rounded once into the bf16 gradient
//   d_att      (N, H*hd) cd
//   d_qkv      (B, T, H+2KV, hd) cd
//   d_qkv_raw  (N, H+2KV, hd) cd
//   dx, dh     (N, C) cd        d loss / d the residual stream, and of a norm's output
//   h_final    (N, C) cd        the final RMSNorm's output
//   rstd_final (N) F32          its reciprocal RMS
//   rope_cos, rope_sin (T, hd/2) F32  the RoPE tables
//   fp8_amax   (L, 4, 2) F32    tensorwise FP8 only: each block linear's x and w amax
//                               (model/fp8_slots.h)
// Sparse layers (Qwen3-MoE), one of each (the dense MLP's act, d_act and d_gate_up only where
// the model has a dense layer):
//   router_logits, d_router_logits (N, E) cd
//   d_topk_w   (N, K) F32       d loss / d the routing weights
//   moe_x      (N, K, C) cd     the experts' input rows (h2 gathered in expert order)
//   moe_act, moe_d_act (N, K, Im) cd  the experts' SwiGLU output and its gradient
//   moe_d_gate_up (N, K, 2Im) cd
//   moe_d_y    (N, K, C) cd     d loss / d moe_y, then d loss / d moe_x
//   moe_stats  (Ls, 2, E) F32   per sparse layer: top-k assignments and the sum of probabilities
//                               per expert (the auxiliary loss's, model/block.h)
//   moe_aux_grad (E) F32        the auxiliary loss's gradient per probability of each expert
// Context parallel over P ranks (model/context_parallel.h): T is the sequence, each rank holds
// N = B x T/P tokens, and the attention section's buffers (qkv_raw, qkv, rstd_qk, att, lse
// and their gradients) hold the same number of elements as all T tokens of (H+2KV)/P
// heads, the layout they are used in; the RoPE tables cover all T positions; and two more:
//   cp_send, cp_recv (N, H+2KV, hd) cd  the all-to-all's chunks
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "ops/fp8_recipe.h"

namespace anvil {

// Activation recomputation. kAuto is a request (the fastest that fits the memory plan,
// plan/memory_plan.h), resolved to one of the others before a model is built.
enum class Recompute { kNone, kSelective, kFull, kAuto };
Recompute parse_recompute(const std::string& name);  // none | selective | full | auto
const char* recompute_name(Recompute r);

// Which tensor of the pass a buffer holds (the table above, in its order).
enum class Activation {
  kResidual, kResidualRing,
  kH1, kRstd1, kQkvRaw, kQkv, kRstdQk, kAtt, kLse, kXMid, kH2, kRstd2, kGateUp,
  kRouterProbs, kTopkIdx, kTopkW, kMoeOrder, kMoeRows, kMoeOffsets, kMoeGateUp, kMoeY,
  kAct, kDAct, kDGateUp, kGateUpTile, kMlpDw, kDAtt, kDQkv, kDQkvRaw, kDx, kDh, kHFinal, kRstdFinal, kRopeCos, kRopeSin,
  kFp8Amax, kCpSend, kCpRecv,
  kRouterLogits, kDRouterLogits, kDTopkW, kMoeX, kMoeAct, kMoeDAct, kMoeDGateUp, kMoeDY, kMoeStats, kMoeAuxGrad,
};
constexpr size_t kActivationKinds = static_cast<size_t>(Activation::kMoeAuxGrad) + 1;
bool is_block_activation(Activation a);  // kH1 .. kMoeY: one per set of block buffers
// Whether the buffer's first dimension is the tokens (the decoder views fewer rows of it):
// all but the per-expert ones (moe_offsets, moe_stats, moe_aux_grad).
bool rows_first(Activation a);

// The tensors a block's pass reads and writes, one per kind, indexed by it: one set of block
// buffers with the buffers the model has one of (the residuals are the model's, not in it;
// the decoder's kResidual is its stream).
class Activations {
 public:
  Tensor& operator[](Activation a) { return t_[static_cast<size_t>(a)]; }
  const Tensor& operator[](Activation a) const { return t_[static_cast<size_t>(a)]; }

 private:
  std::array<Tensor, kActivationKinds> t_;
};

constexpr int64_t kEveryBlockSet = -1;

struct ActivationBuffer {
  Activation what;
  const char* name;  // as in the table above
  // kResidual: l of x_l; a block buffer: its set, or kEveryBlockSet (kSelective's shared
  // set); else 0.
  int64_t index;
  Shape shape;
  DType dtype;
  bool host = false;  // an offloaded residual: host memory, not the device's
  int64_t bytes() const { return shape.numel() * static_cast<int64_t>(dtype_size(dtype)); }
};

// Sets of block buffers: one per layer, or one (kFull).
int64_t block_sets(const ModelConfig& c, Recompute r);

// The MLP in sequence tiles (ALST's TiledMLP): the gate/up GEMM, the SwiGLU and the down GEMM,
// forward and backward, run over `mlp_tile` tokens at a time, so that the (tokens, 2I) and
// (tokens, I) buffers hold one tile. kMlpTileAuto asks auto_mlp_tile; a tile of at least the
// micro-batch's tokens is untiled (the whole-sequence buffers, as before tiling existed).
constexpr int64_t kMlpTileAuto = 0;
// Untiled (the micro-batch's tokens) while gate_up of the whole micro-batch takes at most
// kMlpUntiledBytes; else the largest power of two of tokens whose gate_up takes at most
// kMlpTileBytes (and at least 128 tokens).
constexpr int64_t kMlpUntiledBytes = int64_t{512} << 20, kMlpTileBytes = int64_t{256} << 20;
int64_t auto_mlp_tile(const ModelConfig& c, int64_t tokens, DType compute_dtype);
// The tile a model of `tokens` runs: mlp_tile (kMlpTileAuto resolved), at most tokens.
int64_t effective_mlp_tile(const ModelConfig& c, int64_t tokens, DType compute_dtype, int64_t mlp_tile);

// The device buffers that hold the offloaded residuals in turn.
constexpr int64_t kOffloadRing = 2;
// Refuses (kUsage) --offload-activations under a policy other than kFull.
void check_offload(Recompute r, bool offload);

// Every buffer, in allocation order. r: not kAuto (a kInternal error). mlp_tile: tokens per
// MLP tile of this rank's tokens (kMlpTileAuto: auto_mlp_tile); grad_dtype: the blocks'
// gradients (mlp_dw); context_parallel: the ranks that share each sequence (they divide
// seq_len and the heads); offload: the checkpoints in host memory (check_offload); fp8: the
// recipe of the block linears (tensorwise: fp8_amax).
std::vector<ActivationBuffer> activation_buffers(const ModelConfig& c, int64_t micro_batch, int64_t seq_len,
                                                 Recompute r, DType compute_dtype, int64_t mlp_tile = kMlpTileAuto,
                                                 DType grad_dtype = DType::kF32, int64_t context_parallel = 1,
                                                 bool offload = false, Fp8Recipe fp8 = Fp8Recipe::kOff);
// The decoder's buffers (infer/decoder.h) for up to `rows` tokens of any sequences: x (the
// residual stream, run in place) and one set of block buffers of (rows, 1) sequences without
// lse, h2 and rstd2 (the decoder's h2 and rstd2 are h1's and rstd1's), and act; a MoE
// model's routing and experts' forward buffers besides.
std::vector<ActivationBuffer> decode_buffers(const ModelConfig& c, int64_t rows, DType compute_dtype);
int64_t activation_bytes(const std::vector<ActivationBuffer>& buffers);       // the device's
int64_t host_activation_bytes(const std::vector<ActivationBuffer>& buffers);  // the offloaded

}  // namespace anvil
