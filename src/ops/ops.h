// The op set: the math the transformer's forward and backward, decoding and the optimizer
// need, declared once. Each op set owns the runtime it runs on (ops/runtime.h: memory,
// copies, queues, recordings, timing).
//
// model/ writes the forward and backward pass once against this interface; ops/cpu is the
// fp32 reference (always built), ops/cuda the GPU backend (bf16 compute, fp32 accumulate).
// The public op methods are the front, one for every backend (ops.cpp): each checks its
// tensors (device, dtype, shapes) with an error that names the op and the tensor, brackets
// the op for timing (Runtime::OpScope), and calls the backend's protected *_impl, which may
// assume the checks.
// Conventions, for every backend:
//  - Tensors are dense row-major views (core/tensor.h) on the backend's device.
//  - "compute" tensors (activations, weight copies) have the backend's compute_dtype():
//    F32 on the CPU, BF16 on CUDA. Master weights, AdamW state, rstd/lse statistics and
//    losses are always F32. Gradients of parameters are F32; a backend with a BF16 compute
//    dtype also writes them in BF16 (dw, dbias, norm weights, the optimizer's grad and
//    sum_squares' x), but only where they are overwritten (accumulate false): one
//    backward's gradient rounded once, never summed in bf16 (parallel/param_store.h).
//  - Parameter gradients (dw, dbias, dtable, dq_w, dk_w) are accumulated (+=) unless the
//    caller passes accumulate = false: then they are overwritten, as the first write of a
//    step into a buffer that still holds the last step's values (so the optimizer need not
//    zero the gradients: parallel/param_store.h). Micro-batches and the tied embedding /
//    output weight add up without extra passes.
//  - Token ids and targets are I32; a target of -100 is ignored (PyTorch's ignore_index).
//  - qkv is packed per token as (H + 2*KV) heads of head_dim: q heads, then k, then v,
//    because q_proj, k_proj and v_proj are stored back to back and run as one GEMM.
//  - gate_up is packed per token as (2*I): gate, then up, for the same reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/tensor.h"
#include "ops/documents.h"
#include "ops/fp8_recipe.h"
#include "ops/runtime.h"
#include "ops/workspace.h"

