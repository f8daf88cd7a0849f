// The op set: everything the transformer's forward and backward need, declared once.
//
// model/ writes the forward and backward pass once against this interface; ops/cpu is the
// fp32 reference (always built), ops/cuda the GPU backend (bf16 compute, fp32 accumulate).
// The public op methods are the front, one for every backend (ops.cpp): each checks its
// tensors (device, dtype, shapes) with an error that names the op and the tensor, brackets
// the op for timing, and calls the backend's protected *_impl, which may assume the checks.
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
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "ops/documents.h"
#include "ops/fp8_recipe.h"

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
      Tensor targets, float loss_scale, Tensor logits, bool accumulate_dw) TAIL;                              \
  VIRTUAL void adamw_step_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWHyper& h,            \
      float grad_scale, Tensor copy, bool zero_grad) TAIL;                                                    \
  VIRTUAL void adamw_step_split_impl(Tensor hi, Tensor lo, Tensor grad, Tensor m, Tensor v,                   \
      const AdamWHyper& h, float grad_scale) TAIL;                                                            \
  VIRTUAL void sum_squares_impl(Tensor out, Tensor x) TAIL;

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;
  virtual std::string name() const = 0;
  // Why this backend cannot run the FP8 linear ops (linear_fp8_*) with `recipe`, or empty
  // where it can.
  virtual std::string fp8_unsupported(Fp8Recipe recipe) const {
    (void)recipe;
    return "";
  }

  // ---- memory
  struct MemoryStats {
    int64_t allocated = 0;  // bytes live now, through alloc()
    int64_t peak = 0;       // the most live at once since construction
    int64_t capacity = 0;   // the device's memory (0 on the CPU: the host's is not planned)
  };
  void* alloc(size_t bytes);
  void release(void* p);
  MemoryStats memory_stats() const;
  // Host memory that copies to and from the device run at the link's full speed from:
  // page-locked on CUDA, page-aligned on the CPU; not in memory_stats (the device's). For the
  // snapshot of an asynchronous save (train/checkpoint_async.h).
  void* alloc_host(size_t bytes) { return alloc_host_impl(bytes); }
  void release_host(void* p) { if (p) release_host_impl(p); }
  void upload(Tensor dst, const void* host_src);  // host -> dst, same dtype
  void download(void* host_dst, Tensor src);      // src -> host, same dtype
  void zero(Tensor t);
  void convert(Tensor dst, Tensor src);  // elementwise dtype conversion (F32 <-> BF16, or a copy)
  // Strided rows (the layout changes around context parallelism's all-to-all,
  // model/context_parallel.h): `rows` rows of `width` elements, row r from element
  // r * in_pitch of in to element r * out_pitch of out (same dtype; they must not overlap).
  void copy_rows(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows, int64_t width);
  virtual void synchronize() = 0;  // the host waits for every op issued, on either queue
  // The main stream (a cudaStream_t), for ordering collectives; nullptr on the CPU.
  virtual void* stream() { return nullptr; }

  // ---- side queue, for work that overlaps the main one: kSide (the optimizer beside the
  // next forward). Ops are issued to the current queue (main unless set). record(slot) marks
  // the point the current queue has reached; wait(slot) holds the current queue until the
  // slot's last mark is passed (at once if it was never recorded). Ops that use the shared
  // scratch or the GEMM workspace are refused off the main queue. On the CPU an op is done
  // when it returns, so these are no-ops.
  enum class Queue { kMain, kSide };
  virtual void set_queue(Queue q) { (void)q; }
  virtual void record(int slot) { (void)slot; }
  virtual void wait(int slot) { (void)slot; }

  // ---- activation offload (model/transformer.h, --offload-activations): copies between device
  // buffers and host memory from alloc_host, on a copy queue of their own that overlaps the
  // main queue's compute, with events of their own (slots apart from record/wait's).
  // copy_to_host / copy_to_device start the copy once the main queue has reached this point
  // (the source's producer, or the destination's last reader, is done) and mark `slot` when
  // the copy is done; wait_copy(slot) holds the main queue until then (at once if never
  // marked). The CPU copies at once (memcpy), so there the waits are no-ops.
  void copy_to_host(void* host_dst, Tensor src, int slot);
  void copy_to_device(Tensor dst, const void* host_src, int slot);
  virtual void wait_copy(int slot) { (void)slot; }

  // ---- per-op timing (anvil bench step --op-times). While on, each op issued to the main
  // queue is timed on the device, between events recorded before and after it (so time the
  // queue spends waiting for the host to launch the op counts as the op's), and on the host
  // (checks and launches). take_op_times() waits for the device and returns the totals since
  // the last call, by op and shape, in order of first use, and the span from the first op's
  // start to the last op's end: span minus the ops' sum is time between ops, where the queue
  // ran dry or waited for another queue. A backend that cannot time returns nothing.
  struct OpTime {
    std::string op;  // the op and its shape, e.g. "linear_forward 2048x4096x2048" (M x N x K)
    int64_t calls = 0;
    double device_ms = 0, host_ms = 0;
  };
  struct OpTimes {
    std::vector<OpTime> ops;
    double span_ms = 0;
  };
  virtual void set_op_timing(bool on) { (void)on; }
  virtual OpTimes take_op_times() { return {}; }

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

  // ---- recorded op sequences (CUDA graphs), for the decode step. Between begin_recording()
  // and end_recording() the ops are recorded, not run; replay(id) runs them again on the
  // same tensors (their contents may change in between). A backend that cannot record says
  // so with can_record() == false, and the caller runs the ops directly.
  virtual bool can_record() const { return false; }
  virtual void begin_recording() {}
  virtual int end_recording() { return -1; }  // the recording's id
  virtual void replay(int recording) { (void)recording; }
  virtual void drop_recordings() {}

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
  void cross_entropy_forward_backward(Tensor loss_sum, Tensor dh, Tensor dw, Tensor h,
                                      Tensor w, Tensor targets, float loss_scale,
                                      Tensor logits, bool accumulate_dw = true);

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

 protected:
  // ---- the backend: memory
  virtual void* alloc_impl(size_t bytes) = 0;
  virtual void release_impl(void* p) = 0;
  virtual int64_t memory_capacity() const { return 0; }  // MemoryStats::capacity
  virtual void* alloc_host_impl(size_t bytes);  // throws kOutOfMemory naming the bytes
  virtual void release_host_impl(void* p);
  virtual void upload_impl(Tensor dst, const void* host_src) = 0;
  virtual void download_impl(void* host_dst, Tensor src) = 0;
  virtual void zero_impl(Tensor t) = 0;
  virtual void convert_impl(Tensor dst, Tensor src) = 0;
  virtual void copy_rows_impl(Tensor out, int64_t out_pitch, Tensor in, int64_t in_pitch, int64_t rows,
                              int64_t width) = 0;
  // The activation offload's copies (default: download and upload, which wait for them).
  virtual void copy_to_host_impl(void* host_dst, Tensor src, int slot);
  virtual void copy_to_device_impl(Tensor dst, const void* host_src, int slot);

  // ---- the backend: each op after the front's checks, with the front's arguments
  ANVIL_OP_IMPLS(virtual, = 0)
  virtual void add_rmsnorm_forward_impl(Tensor sum, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor w,
                                        float eps, Tensor amax);
  virtual void linear_fp8_backward_impl(Tensor dx, Tensor dw, Tensor dbias, Tensor dy, Tensor x, Tensor w,
                                        Fp8Recipe recipe, bool accumulate, const Fp8Amax& amax);

  // ---- the backend: op timing. The front asks op_timed() before each op; when true it
  // calls begin_op with the op's name and shape, and end_op when the op's call ends (also
  // when it throws, so end_op must not).
  virtual bool op_timed() const { return false; }
  virtual void begin_op(const std::string& name) { (void)name; }
  virtual void end_op() noexcept {}

 private:
  class OpScope;

  std::unordered_map<void*, size_t> sizes_;  // live allocations, for memory_stats()
  MemoryStats stats_;
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
