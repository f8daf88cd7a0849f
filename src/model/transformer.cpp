// The transformer's pass (model/transformer.h): the activations allocated from their table,
// the block loop with its policies, and the head's loss and its backward.
#include "model/transformer.h"

#include "core/error.h"

namespace anvil {

Transformer::Transformer(const ModelConfig& config, const ParamTable& table, Ops& ops, int64_t micro_batch,
                         int64_t seq_len, const ModelPolicies& p)
    : c_(config), table_(table), ops_(ops), B_(micro_batch), T_(seq_len),
      N_(micro_batch * seq_len / (p.context_parallel ? p.context_parallel->world() : 1)), recompute_(p.recompute),
      linears_(ops, p.fp8, fp8_slots_),
      tiles_(ops, linears_, effective_mlp_tile(config, N_, ops.compute_dtype(), p.mlp_tile)),
      attention_(config, ops, micro_batch, seq_len, p.context_parallel), offload_(ops, config.num_layers),
      block_(config, ops, linears_, tiles_) {
  ANVIL_ENSURE(B_ >= 1 && T_ >= 2, kInvalidInput, "micro-batch ", B_, " x sequence length ", T_,
               ": need at least one sequence of two tokens");
  resid_.resize(static_cast<size_t>(c_.num_layers + 1));
  sets_.resize(static_cast<size_t>(block_sets(c_, p.recompute)));
  for (const ActivationBuffer& b : activation_buffers(c_, B_, T_, p.recompute, ops.compute_dtype(), tiles_.tile(),
                                                      p.grad_dtype, attention_.ranks(), p.offload, p.fp8))
    allocate(b);
  for (int64_t l = 0; l <= c_.num_layers; ++l)
    if (offload_.offloaded(l)) resid_[static_cast<size_t>(l)] = offload_.slot(l);
  attention_.set_buffers(one());
  fp8_slots_ = Fp8Slots(one()[Activation::kFp8Amax]);
  ANVIL_ENSURE((table.expert_layout().degree > 1) == (p.expert_group != nullptr) && (!p.expert_group || p.run_comm),
               kInternal, "expert parallel ", table.expert_layout().degree, " with",
               p.expert_group ? "" : "out", " an expert-parallel group");
  if (p.expert_group) {
    experts_ = std::make_unique<ExpertParallel>(config, ops, *p.expert_group, *p.run_comm, table.expert_layout(), N_);
    block_.set_expert_parallel(experts_.get());
  }
}

BlockWeights Transformer::block_weights(UnitSource& src, int64_t l, bool grads) {
  const int u = table_.block_unit(l), x = table_.experts_unit(l);
  auto get = [&](int unit) { return grads ? src.grads(unit) : src.weights(unit); };
  const Tensor w = get(u);
  return table_.block_weights(l, w, x >= 0 ? get(x) : Tensor());
}

void Transformer::release_block(UnitSource& src, int64_t l) {
  src.release(table_.block_unit(l));
  if (table_.experts_unit(l) >= 0) src.release(table_.experts_unit(l));
}

Transformer::~Transformer() {
  offload_.finish();
  for (void* p : buffers_) ops_.runtime().release(p);
}

void Transformer::allocate(const ActivationBuffer& b) {
  if (b.host) return offload_.add_host(b.index, static_cast<size_t>(b.bytes()));
  Tensor t(nullptr, b.dtype, b.shape, ops_.runtime().device());
  t.data = ops_.runtime().alloc(t.bytes());
  buffers_.push_back(t.data);
  if (b.what == Activation::kResidual) {
    resid_[static_cast<size_t>(b.index)] = t;
  } else if (b.what == Activation::kResidualRing) {
    offload_.add_slot(t);
  } else {
    for (size_t set = 0; set < sets_.size(); ++set)
      if (!is_block_activation(b.what) || b.index == kEveryBlockSet || b.index == static_cast<int64_t>(set))
        sets_[set][b.what] = t;
  }
}

void Transformer::forward_blocks(UnitSource& src, Tensor ids, const Documents& documents) {
  ANVIL_ENSURE(ids.numel() == N_, kInternal, "transformer: ", ids.numel(), " ids for a model built for ", N_,
               " tokens");
  const Tensor& positions = documents.positions;
  ANVIL_ENSURE(!positions.data || positions.numel() == B_ * T_, kInternal, "transformer: ", positions.numel(),
               " positions for ", B_ * T_, " tokens");
  attention_.set_documents(documents);
  const int64_t L = c_.num_layers;
  const int embed = table_.embed_unit(), norm = table_.norm_unit();
  ops_.embedding_forward(resid_[0], ids, table_.unit_tensor(embed, src.weights(embed)));
  src.release(embed);
  for (int64_t l = 0; l < L; ++l) {
    const BlockWeights w = block_weights(src, l, false);
    src.prefetch(l + 1 < L ? table_.block_unit(l + 1) : norm);
    offload_.before_write(l + 1);
    fp8_slots_.set_layer(l);
    block_.set_layer(l);
    block_.forward(w, attention_, sets_[recompute_.set(l)], resid_[static_cast<size_t>(l)],
                   resid_[static_cast<size_t>(l + 1)]);
    offload_.after_write(l + 1);
    release_block(src, l);
  }
}

void Transformer::forward_loss(UnitSource& src, Tensor ids, Tensor targets, Tensor loss_sum,
                               const Documents& documents, Tensor token_losses) {
  using enum Activation;
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_loss: ", targets.numel(), " targets for ", N_, " tokens");
  const int norm = table_.norm_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids, documents);
  const Tensor wn = table_.unit_tensor(norm, src.weights(norm));
  if (head != norm) src.prefetch(head);
  ops_.rmsnorm_forward(one()[kHFinal], one()[kRstdFinal], resid_[static_cast<size_t>(c_.num_layers)], wn,
                       static_cast<float>(c_.rms_norm_eps));
  const Tensor wh = table_.unit_tensor(head, src.weights(head));
  // No dh, no dw: the op computes the loss and skips both gradient GEMMs.
  ops_.cross_entropy_forward_backward(loss_sum, Tensor(), Tensor(), one()[kHFinal], wh, targets, 1.0f, Tensor(), true,
                                      Tensor(), token_losses);
  src.release(head);
  src.release(norm);
}