namespace anvil {

struct AdamWHyper {
  float lr = 1e-5f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, after increment (PyTorch's state["step"])
};

// The op implementations (*_impl) every backend gives, declared once for the base class,
// ANVIL_OP_IMPLS(virtual, = 0), and for each backend's class, ANVIL_OP_IMPLS(, override).
// add_rmsnorm_forward_impl and linear_fp8_backward_impl are not among them: their defaults run
// add and rmsnorm_forward, and the two FP8 backward products.
#define ANVIL_OP_IMPLS(VIRTUAL, TAIL)                                                                         \
  VIRTUAL void linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias) TAIL;                           \
  VIRTUAL void linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, bool accumulate) TAIL;              \
  VIRTUAL void linear_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x,                      \
      bool accumulate) TAIL;                                                                                  \
  VIRTUAL void linear_fp8_forward_impl(Tensor y, Tensor x, Tensor w, Tensor bias, Fp8Recipe recipe,          \
      const Fp8Amax& amax) TAIL;                                                                              \
  VIRTUAL void linear_fp8_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Fp8Recipe recipe,               \
      bool accumulate, const Fp8Amax& amax) TAIL;                                                             \
  VIRTUAL void linear_fp8_backward_weight_impl(Tensor dw, Tensor dbias, Tensor dy, Tensor x, Fp8Recipe recipe, \
      bool accumulate, const Fp8Amax& amax) TAIL;                                                             \
  VIRTUAL void embedding_forward_impl(Tensor out, Tensor ids, Tensor table) TAIL;                             \
  VIRTUAL void embedding_backward_impl(Tensor dtable, Tensor ids, Tensor dout, bool accumulate) TAIL;         \
  VIRTUAL void rmsnorm_forward_impl(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps, Tensor amax) TAIL; \
  VIRTUAL void rmsnorm_backward_impl(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,      \
      bool accumulate, bool accumulate_dw) TAIL;                                                              \
  VIRTUAL void qk_norm_rope_forward_impl(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w,          \
      Tensor cos, Tensor sin, int n_heads, int n_kv_heads, float eps, Tensor positions) TAIL;                 \
  VIRTUAL void qk_norm_rope_backward_impl(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in,       \
      Tensor q_w, Tensor k_w, Tensor rstd, Tensor cos, Tensor sin, int n_heads, int n_kv_heads,               \
      bool accumulate_dw, Tensor positions) TAIL;                                                             \
  VIRTUAL void attention_forward_impl(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,        \
      const Documents& documents) TAIL;                                                                       \
  VIRTUAL void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,          \
      int n_heads, int n_kv_heads, const Documents& documents) TAIL;                                          \
  VIRTUAL void attention_cached_impl(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots,    \
      Tensor positions, int n_heads, int n_kv_heads) TAIL;                                                    \
  VIRTUAL void argmax_rows_impl(Tensor out, Tensor x) TAIL;                                                   \
  VIRTUAL void swiglu_forward_impl(Tensor out, Tensor gate_up, Tensor amax) TAIL;                             \
  VIRTUAL void swiglu_backward_impl(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) TAIL;           \
  VIRTUAL void add_impl(Tensor out, Tensor a, Tensor b) TAIL;                                                 \
  VIRTUAL void cross_entropy_forward_backward_impl(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h, Tensor w, \
      Tensor targets, float loss_scale, Tensor logits, bool accumulate_dw, Tensor row_weights,                \
      Tensor row_losses) TAIL;                                                                                \
  VIRTUAL void adamw_step_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,            \
      float grad_scale, Tensor copy, bool zero_grad) TAIL;                                                    \
  VIRTUAL void adamw_step_split_impl(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v,                   \
      const AdamWHyper& h, float grad_scale) TAIL;                                                            \
  VIRTUAL void sum_squares_impl(Tensor out, Tensor x) TAIL;                                                  \
  VIRTUAL void moe_router_forward_impl(Tensor probs, Tensor topk_idx, Tensor topk_w, Tensor stats,            \
      Tensor logits, bool norm_topk_prob) TAIL;                                                               \
  VIRTUAL void moe_router_backward_impl(Tensor dlogits, Tensor dtopk_w, Tensor probs, Tensor topk_idx,        \
      Tensor topk_w, Tensor aux_grad, bool norm_topk_prob) TAIL;                                              \
  VIRTUAL void moe_aux_loss_impl(Tensor loss_sum, Tensor aux_grad, Tensor stats, int64_t tokens, float coef,  \
      float loss_weight) TAIL;                                                                                \
  VIRTUAL void moe_sort_impl(Tensor order, Tensor rows, Tensor offsets, Tensor topk_idx) TAIL;                \
  VIRTUAL void moe_gather_impl(Tensor xs, Tensor x, Tensor order, int top_k) TAIL;                            \
  VIRTUAL void moe_gather_backward_impl(Tensor dx, Tensor dxs, Tensor rows, bool accumulate) TAIL;            \
  VIRTUAL void moe_linear_forward_impl(Tensor y, Tensor x, Tensor w, Tensor offsets) TAIL;                    \
  VIRTUAL void moe_linear_backward_input_impl(Tensor dx, Tensor dy, Tensor w, Tensor offsets) TAIL;           \
  VIRTUAL void moe_linear_backward_weight_impl(Tensor dw, Tensor dy, Tensor x, Tensor offsets,                \
      bool accumulate) TAIL;                                                                                  \
  VIRTUAL void moe_combine_forward_impl(Tensor out, Tensor ys, Tensor rows, Tensor topk_w) TAIL;              \
  VIRTUAL void moe_combine_backward_impl(Tensor dys, Tensor dtopk_w, Tensor dout, Tensor ys, Tensor rows,     \
      Tensor topk_w) TAIL;

class Ops {
 public:
  virtual ~Ops() = default;
  // The runtime the ops run on (ops/runtime.h): memory, copies, queues, recordings, timing.
  Runtime& runtime() const { return *runtime_; }
  virtual DType compute_dtype() const = 0;
  // Why this backend cannot run the FP8 linear ops (linear_fp8_*) with `recipe`, or empty
  // where it can.
  virtual std::string fp8_unsupported(Fp8Recipe recipe) const {
    (void)recipe;
    return "";
  }
  // Allocates the workspaces of the backend's table for shape s now (ops/workspace.h), so that
  // the ops of such a micro-batch find them; they are kept for the op set's lifetime.
  virtual void reserve_workspaces(const WorkspaceShape& s) { (void)s; }

