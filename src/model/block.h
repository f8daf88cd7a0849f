// One transformer block, written once for training, evaluation and decoding (as llm.c has one
// forward): the attention RMSNorm, the fused qkv projection, attention (passed in: over whole
// sequences, or against a KV cache), the o projection, the residual add fused with the MLP
// RMSNorm, the SwiGLU MLP (untiled, or in tiles: model/mlp_tiles.h) or, in a sparse layer
// (Qwen3-MoE), the router and experts (tokens routed per token, in training and decoding
// alike), the residual add; and
// the backward of all of it, and the recomputation of its element-wise outputs. The weights
// are the unit's views (model/params.h's BlockWeights); the tensors read and written are
// one set of the activation table's buffers (model/activations.h), for any number of rows.
#pragma once

#include <cstdint>

#include "model/activations.h"
#include "model/block_linears.h"
#include "model/config.h"
#include "model/expert_parallel.h"
#include "model/mlp_tiles.h"
#include "model/params.h"
#include "ops/ops.h"

namespace anvil {

class SequenceAttention;

// Attention between a block's qkv projection and its output projection: over whole sequences
// in training and evaluation (model/sequence_attention.h), against a KV cache in decoding
// (infer/decoder.h).
class BlockAttention {
 public:
  virtual ~BlockAttention() = default;
  // a[kQkvRaw] (the block's rows of q, k and v) -> attention's output for the same rows,
  // (rows, H*hd), which the o projection reads.
  virtual Tensor forward(const BlockWeights& w, const Activations& a) = 0;
};

// The decoder's residual stream, run in place, fuses each residual add with the norm after it.
struct NormFusion {
  bool input_normed = false;  // a[kH1] and a[kRstd1] hold x_in's attention norm already
  Tensor next_norm;  // the next block's attention norm weight: the last add writes a[kH1] and a[kRstd1]
};

class Block {
 public:
  Block(const ModelConfig& c, Ops& ops, BlockLinears& linears, MlpTiles& tiles)
      : c_(c), ops_(ops), linears_(linears), tiles_(tiles) {}

  // The layer the next calls run: where a sparse layer writes its routing statistics (the
  // auxiliary loss's, a[kMoeStats]'s row of the layer, when the buffers have it).
  void set_layer(int64_t layer) { layer_ = layer; }
  // Expert parallel (model/expert_parallel.h): a sparse layer's experts run on their owners,
  // and the weights' experts are this rank's; null: every expert here.
  void set_expert_parallel(ExpertParallel* experts) { experts_ = experts; }
  // x_in -> x_out (x_out may be x_in). x_out empty: stops after gate_up (a sparse layer: after
  // the experts' outputs), all the backward reads (the forward again before a block's backward).
  void forward(const BlockWeights& w, BlockAttention& attention, const Activations& a, Tensor x_in, Tensor x_out,
               const NormFusion& fusion = {});
  // The element-wise outputs again, the same ops on the same inputs (the same bits): both
  // RMSNorms' and qk-norm + RoPE's.
  void recompute_elementwise(const BlockWeights& w, SequenceAttention& attention, const Activations& a,
                             Tensor x_in);
  // a[kDx] holds d loss / d x_out on entry and d loss / d x_in on return; the gradients g
  // are added to (accumulate) or written.
  void backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, SequenceAttention& attention,
                const Activations& a, Tensor x_in);

 private:
  void mlp_forward(const BlockWeights& w, const Activations& a, Tensor x_out);
  void mlp_backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a);
  // A sparse layer's router and experts on a[kH2], up to the experts' outputs a[kMoeY].
  void moe_forward(const BlockWeights& w, const Activations& a);
  // Its backward: a[kDx] (d loss / d the MoE's output) -> a[kDh] and the router's and experts'
  // weight gradients; the auxiliary loss's gradient (a[kMoeAuxGrad]) when the config adds it.
  void moe_backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a);

  const ModelConfig& c_;
  Ops& ops_;
  BlockLinears& linears_;
  MlpTiles& tiles_;
  ExpertParallel* experts_ = nullptr;
  int64_t layer_ = 0;
};

}  // namespace anvil