void Transformer::head_forward_backward(UnitSource& src, Tensor targets, float loss_scale, Tensor loss_sum,
                                        Tensor logits, const TokenWeighting* weighting) {
  using enum Activation;
  const int embed = table_.embed_unit(), norm = table_.norm_unit(), head = table_.lm_head_unit();
  const Tensor wn = table_.unit_tensor(norm, src.weights(norm));
  if (head != norm) src.prefetch(head);
  const Tensor x_last = resid_[static_cast<size_t>(c_.num_layers)];
  const Activations& a = one();
  ops_.rmsnorm_forward(a[kHFinal], a[kRstdFinal], x_last, wn, static_cast<float>(c_.rms_norm_eps));
  if (forward_done_) forward_done_();
  const Tensor wh = table_.unit_tensor(head, src.weights(head));
  // Each part of a unit has one writer per micro-batch, but the tied embedding has two: the
  // output projection's (first) and the lookup's.
  const bool head_acc = !src.overwrite_grads(head);
  if (weighting) {  // the token losses first, then their weights (TokenWeighting)
    ops_.cross_entropy_forward_backward(loss_sum, Tensor(), Tensor(), a[kHFinal], wh, targets, 1.0f, logits, true,
                                        Tensor(), weighting->token_losses);
    weighting->weigh();
  }
  ops_.cross_entropy_forward_backward(weighting ? weighting->weighted_sum : loss_sum, a[kDh],
                                      table_.unit_tensor(head, src.grads(head)), a[kHFinal], wh, targets, loss_scale,
                                      logits, head_acc, weighting ? weighting->weights : Tensor());
  src.release(head);
  if (head != embed) src.grads_ready(head);
  ops_.rmsnorm_backward(a[kDx], table_.unit_tensor(norm, src.grads(norm)), a[kDh], x_last, wn, a[kRstdFinal], false,
                        !src.overwrite_grads(norm));
  src.release(norm);
  src.grads_ready(norm);
}

void Transformer::backward_blocks(UnitSource& src) {
  for (int64_t l = c_.num_layers - 1; l >= 0; --l) {
    const int u = table_.block_unit(l), x = table_.experts_unit(l);
    const BlockWeights w = block_weights(src, l, false);
    if (l > 0) src.prefetch(table_.block_unit(l - 1));
    offload_.prefetch(l - 1);
    offload_.before_read(l);
    const Activations& a = sets_[recompute_.set(l)];
    const Tensor x_in = resid_[static_cast<size_t>(l)];
    fp8_slots_.set_layer(l);
    block_.set_layer(l);
    recompute_.before_backward(block_, w, attention_, a, x_in);
    const BlockWeights g = block_weights(src, l, true);
    // One write mode for the block and its experts: both are written once per backward (the
    // same gradient dtype) and become stale together.
    ANVIL_ENSURE(x < 0 || src.overwrite_grads(u) == src.overwrite_grads(x), kInternal, "layer ", l,
                 ": its block and experts units differ in whether their gradients are overwritten");
    block_.backward(w, g, !src.overwrite_grads(u), attention_, a, x_in);
    release_block(src, l);
    src.grads_ready(u);
    if (x >= 0) src.grads_ready(x);
  }
}

void Transformer::forward_backward(UnitSource& src, Tensor ids, Tensor targets, float loss_scale, Tensor loss_sum,
                                   Tensor logits, const Documents& documents, const TokenWeighting* weighting) {
  ANVIL_ENSURE(targets.numel() == N_, kInternal, "forward_backward: ", targets.numel(), " targets for ", N_,
               " tokens");
  const int embed = table_.embed_unit(), head = table_.lm_head_unit();
  forward_blocks(src, ids, documents);
  // Qwen3-MoE's load-balancing loss (config output_router_logits), added as transformers adds
  // it to the mean loss: coef * aux, so loss_sum takes coef * aux / loss_scale.
  if (c_.sparse_layers() > 0 && c_.moe.output_router_logits)
    ops_.moe_aux_loss(loss_sum, one()[Activation::kMoeAuxGrad], one()[Activation::kMoeStats], N_,
                      static_cast<float>(c_.moe.router_aux_loss_coef), 1.0f / loss_scale);
  head_forward_backward(src, targets, loss_scale, loss_sum, logits, weighting);
  backward_blocks(src);
  ops_.embedding_backward(table_.unit_tensor(embed, src.grads(embed)), ids, one()[Activation::kDx],
                          head == embed || !src.overwrite_grads(embed));
  src.grads_ready(embed);
}

}  // namespace anvil
