// The ops of a training step in issue order (plan/step_ops.h): the model's, the store's and
// the optimizer's, mirrored from the code that issues them.
#include "plan/step_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"

namespace anvil {
namespace {

// Walks one step; each method mirrors the function of the trainer, model or store it names.
class StepWalk {
 public:
  explicit StepWalk(const PlannedRun& run)
      : run_(run), p_(run.parallel), c_(run.model),
        table_(c_, run.world, ExpertLayout::where_valid(c_, p_.expert_parallel, 0, run.world)),
        ep_(table_.expert_layout().degree), replicas_(run.world / ep_),
        N_(run.data.micro_batch * run.data.seq_len), cb_(static_cast<double>(dtype_size(run.compute_dtype))),
        sharded_(shards_state(p_.mode) && run.world > 1), zero2_(sharded_ && p_.mode == ParallelMode::kZero2),
        split_(run.compute_dtype != DType::kF32),
        tile_(effective_mlp_tile(c_, N_, run.compute_dtype, p_.mlp_tile)), grad_dtype_(blocks_grad_dtype(p_)),
        fp8_(p_.fp8 != Fp8Recipe::kOff) {
    if (table_.norm_unit() > 1 && !zero2_) keep_unit_ = table_.norm_unit() - 1;
  }

  std::vector<StepItem> run() {
    zero(4);  // the loss sum (Trainer::step)
    for (int64_t k = 0; k < run_.data.grad_accum; ++k) {
      last_micro_ = k + 1 == run_.data.grad_accum;
      forward_backward();
    }
    optimizer_step();
    return std::move(items_);
  }

