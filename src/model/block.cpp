// One block's forward, recomputation and backward (model/block.h).
#include "model/block.h"

#include "model/sequence_attention.h"

namespace anvil {

void Block::forward(const BlockWeights& w, BlockAttention& attention, const Activations& a, Tensor x_in,
                    Tensor x_out, const NormFusion& fusion) {
  using enum Activation;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const int64_t rows = x_in.rows();
  const bool untiled = !tiles_.tiled(rows);
  const Fp8Slots& slots = linears_.slots();
  if (!fusion.input_normed)
    ops_.rmsnorm_forward(a[kH1], a[kRstd1], x_in, w.attn_norm, eps, slots.x_amax(kQkvLinear));
  linears_.forward(kQkvLinear, a[kQkvRaw].reshape({rows, w.qkv_w.dim(0)}), a[kH1], w.qkv_w, w.qkv_b, true, false);
  const Tensor att = attention.forward(w, a);
  linears_.forward(kOLinear, a[kXMid], att, w.o_w, Tensor(), false, false);
  ops_.add_rmsnorm_forward(a[kXMid], a[kH2], a[kRstd2], a[kXMid], x_in, w.mlp_norm, eps,
                           w.sparse() ? Tensor() : slots.x_amax(kGateUpLinear, untiled));
  if (w.sparse()) {
    moe_forward(w, a);
    if (!x_out.data) return;
    ops_.moe_combine_forward(x_out, a[kMoeY], a[kMoeRows], a[kTopkW]);
  } else {
    if (untiled) linears_.forward(kGateUpLinear, a[kGateUp], a[kH2], w.gate_up_w, Tensor(), true, false);
    if (!x_out.data) return;
    mlp_forward(w, a, x_out);
  }
  if (fusion.next_norm.data)
    ops_.add_rmsnorm_forward(x_out, a[kH1], a[kRstd1], x_out, a[kXMid], fusion.next_norm, eps);
  else
    ops_.add(x_out, x_out, a[kXMid]);
}

// x_out = the MLP of a[kH2] (before the residual add), untiled (on the forward's gate_up,
// kept for the backward) or tile by tile.
void Block::mlp_forward(const BlockWeights& w, const Activations& a, Tensor x_out) {
  using enum Activation;
  if (tiles_.tiled(x_out.rows())) return tiles_.forward(w, a, x_out);
  ops_.swiglu_forward(a[kAct], a[kGateUp], linears_.slots().x_amax(kDownLinear));
  linears_.forward(kDownLinear, x_out, a[kAct], w.down_w, Tensor(), true, false);
}

void Block::moe_forward(const BlockWeights& w, const Activations& a) {
  using enum Activation;
  const MoeConfig& m = c_.moe;
  const Tensor stats = a[kMoeStats].data
                           ? tensor_at(a[kMoeStats], c_.sparse_index(layer_) * 2 * m.num_experts, {2, m.num_experts})
                           : Tensor();
  ops_.linear_forward(a[kRouterLogits], a[kH2], w.router_w, Tensor());
  ops_.moe_router_forward(a[kRouterProbs], a[kTopkIdx], a[kTopkW], stats, a[kRouterLogits], m.norm_topk_prob);
  ops_.moe_sort(a[kMoeOrder], a[kMoeRows], a[kMoeOffsets], a[kTopkIdx]);
  ops_.moe_gather(a[kMoeX], a[kH2], a[kMoeOrder], static_cast<int>(m.top_k));
  if (experts_) return experts_->forward(w, a, layer_);
  ops_.moe_linear_forward(a[kMoeGateUp], a[kMoeX], w.experts_gate_up, a[kMoeOffsets]);
  ops_.swiglu_forward(a[kMoeAct], a[kMoeGateUp]);
  ops_.moe_linear_forward(a[kMoeY], a[kMoeAct], w.experts_down, a[kMoeOffsets]);
}

void Block::moe_backward(const BlockWeights& w, const BlockWeights& g, bool acc, const Activations& a) {
  using enum Activation;
  const MoeConfig& m = c_.moe;
  ops_.moe_combine_backward(a[kMoeDY], a[kDTopkW], a[kDx], a[kMoeY], a[kMoeRows], a[kTopkW]);
  if (experts_) {
    experts_->backward(w, g, acc, a, layer_);
  } else {
    ops_.moe_linear_backward_input(a[kMoeDAct], a[kMoeDY], w.experts_down, a[kMoeOffsets]);
    ops_.swiglu_backward(a[kMoeDGateUp], a[kMoeDAct], a[kMoeGateUp], a[kMoeAct]);
    ops_.moe_linear_backward_weight(g.experts_down, a[kMoeDY], a[kMoeAct], a[kMoeOffsets], acc);
    // The experts' input rows again (moe_x is shared by the blocks), then d loss / d them into
    // moe_d_y, whose d loss / d moe_y is spent.
    ops_.moe_gather(a[kMoeX], a[kH2], a[kMoeOrder], static_cast<int>(m.top_k));
    ops_.moe_linear_backward_weight(g.experts_gate_up, a[kMoeDGateUp], a[kMoeX], a[kMoeOffsets], acc);
    ops_.moe_linear_backward_input(a[kMoeDY], a[kMoeDGateUp], w.experts_gate_up, a[kMoeOffsets]);
  }
  ops_.moe_gather_backward(a[kDh], a[kMoeDY], a[kMoeRows], false);
  const Tensor aux_grad = m.output_router_logits ? a[kMoeAuxGrad] : Tensor();
  ops_.moe_router_backward(a[kDRouterLogits], a[kDTopkW], a[kRouterProbs], a[kTopkIdx], a[kTopkW], aux_grad,
                           m.norm_topk_prob);
  ops_.linear_backward_weight(g.router_w, Tensor(), a[kDRouterLogits], a[kH2], acc);
  ops_.linear_backward_input(a[kDh], a[kDRouterLogits], w.router_w, true);
}

// a[kDx] (d loss / d the MLP's output) -> a[kDh] (d loss / d h2) and the MLP's weight gradients.
void Block::mlp_backward(const BlockWeights& w, const BlockWeights& g, bool acc, const Activations& a) {
  using enum Activation;
  if (w.sparse()) return moe_backward(w, g, acc, a);
  if (tiles_.tiled(a[kH2].rows())) return tiles_.backward(w, g, acc, a);
  // The SwiGLU's output, not kept from the forward, comes from its backward's pass.
  linears_.backward_input(kDownLinear, a[kDAct], a[kDx], w.down_w);
  ops_.swiglu_backward(a[kDGateUp], a[kDAct], a[kGateUp], a[kAct]);
  linears_.backward_weight(kDownLinear, g.down_w, Tensor(), a[kDx], a[kAct], acc, true);
  linears_.backward(kGateUpLinear, a[kDh], g.gate_up_w, Tensor(), a[kDGateUp], a[kH2], w.gate_up_w, acc);
}

void Block::recompute_elementwise(const BlockWeights& w, SequenceAttention& attention, const Activations& a,
                                  Tensor x_in) {
  // The norms' amax slots still hold the forward's.
  using enum Activation;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  ops_.rmsnorm_forward(a[kH1], a[kRstd1], x_in, w.attn_norm, eps);
  attention.qk_norm_rope(w, a);
  ops_.rmsnorm_forward(a[kH2], a[kRstd2], a[kXMid], w.mlp_norm, eps);
}

void Block::backward(const BlockWeights& w, const BlockWeights& g, bool acc, SequenceAttention& attention,
                     const Activations& a, Tensor x_in) {
  using enum Activation;
  mlp_backward(w, g, acc, a);
  ops_.rmsnorm_backward(a[kDx], g.mlp_norm, a[kDh], a[kXMid], w.mlp_norm, a[kRstd2], true, acc);
  // attention (context parallel: its output exchanged again, its input's gradient exchanged back)
  linears_.backward(kOLinear, a[kDAtt], g.o_w, Tensor(), a[kDx], attention.output_tokens(a), w.o_w, acc);
  attention.backward(w, g, acc, a);
  const Tensor d_qkv = a[kDQkvRaw].reshape({x_in.rows(), w.qkv_w.dim(0)});
  linears_.backward(kQkvLinear, a[kDh], g.qkv_w, g.qkv_b, d_qkv, a[kH1], w.qkv_w, acc);
  ops_.rmsnorm_backward(a[kDx], g.attn_norm, a[kDh], x_in, w.attn_norm, a[kRstd1], true, acc);
}

}  // namespace anvil