  // ---- linear layers: y (M,N) = x (M,K) . w(N,K)^T + bias(N)
  // y is in the compute dtype, or F32 without a bias (inference logits); bias may be empty.
  void linear_forward(Tensor y, Tensor x, Tensor w, Tensor bias);
  // dx (M,K) = dy (M,N) . w (N,K); accumulate: dx += ...
  void linear_backward_input(Tensor dx, Tensor dy, Tensor w, bool accumulate);
  // dw (N,K) += dy^T . x; dbias (N) += column sums of dy (dbias may be empty). dw, dbias F32.
  // accumulate false: = instead of +=.
  void linear_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, bool accumulate = true);

  // ---- the same three products with FP8 operands (ops/fp8_recipe.h; recipe not kOff): each
  // GEMM's operands scaled from their amax and cast to FP8, fp32 accumulation, the product
  // dequantized into the compute dtype. The bias is added, and dbias summed, from the
  // unquantized values. Nothing FP8 outlives the call. amax (tensorwise only): where x's and
  // w's amax are found or kept (ops/fp8_recipe.h's Fp8Amax); the same results either way.
  void linear_fp8_forward(Tensor y, Tensor x, Tensor w, Tensor bias, Fp8Recipe recipe, const Fp8Amax& amax = {});
  void linear_fp8_backward_input(Tensor dx, Tensor dy, Tensor w, Fp8Recipe recipe, bool accumulate,
                                 const Fp8Amax& amax = {});
  void linear_fp8_backward_weight(Tensor dw, Tensor dbias, Tensor dy, Tensor x, Fp8Recipe recipe,
                                  bool accumulate = true, const Fp8Amax& amax = {});
  // Both backward products of one layer from the same dy: linear_fp8_backward_weight (dw,
  // dbias; accumulate as there), then linear_fp8_backward_input (dx overwritten), the same
  // results; a backend may quantize dy once for both (tensorwise: the same scale either way).
  void linear_fp8_backward(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w, Fp8Recipe recipe,
                           bool accumulate, const Fp8Amax& amax = {});

  // ---- embedding: out (N,C) = table[ids]; dtable (V,C) F32 += scatter of dout rows
  // (accumulate false: dtable = the scatter, zero in rows no id names)
  void embedding_forward(Tensor out, Tensor ids, Tensor table);
  void embedding_backward(Tensor dtable, Tensor ids, Tensor dout, bool accumulate = true);

  // ---- RMSNorm over the last dimension: out = x * rstd * w, rstd (R) F32 = 1/sqrt(mean(x^2)+eps)
  // amax (1) F32, when given: the largest |element| of out as stored, written in the same pass
  // (for the FP8 linear that reads out: Fp8Amax). The same for add_rmsnorm and swiglu_forward.
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps, Tensor amax = Tensor());
  // dx (=, or += when accumulate) and dw (F32, +=, or = when not accumulate_dw)
  void rmsnorm_backward(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd,
                        bool accumulate, bool accumulate_dw = true);
  // The residual add and the RMSNorm after it: sum = a + b (sum may alias a or b), then
  // rmsnorm_forward(out, rstd, sum, w, eps), with the same values as those two ops (the
  // default implementation runs them; a backend may fuse them). Its backward is rmsnorm_backward with
  // accumulate: dx += the norm's gradient, on top of the residual's.
  void add_rmsnorm_forward(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w, float eps,
                           Tensor amax = Tensor());

  // ---- per-head RMSNorm of q and k (Qwen3; skipped when q_w is empty) then RoPE
  // (rotate-half), on packed qkv (B*T, H+2KV, hd); v is copied unchanged.
  // cos, sin: (T, hd/2) F32, the angles of positions 0..T-1; rstd: (B*T, H+KV) F32.
  // Row n takes the angles of position n % T, or, when positions (B*T) I32 is given (packed
  // documents, see attention_forward), of positions[n] (each in 0..T-1).
  void qk_norm_rope_forward(Tensor out, Tensor rstd, Tensor in, Tensor q_w, Tensor k_w,
                            Tensor cos, Tensor sin, int n_heads, int n_kv_heads,
                            float eps, Tensor positions = Tensor());
  // din (B*T, H+2KV, hd) from dout; dq_w, dk_w (hd) F32 += (= when not accumulate_dw).
  void qk_norm_rope_backward(Tensor din, Tensor dq_w, Tensor dk_w, Tensor dout, Tensor in,
                             Tensor q_w, Tensor k_w, Tensor rstd, Tensor cos, Tensor sin,
                             int n_heads, int n_kv_heads, bool accumulate_dw = true,
                             Tensor positions = Tensor());

  // ---- causal GQA attention, scale 1/sqrt(hd). qkv (B,T,H+2KV,hd); out (B,T,H,hd);
  // lse (B,H,T) F32: log-sum-exp of each query's scaled scores, saved for backward.
  // documents.positions (B*T) I32, when given: documents packed in each sequence, as each
  // token's position within its document (0 at a document's first token, +1 per token after
  // it, so positions[t] <= t within the sequence); query t then attends only to keys
  // t - positions[t] .. t, those of its own document (block-diagonal causal). Empty: each
  // sequence is one document (plain causal). documents.lengths, when given, are those
  // documents' lengths (ops/documents.h), which a backend may use to run them as such.
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,
                         const Documents& documents = Documents());
  // dqkv (B,T,H+2KV,hd) written.
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          int n_heads, int n_kv_heads, const Documents& documents = Documents());

  // ---- inference: attention of new rows against a KV cache (infer/decoder.h).
  // k_cache, v_cache (S, KV, P, hd) compute dtype: S sequence slots of P positions each.
  // qkv (R, H+2KV, hd): R rows after RoPE; row r is in slot slots[r] at position
  // positions[r] (I32, R each). Every row's k and v are first written into the cache at
  // (slot, position); then each row's q attends causally over its slot's positions
  // 0..positions[r] (scale 1/sqrt(hd)): out (R, H, hd). Prefill (many rows of one or more
  // sequences) and decode (one row per sequence) are the same call.
  void attention_cached(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots,
                        Tensor positions, int n_heads, int n_kv_heads);

  // out (R) I32: the index of the largest element of each row of x (R, V) F32, the first
  // on ties (greedy decoding without moving the logits to the host).
  void argmax_rows(Tensor out, Tensor x);

  // ---- SwiGLU: out (N,I) = silu(gate) * up, gate_up (N,2I); dgate_up written. act (N,I),
  // when given, also receives swiglu_forward's out, the same bits (the backward needs it for
  // the down projection's weight gradient, so the pass that reads gate_up anyway makes it).
  void swiglu_forward(Tensor out, Tensor gate_up, Tensor amax = Tensor());
  void swiglu_backward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act = Tensor());

  // ---- out = a + b (out may alias a or b)
  void add(Tensor out, Tensor a, Tensor b);

  // ---- output projection fused with cross-entropy, in chunks of rows so that the full
  // logits never exist. h (N,C), w (V,C), targets (N) I32 (-100: ignored).
  // loss_sum (1) F32 += sum over targets of -log softmax(h.w^T)[target]
  // dh (N,C) = d(loss_sum * loss_scale)/dh (written); dw (V,C) F32 += the same for w.
  // dh and dw absent (both): the loss only, no gradient work (evaluation).
  // logits (N,V) F32: written when given (the parity tool), else left untouched.
  // accumulate_dw false: dw = instead of +=.
  // row_weights (N) F32, when given: row r's loss and its gradient count row_weights[r] times
  // (loss_sum += sum of w_r * loss_r; dh, dw of loss_scale * that): an objective whose
  // per-token coefficients come from a forward pass (DPO, train/dpo.h).
  // row_losses (N) F32, when given: row r's own loss written (unweighted; 0 where ignored).
  void cross_entropy_forward_backward(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h,
                                      Tensor w, Tensor targets, float loss_scale,
                                      Tensor logits, bool accumulate_dw = true,
                                      Tensor row_weights = Tensor(), Tensor row_losses = Tensor());

  // ---- optimizer on flat F32 buffers: grad is multiplied by grad_scale (the clipping
  // coefficient) as it is read; param, m and v are updated in place as PyTorch's AdamW.
  // In the same pass: copy (compute dtype, may be empty or param itself) receives the new
  // param as convert() would write it, and grad is zeroed when zero_grad.
  void adamw_step(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,
                  float grad_scale, Tensor copy, bool zero_grad);
  // The same update of split masters (core/bf16.h, split_master): hi (BF16, which is the
  // compute weight) and lo (I16) hold the fp32 param and are rewritten with the new one.
  void adamw_step_split(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,
                        float grad_scale);
  // out (1) F32 += sum of x^2 (x F32, or BF16 on a BF16 backend)
  void sum_squares(Tensor out, Tensor x);

  // ---- mixture of experts (Qwen3-MoE's sparse MLP: model/block.h). N tokens, E experts, K
  // experts per token; an assignment is (token t, choice j), numbered t * K + j; the experts'
  // rows are the N * K assignments sorted by expert (ties by assignment number, so the order
  // is deterministic).
  // The router: probs (N,E) F32 = softmax of logits (N,E) compute, in fp32; topk_idx (N,K)
  // I32 its K largest, largest first, ties broken by the lower expert index; topk_w (N,K)
  // F32 their probabilities, divided by their sum when norm_topk_prob, rounded to the compute
  // dtype (transformers casts them back). stats (2,E) F32, when given: the count of
  // assignments per expert and the sum of probs per expert over the tokens (written).
  void moe_router_forward(Tensor probs, Tensor topk_idx, Tensor topk_w, Tensor stats, Tensor logits,
                          bool norm_topk_prob);
  // dlogits (N,E) compute (written) from dtopk_w (N,K) F32 through the renormalisation and
  // the softmax; aux_grad (E) F32, when given, is added to d loss / d probs of every token.
  void moe_router_backward(Tensor dlogits, Tensor dtopk_w, Tensor probs, Tensor topk_idx, Tensor topk_w,
                           Tensor aux_grad, bool norm_topk_prob);
  // The load-balancing loss of transformers' load_balancing_loss_func over the sparse layers'
  // stats (Ls,2,E) of `tokens` tokens each: aux = E * sum_e (count_e / (Ls N)) (prob_e / (Ls N)),
  // counts and probs summed over the layers. loss_sum (1) F32 += coef * aux * loss_weight;
  // aux_grad (E) F32 = d (coef * aux) / d a token's prob of expert e = coef E count_e / (Ls N)^2.
  void moe_aux_loss(Tensor loss_sum, Tensor aux_grad, Tensor stats, int64_t tokens, float coef, float loss_weight);
  // The dispatch: order (N*K) I32, sorted row -> assignment; rows (N*K) I32, assignment ->
  // sorted row; offsets (E+1) I32, expert e's rows [offsets[e], offsets[e+1]).
  void moe_sort(Tensor order, Tensor rows, Tensor offsets, Tensor topk_idx);
  // xs (N*K, C) row r = x (N, C) row order[r] / top_k; its backward: dx (N,C) = (+=) the sum
  // over each token's K rows of dxs.
  void moe_gather(Tensor xs, Tensor x, Tensor order, int top_k);
  void moe_gather_backward(Tensor dx, Tensor dxs, Tensor rows, bool accumulate);
  // The experts' linear layers: y (R, Nout) rows of expert e = x's rows . w[e]^T, w (E, Nout,
  // Kin) compute; offsets as moe_sort's (R = offsets[E]). dx (R, Kin) written; dw (E, Nout,
  // Kin) F32 += (= when not accumulate; an expert without rows gets 0).
  void moe_linear_forward(Tensor y, Tensor x, Tensor w, Tensor offsets);
  void moe_linear_backward_input(Tensor dx, Tensor dy, Tensor w, Tensor offsets);
  void moe_linear_backward_weight(Tensor dw, Tensor dy, Tensor x, Tensor offsets, bool accumulate);
  // The combine: out (N,C) row t = sum over j of topk_w[t,j] * ys[rows[t*K+j]] (written), in
  // order of j. Its backward: dys (N*K, C) and dtopk_w (N,K) F32, both written.
  void moe_combine_forward(Tensor out, Tensor ys, Tensor rows, Tensor topk_w);
  void moe_combine_backward(Tensor dys, Tensor dtopk_w, Tensor dout, Tensor ys, Tensor rows, Tensor topk_w);

 protected:
  explicit Ops(std::unique_ptr<Runtime> runtime) : runtime_(std::move(runtime)) {}

  // ---- the backend: each op after the front's checks, with the front's arguments
  ANVIL_OP_IMPLS(virtual, = 0)
  virtual void add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w,
                                        float eps, Tensor amax);
  virtual void linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                                        Fp8Recipe recipe, bool accumulate, const Fp8Amax& amax);

 private:
  std::unique_ptr<Runtime> runtime_;
};

// The fp32 CPU reference backend.
std::unique_ptr<Ops> make_cpu_ops();
// The CUDA backend on the given device (ops/cuda); throws kNoDevice in a build without CUDA
// or on a machine without a usable GPU.
std::unique_ptr<Ops> make_cuda_ops(int device);
bool cuda_available();  // a CUDA build with at least one usable GPU
// The backend named by --device: "cpu" or "cuda" (on the given GPU); throws kUsage otherwise.
std::unique_ptr<Ops> make_ops(const std::string& device, int device_index);

}  // namespace anvil