 private:
  // ---- what is issued
  void op(const char* name, std::string shape, int64_t size, double flops, double bytes, double cast_bytes = 0,
          const char* kin = "") {
    StepItem it;
    it.phase = phase_;
    it.op = OpCall{name, std::move(shape), size, flops, bytes, cast_bytes, kin};
    items_.push_back(std::move(it));
  }
  // ranks: the collective's group (0: every rank of the run).
  int collective(BenchCollective kind, int64_t bytes, int ranks = 0) {
    StepItem it;
    it.kind = StepItem::Kind::kCollective;
    it.phase = phase_;
    it.collective = kind;
    it.ranks = ranks;
    it.bytes = bytes;
    it.id = next_id_++;
    items_.push_back(it);
    return it.id;
  }
  // The experts' all_to_all in the expert-parallel group.
  int all_to_all(int64_t bytes) {
    const int id = collective(BenchCollective::kAllReduce, bytes, ep_);
    items_.back().all_to_all = true;
    return id;
  }
  void wait(int id) {
    StepItem it;
    it.kind = StepItem::Kind::kWait;
    it.phase = phase_;
    it.id = id;
    items_.push_back(it);
  }
  void zero(int64_t bytes) { op("zero", cat(bytes, " bytes"), bytes, 0, static_cast<double>(bytes)); }
  void convert(DType from, DType to, int64_t n) {
    op("convert", cat(dtype_name(from), "->", dtype_name(to), " ", n), n, 0,
       static_cast<double>(n * static_cast<int64_t>(dtype_size(from) + dtype_size(to))));
  }
  // A block linear's product of M rows, N outputs and K inputs (model/block_linears.h:
  // BlockLinears::forward, backward_input, backward_weight): name is the bf16 op's,
  // linear_fp8_* in its place with --fp8. x_known, w_known: the forward's or dw's x, the
  // forward's w, have their amax in the linear's slot (model/block.cpp's flags; dx's w always has).
  void linear(const char* name, int64_t M, int64_t N, int64_t K, bool x_known = false, bool w_known = false) {
    const std::string kind = name + std::strlen("linear_");
    const std::string op_name = fp8_ ? "linear_fp8_" + kind : name;
    const double x = static_cast<double>(M * K), w = static_cast<double>(N * K), dy = static_cast<double>(M * N);
    const double casts = kind == "forward"        ? cast(x, x_known) + cast(w, w_known)
                         : kind == "backward_input" ? cast(dy, false) + cast(w, true)
                                                    : cast(dy, false) + cast(x, x_known);
    const double flops = 2.0 * M * N * K;
    op(op_name.c_str(), cat(M, "x", N, "x", K), fp8_ ? M : gemm_size(flops), flops, cb_ * (x + w + dy), fp8_ ? casts : 0);
  }
  // Both backward products of a block linear (BlockLinears::backward): dw then dx,
  // one op with --fp8 (dy's amax taken once and dy cast into both layouts in one read; x's
  // and w's amax kept from the forward), named by dw's shape.
  void linear_backward(int64_t M, int64_t N, int64_t K) {
    if (!fp8_) {
      linear("linear_backward_weight", M, N, K);
      linear("linear_backward_input", M, N, K);
      return;
    }
    const double x = static_cast<double>(M * K), w = static_cast<double>(N * K), dy = static_cast<double>(M * N);
    op("linear_fp8_backward", cat(M, "x", N, "x", K), M, 4.0 * M * N * K, 2 * cb_ * (x + w + dy),
       (cb_ + cb_ + 2) * dy + cast(x, true) + cast(w, true));
  }
  // A bf16 GEMM's key in the cost table: its MFLOP per call. A product's efficiency follows
  // its size, whatever mix of rows and widths makes it (the 0.6B's 1,024-row GEMMs are half the
  // 1.7B's and run slower); the FP8 linears keep their rows, the size their GEMM and cast
  // rates are fitted apart at (op_costs.h).
  static int64_t gemm_size(double flops) { return std::max<int64_t>(1, std::llround(flops / 1e6)); }
  // The bytes of one bf16 operand of n elements cast to FP8 (ops/cuda/fp8_cast.h): its amax
  // read first unless known, then read and written as FP8 (one byte an element).
  double cast(double n, bool amax_known) const { return (amax_known ? 0 : cb_) * n + (cb_ + 1) * n; }
  void per_token(const char* name, int64_t C, double bytes_per_element, int64_t rows = 0) {
    if (rows == 0) rows = N_;
    op(name, cat(rows, "x", C), rows, 0, bytes_per_element * cb_ * static_cast<double>(rows * C));
  }
  // Causal attention over sequences of T (bench step's wrapped batches: one document each):
  // the forward's two products (Q K^T and P V) over the causal triangle, 2 x 2 x T^2/2 x
  // head_dim FLOPs a head and sequence; `times` that for the backward. Its rate is the
  // table's at length T: the kernels' efficiency follows the length (tiles, the triangle's
  // edge, cuDNN's backward past its dP bound), not the tokens of the batch.
  void attention(const char* name, double times) {
    const int64_t B = run_.data.micro_batch, T = run_.data.seq_len, H = c_.num_heads;
    op(name, cat(B, "x", T, "x", H, "/", c_.num_kv_heads, "x", c_.head_dim),
       T, times * 2.0 * static_cast<double>(B * H * T * T * c_.head_dim),
       cb_ * static_cast<double>(N_ * (c_.qkv_dim() + c_.q_dim())) * times);
  }
  void qk_norm_rope(const char* name, double bytes_per_element) {
    const int64_t heads = c_.num_heads + 2 * c_.num_kv_heads;
    op(name, cat(N_, "x", c_.num_heads, "+", c_.num_kv_heads, "x", c_.head_dim),
       N_, 0, bytes_per_element * cb_ * static_cast<double>(N_ * heads * c_.head_dim));
  }
  DType unit_grad_dtype(int u) const {
    return table_.grads_written_once(u) ? grad_dtype_ : DType::kF32;
  }
  const UnitInfo& unit(int u) const { return table_.units()[static_cast<size_t>(u)]; }

  // A sparse layer's (Qwen3-MoE) memory-bound op of `rows` rows: its bytes, at its kin's rate
  // where the table has none of its own (OpCall::kin).
  void moe_op(const char* name, std::string shape, int64_t rows, double bytes, const char* kin) {
    op(name, std::move(shape), rows, 0, bytes, 0, kin);
  }
  // The experts' GEMM over R = N x K assignments of the rank's E experts (under expert
  // parallelism E / N of them, on the n K rows they receive at balance: the same R): its
  // FLOPs, at the rate of one expert's GEMM at the balanced count, R / E rows (the op's size:
  // that GEMM's MFLOP, as a bf16 linear's), its linear_* kin's without its own.
  void experts_linear(const char* name, int64_t out, int64_t in) {
    const int64_t R = N_ * c_.moe.top_k, E = c_.moe.num_experts / ep_;
    const double per_expert = 2.0 * static_cast<double>(std::max<int64_t>(1, R / E) * out * in);
    op(name, cat(R, "x", out, "x", in, " in ", E), gemm_size(per_expert), 2.0 * R * out * in,
       cb_ * static_cast<double>(R * in + E * out * in + R * out), 0, name + std::strlen("moe_"));
  }
  // A linear layer's product in bf16 whatever --fp8 says (the router's: ops' linear_*).
  void plain_linear(const char* name, int64_t M, int64_t N, int64_t K) {
    op(name, cat(M, "x", N, "x", K), gemm_size(2.0 * M * N * K), 2.0 * M * N * K,
       cb_ * static_cast<double>(M * K + N * K + M * N));
  }

  void forward_backward();
  void block_forward(int64_t layer, bool to_output);
  void mlp_forward();
  void moe_forward();
  void moe_combine();
  void block_backward(int64_t layer);
  void moe_backward();
  void exchange(bool to_experts);
  void mlp_backward_tiled();
  void head_forward_backward();
  void optimizer_step();
  // the store (parallel/): weights, prefetch, release, grads, grads_ready
  void weights(int u);
  void prefetch(int u);
  void release(int u);
  void grads(int u);
  void grads_ready(int u);
  void reduce(int u, BenchCollective kind);
  void finish_pending();

  const PlannedRun& run_;
  const ParallelSection& p_;
  const ModelConfig& c_;
  ParamTable table_;
  const int ep_, replicas_;  // --expert-parallel N (1: none) and the ranks holding each shard, D
  const int64_t N_;
  const double cb_;
  const bool sharded_, zero2_, split_;
  const int64_t tile_;      // tokens per MLP tile: N_ untiled
  const DType grad_dtype_;  // the blocks' gradients
  const bool fp8_;          // the block linears' FP8 ops (model/block_linears.h)
  StepPhase phase_ = StepPhase::kForward;
  bool last_micro_ = true;
  std::vector<StepItem> items_;
  int next_id_ = 0;
  // the store's state
  int keep_unit_ = -1;
  bool kept_ = false;
  std::map<int, int> in_flight_;  // unit -> its gather
  std::map<int, bool> gathered_, full_grads_;  // zero2: gathered_ from the unit's first use on (the step's)
  int pending_ = -1, last_all_reduce_ = -1;  // the reduction whose result is not yet taken
  int last_experts_reduce_ = -1;             // the experts units' last all-reduce over their replicas
  DType pending_grad_ = DType::kF32;
  int64_t pending_n_ = 0;
};

// Transformer::forward_backward: the embedding, the blocks, the head, the blocks' backward.
void StepWalk::forward_backward() {
  const int64_t L = c_.num_layers, C = c_.hidden_size;
  const int embed = table_.embed_unit(), norm = table_.norm_unit();
  phase_ = StepPhase::kForward;
  weights(embed);
  op("embedding_forward", cat(N_, "x", C), N_, 0, 2 * cb_ * static_cast<double>(N_ * C));
  release(embed);
  for (int64_t l = 0; l < L; ++l) {
    weights(table_.block_unit(l));
    prefetch(l + 1 < L ? table_.block_unit(l + 1) : norm);
    block_forward(l, true);
    release(table_.block_unit(l));
  }
  if (c_.sparse_layers() > 0 && c_.moe.output_router_logits)  // the load-balancing loss and its gradient
    moe_op("moe_aux_loss", cat(c_.sparse_layers(), "x", c_.moe.num_experts), 1,
           4.0 * static_cast<double>((2 * c_.sparse_layers() + 1) * c_.moe.num_experts), "rmsnorm_forward");
  head_forward_backward();
  phase_ = StepPhase::kBackward;
  for (int64_t l = L - 1; l >= 0; --l) {
    const int u = table_.block_unit(l);
    weights(u);
    if (l > 0) prefetch(table_.block_unit(l - 1));
    if (p_.recompute == Recompute::kFull) block_forward(l, false);
    if (p_.recompute == Recompute::kSelective) {
      per_token("rmsnorm_forward", C, 2);
      qk_norm_rope("qk_norm_rope_forward", 2);
      per_token("rmsnorm_forward", C, 2);
    }
    grads(u);
    block_backward(l);
    release(u);
    grads_ready(u);
    if (table_.experts_unit(l) >= 0) grads_ready(table_.experts_unit(l));
  }
  grads(embed);
  op("embedding_backward", cat(N_, "x", C), N_, 0, (cb_ + 8) * static_cast<double>(N_ * C));
  grads_ready(embed);
}

// Block::forward (model/block.h; to_output false: full recomputation, up to gate_up, or a
// sparse layer's experts' outputs).
void StepWalk::block_forward(int64_t layer, bool to_output) {
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim();
  per_token("rmsnorm_forward", C, 2);
  linear("linear_forward", N_, Q, C, true);
  qk_norm_rope("qk_norm_rope_forward", 2);
  attention("attention_forward", 1.0);
  linear("linear_forward", N_, C, c_.q_dim());
  per_token("add_rmsnorm_forward", C, 4);
  const bool sparse = c_.sparse_layer(layer);
  if (sparse) moe_forward();
  else if (tile_ == N_) linear("linear_forward", N_, 2 * I, C, true);
  if (!to_output) return;
  if (sparse) moe_combine();
  else mlp_forward();
  op("add", cat(dtype_name(run_.compute_dtype), " ", N_ * C), N_ * C, 0,
     3 * cb_ * static_cast<double>(N_ * C));
}

// Block::mlp_forward: untiled, on Block::forward's gate_up; tiled (MlpTiles), gate_up tile by tile.
void StepWalk::mlp_forward() {
  const int64_t C = c_.hidden_size, I = c_.intermediate_size;
  for (int64_t r0 = 0; r0 < N_; r0 += tile_) {
    const int64_t rows = std::min(N_, r0 + tile_) - r0;
    if (tile_ < N_) linear("linear_forward", rows, 2 * I, C, false, r0 > 0);
    per_token("swiglu_forward", I, 3, rows);
    linear("linear_forward", rows, C, I, tile_ == N_, tile_ < N_ && r0 > 0);
  }
}

// Block::moe_forward: the router's linear and routing, the sort, the gather of the experts'
// rows, their gate/up, SwiGLU and down projection. Bytes: the router's logits read and its
// probabilities, top-k indices and weights written; the sort's assignment ids read and
// written nine times over (ops/cuda/moe.cu: the iota, the radix sort's histogram and pass of
// keys and values, the offsets' and rows' pass); a gathered row read and written.
void StepWalk::moe_forward() {
  const int64_t C = c_.hidden_size, E = c_.moe.num_experts, K = c_.moe.top_k, Im = c_.moe.intermediate;
  const int64_t R = N_ * K;
  const double n = static_cast<double>(N_), r = static_cast<double>(R);
  plain_linear("linear_forward", N_, E, C);
  moe_op("moe_router_forward", cat(N_, "x", E, " top ", K), N_, n * E * (cb_ + 4) + 8 * r, "rmsnorm_forward");
  moe_op("moe_sort", cat(R, " to ", E), R, 36 * r, "embedding_forward");
  moe_op("moe_gather", cat(R, "x", C), R, 2 * cb_ * r * C + 4 * r, "embedding_forward");
  if (ep_ > 1) exchange(true);
  experts_linear("moe_linear_forward", 2 * Im, C);
  per_token("swiglu_forward", Im, 3, R);
  experts_linear("moe_linear_forward", C, Im);
  if (ep_ > 1) exchange(false);
}

// ExpertParallel's dispatch (to_experts) or collect at the balanced routing: a rank's n K sorted
// rows, n K / N to each member, n K / E of each (expert, member) pair. Dispatch: each member's
// rows copied into its chunk of the send buffer, the all_to_all (N chunks of C; waited on at
// once), then the received rows laid out by local expert and member; collect the mirror. The
// copies are copy_rows (a row read and written), priced at their kin's rate (embedding_forward,
// a gather of rows).
void StepWalk::exchange(bool to_experts) {
  const int64_t C = c_.hidden_size, K = c_.moe.top_k, E = c_.moe.num_experts, El = E / ep_;
  const int64_t chunk = (N_ * K + ep_ - 1) / ep_, pair = std::max<int64_t>(1, N_ * K / E);
  auto copies = [&](int64_t calls, int64_t rows) {
    for (int64_t i = 0; i < calls; ++i)
      moe_op("copy_rows", cat(rows, "x", C), rows, 2 * cb_ * static_cast<double>(rows * C), "embedding_forward");
  };
  copies(to_experts ? ep_ : El * ep_, to_experts ? chunk : pair);
  wait(all_to_all(ep_ * chunk * C * static_cast<int64_t>(cb_)));
  copies(to_experts ? El * ep_ : ep_, to_experts ? pair : chunk);
}

// Block::forward's combine: each token's K outputs read, weighted, written once.
void StepWalk::moe_combine() {
  const int64_t C = c_.hidden_size, R = N_ * c_.moe.top_k;
  moe_op("moe_combine_forward", cat(R, "x", C), R,
         cb_ * static_cast<double>(R * C + N_ * C) + 8.0 * static_cast<double>(R), "embedding_forward");
}

// Block::moe_backward: the combine's, the experts' (down, SwiGLU, gate/up; the rows gathered
// again), the gather's and the router's backward, and the router's linear.
void StepWalk::moe_backward() {
  const int64_t C = c_.hidden_size, E = c_.moe.num_experts, K = c_.moe.top_k, Im = c_.moe.intermediate;
  const int64_t R = N_ * K;
  const double n = static_cast<double>(N_), r = static_cast<double>(R);
  moe_op("moe_combine_backward", cat(R, "x", C), R, cb_ * (n * C + 2 * r * C) + 12 * r, "embedding_forward");
  if (ep_ > 1) exchange(true);
  experts_linear("moe_linear_backward_input", C, Im);
  per_token("swiglu_backward", Im, 6, R);
  experts_linear("moe_linear_backward_weight", C, Im);
  if (ep_ == 1) moe_op("moe_gather", cat(R, "x", C), R, 2 * cb_ * r * C + 4 * r, "embedding_forward");
  experts_linear("moe_linear_backward_weight", 2 * Im, C);
  experts_linear("moe_linear_backward_input", 2 * Im, C);
  if (ep_ > 1) exchange(false);
  moe_op("moe_gather_backward", cat(R, "x", C), R, cb_ * (r * C + n * C) + 4 * r, "embedding_forward");
  moe_op("moe_router_backward", cat(N_, "x", E), N_, n * E * (4 + cb_) + 12 * r, "rmsnorm_forward");
  plain_linear("linear_backward_weight", N_, E, C);
  plain_linear("linear_backward_input", N_, E, C);
}

// MlpTiles::backward (model/mlp_tiles.h): gate_up recomputed each tile; bf16 gradients summed in F32.
void StepWalk::mlp_backward_tiled() {
  const int64_t C = c_.hidden_size, I = c_.intermediate_size;
  for (int64_t r0 = 0; r0 < N_; r0 += tile_) {
    const int64_t rows = std::min(N_, r0 + tile_) - r0;
    linear("linear_forward", rows, 2 * I, C, false, true);
    linear("linear_backward_input", rows, C, I);
    per_token("swiglu_backward", I, 6, rows);
    linear("linear_backward_weight", rows, C, I);
    linear("linear_backward_weight", rows, 2 * I, C);
    linear("linear_backward_input", rows, 2 * I, C);
  }
  const DType g = unit_grad_dtype(table_.block_unit(0));
  if (g == DType::kF32) return;
  convert(DType::kF32, g, C * I);
  convert(DType::kF32, g, 2 * I * C);
}

// Block::backward (its MLP: Block::mlp_backward).
void StepWalk::block_backward(int64_t layer) {
  const int64_t C = c_.hidden_size, I = c_.intermediate_size, Q = c_.qkv_dim();
  if (c_.sparse_layer(layer)) {
    moe_backward();
  } else if (tile_ < N_) {
    mlp_backward_tiled();
  } else {
    linear("linear_backward_input", N_, C, I);
    per_token("swiglu_backward", I, 6);
    linear("linear_backward_weight", N_, C, I, true);
    linear_backward(N_, 2 * I, C);
  }
  per_token("rmsnorm_backward", C, 3);
  linear_backward(N_, C, c_.q_dim());
  attention("attention_backward", 2.5);
  qk_norm_rope("qk_norm_rope_backward", 3);
  linear_backward(N_, Q, C);
  per_token("rmsnorm_backward", C, 3);
}

// Transformer::head_forward_backward: the final norm, the output projection fused with the
// cross-entropy (forward, dh and dw: 3 products of N x V x C), the norm's backward.
void StepWalk::head_forward_backward() {
  const int64_t C = c_.hidden_size, V = c_.vocab_size;
  const int embed = table_.embed_unit(), norm = table_.norm_unit(), head = table_.lm_head_unit();
  weights(norm);
  if (head != norm) prefetch(head);
  per_token("rmsnorm_forward", C, 2);
  phase_ = StepPhase::kBackward;
  weights(head);
  grads(head);
  op("cross_entropy_forward_backward", cat(N_, "x", V, "x", C), gemm_size(6.0 * static_cast<double>(N_ * V * C)),
     6.0 * static_cast<double>(N_ * V * C),
     cb_ * static_cast<double>(2 * N_ * C + V * C) + 8.0 * static_cast<double>(V * C));
  release(head);
  if (head != embed) grads_ready(head);
  grads(norm);
  per_token("rmsnorm_backward", C, 3);
  release(norm);
  grads_ready(norm);
}

// ---- the store
void StepWalk::prefetch(int u) {
  if (!sharded_ || gathered_[u]) return;
  if (!split_ && !zero2_) convert(DType::kF32, DType::kF32, unit(u).shard());  // fp32 compute: a copy of the shard
  in_flight_[u] = collective(BenchCollective::kAllGather, unit(u).padded * static_cast<int64_t>(cb_));
  gathered_[u] = true;
}

void StepWalk::weights(int u) {
  if (!sharded_) return;
  if (u == keep_unit_ && kept_) return;  // gathered since its forward
  prefetch(u);
  if (zero2_ && !in_flight_.count(u)) return;  // gathered since the last update
  wait(in_flight_.at(u));
  in_flight_.erase(u);
}

void StepWalk::release(int u) {
  if (!sharded_ || zero2_) return;
  if (u == keep_unit_) {
    kept_ = !kept_;
    if (kept_) return;  // after its forward: its backward comes next
  }
  gathered_[u] = false;
}

void StepWalk::grads(int u) {
  if (!sharded_ || full_grads_[u] || unit(u).experts) return;  // an experts unit: its owned gradient
  const UnitInfo& info = unit(u);
  if (unit_grad_dtype(u) == DType::kF32)
    zero(info.padded * 4);  // summed into
  else if (info.padded > info.numel)
    zero((info.padded - info.numel) * 2);  // bf16 is overwritten, all but the padding
  full_grads_[u] = true;
}

void StepWalk::grads_ready(int u) {
  if (run_.world == 1) return;
  if (unit(u).experts) {  // ParamStore::grads_ready_experts: in its dtype, over the replicas, on the last micro-batch
    if (replicas_ > 1 && last_micro_)
      last_experts_reduce_ = collective(BenchCollective::kAllReduce,
                                        unit(u).padded * static_cast<int64_t>(dtype_size(unit_grad_dtype(u))),
                                        replicas_);
    return;
  }
  if (!sharded_) {
    if (last_micro_) reduce(u, BenchCollective::kAllReduce);  // no_sync before the last micro-batch
    return;
  }
  if (p_.fsdp_defer_sync && !last_micro_) return;
  reduce(u, BenchCollective::kReduceScatter);
  full_grads_[u] = false;
}

// GradReducer::all_reduce and reduce_scatter: in place when the gradient is in the wire
// dtype (DDP: several in flight), else through a wire copy, one reduction in flight.
void StepWalk::reduce(int u, BenchCollective kind) {
  const DType g = unit_grad_dtype(u), wire = p_.reduce_dtype;
  const int64_t padded = unit(u).padded, bytes = padded * static_cast<int64_t>(dtype_size(wire));
  if (!sharded_ && g == wire) {
    last_all_reduce_ = collective(kind, bytes);
    return;
  }
  finish_pending();
  if (g != wire) convert(g, wire, padded);
  pending_ = collective(kind, bytes);
  pending_grad_ = g;
  pending_n_ = sharded_ ? unit(u).shard() : padded;
}

// GradReducer::finish_pending: DDP converts the reduced copy back into the gradient; FSDP
// adds the reduced shard (widened from a bf16 wire) into the owned one.
void StepWalk::finish_pending() {
  if (pending_ < 0) return;
  wait(pending_);
  const DType wire = p_.reduce_dtype;
  if (!sharded_) {
    convert(wire, pending_grad_, pending_n_);
  } else {
    if (wire == DType::kBF16) convert(DType::kBF16, DType::kF32, pending_n_);
    op("add", cat("F32 ", pending_n_), pending_n_, 0, 12.0 * static_cast<double>(pending_n_));
  }
  pending_ = -1;
}

// The Trainer's optimizer step (optim/optimizer.h): the reductions finished (the experts'
// over their replicas last), the global norm (a zeroed scalar and each owned gradient's sum of
// squares; ddp under expert parallelism: the rank's own units', then a second scalar for the
// experts units', summed over the ranks), then AdamW unit by unit (split masters: 26 or 28
// bytes an element; across ranks sharded, every owned gradient zeroed after, where the next
// step adds into it). An experts unit is owned whole, in the blocks' gradient dtype.
void StepWalk::optimizer_step() {
  phase_ = StepPhase::kOptimizer;
  finish_pending();
  if (last_all_reduce_ >= 0) wait(last_all_reduce_);
  if (last_experts_reduce_ >= 0) wait(last_experts_reduce_);
  zero(4);
  const size_t units = table_.units().size();
  std::vector<std::pair<int64_t, DType>> owned(units);
  for (size_t u = 0; u < units; ++u) {
    const UnitInfo& info = table_.units()[u];
    const bool shard = sharded_ && !info.experts;
    if (info.experts && !sharded_ && (u == 0 || !table_.units()[u - 1].experts)) zero(4);  // the summed part's scalar
    owned[u] = {shard ? info.shard() : info.padded, shard ? DType::kF32 : unit_grad_dtype(static_cast<int>(u))};
    op("sum_squares", cat(dtype_name(owned[u].second), " ", owned[u].first),
       owned[u].first, 0, static_cast<double>(owned[u].first * static_cast<int64_t>(dtype_size(owned[u].second))));
  }
  for (size_t u = 0; u < units; ++u) {
    const auto [n, g] = owned[u];
    const double gb = static_cast<double>(dtype_size(g)), e = static_cast<double>(n);
    if (split_) {
      op("adamw_step", cat("split ", n), n, 0, (24 + gb) * e);
      if (sharded_) zero(n * static_cast<int64_t>(gb));
    } else {
      op("adamw_step", cat(n), n, 0, (24 + gb * (sharded_ ? 2 : 1)) * e);
    }
  }
}

}  // namespace

std::vector<StepItem> step_program(const PlannedRun& run) {
  ANVIL_ENSURE(run.parallel.recompute != Recompute::kAuto, kInternal, "step_program: recompute auto is unresolved");
  ANVIL_ENSURE(run.data.grad_accum >= 1 && run.world >= 1, kUsage,
               "step model: --grad-accum and --nproc must be >= 1");
  return StepWalk(run).run();
}

}  // namespace anvil
