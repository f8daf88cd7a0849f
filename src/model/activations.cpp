// The table of activation buffers (model/activations.h): their shapes, dtypes and order.
#include "model/activations.h"

#include <algorithm>

#include "core/error.h"
#include "core/enum_names.h"
#include "model/fp8_slots.h"

namespace anvil {
namespace {

constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"},
    {Recompute::kAuto, "auto"}};

// The sizes the shapes are made of: T this rank's tokens of a sequence, rope_T the sequence's;
// M the MLP's tile (N untiled).
struct Dims {
  int64_t B, T, N, C, I, H, KV, hd, rope_T, M;
  DType cd;
  int64_t E = 0, K = 0, Im = 0, Ls = 0;  // Qwen3-MoE: experts, per token, their size, sparse layers
};

Dims moe_dims(Dims d, const ModelConfig& c) {
  d.E = c.moe.num_experts;
  d.K = c.moe.top_k;
  d.Im = c.moe.intermediate;
  d.Ls = c.sparse_layers();
  return d;
}

bool moe_block_activation(Activation a) { return a >= Activation::kRouterProbs && a <= Activation::kMoeY; }

// A dense layer's MLP buffers (the untiled gate_up, and the one-of-each of the dense MLP).
bool dense_mlp_activation(Activation a) {
  using enum Activation;
  return a == kGateUp || a == kAct || a == kDAct || a == kDGateUp || a == kGateUpTile || a == kMlpDw;
}

// The element-wise outputs that kSelective recomputes, into one shared set.
bool recomputed_by_selective(Activation a) {
  return a == Activation::kH1 || a == Activation::kQkv || a == Activation::kH2;
}

// One set of block buffers, in allocation order; `set` goes into every entry's index.
std::vector<ActivationBuffer> block_set(const Dims& d, int64_t set) {
  const DType F = DType::kF32;
  return {
      {Activation::kH1, "h1", set, {d.N, d.C}, d.cd},
      {Activation::kRstd1, "rstd1", set, {d.N}, F},
      {Activation::kQkvRaw, "qkv_raw", set, {d.N, d.H + 2 * d.KV, d.hd}, d.cd},
      {Activation::kQkv, "qkv", set, {d.B, d.T, d.H + 2 * d.KV, d.hd}, d.cd},
      {Activation::kRstdQk, "rstd_qk", set, {d.N, d.H + d.KV}, F},
      {Activation::kAtt, "att", set, {d.N, d.H * d.hd}, d.cd},
      {Activation::kLse, "lse", set, {d.B, d.H, d.T}, F},
      {Activation::kXMid, "x_mid", set, {d.N, d.C}, d.cd},
      {Activation::kH2, "h2", set, {d.N, d.C}, d.cd},
      {Activation::kRstd2, "rstd2", set, {d.N}, F},
      {Activation::kGateUp, "gate_up", set, {d.N, 2 * d.I}, d.cd},
      {Activation::kRouterProbs, "router_probs", set, {d.N, d.E}, F},
      {Activation::kTopkIdx, "topk_idx", set, {d.N, d.K}, DType::kI32},
      {Activation::kTopkW, "topk_w", set, {d.N, d.K}, F},
      {Activation::kMoeOrder, "moe_order", set, {d.N, d.K}, DType::kI32},
      {Activation::kMoeRows, "moe_rows", set, {d.N, d.K}, DType::kI32},
      {Activation::kMoeOffsets, "moe_offsets", set, {d.E + 1}, DType::kI32},
      {Activation::kMoeGateUp, "moe_gate_up", set, {d.N, d.K, 2 * d.Im}, d.cd},
      {Activation::kMoeY, "moe_y", set, {d.N, d.K, d.C}, d.cd},
  };
}

// The sparse layers' buffers the model has one of.
std::vector<ActivationBuffer> moe_one_of_each(const Dims& d) {
  const DType F = DType::kF32;
  return {
      {Activation::kRouterLogits, "router_logits", 0, {d.N, d.E}, d.cd},
      {Activation::kDRouterLogits, "d_router_logits", 0, {d.N, d.E}, d.cd},
      {Activation::kDTopkW, "d_topk_w", 0, {d.N, d.K}, F},
      {Activation::kMoeX, "moe_x", 0, {d.N, d.K, d.C}, d.cd},
      {Activation::kMoeAct, "moe_act", 0, {d.N, d.K, d.Im}, d.cd},
      {Activation::kMoeDAct, "moe_d_act", 0, {d.N, d.K, d.Im}, d.cd},
      {Activation::kMoeDGateUp, "moe_d_gate_up", 0, {d.N, d.K, 2 * d.Im}, d.cd},
      {Activation::kMoeDY, "moe_d_y", 0, {d.N, d.K, d.C}, d.cd},
      {Activation::kMoeStats, "moe_stats", 0, {d.Ls, 2, d.E}, F},
      {Activation::kMoeAuxGrad, "moe_aux_grad", 0, {d.E}, F},
  };
}

// The buffers every policy has one of, in allocation order.
std::vector<ActivationBuffer> one_of_each(const Dims& d, int64_t layers) {
  const DType F = DType::kF32;
  return {
      {Activation::kAct, "act", 0, {d.M, d.I}, d.cd},
      {Activation::kDAct, "d_act", 0, {d.M, d.I}, d.cd},
      {Activation::kDGateUp, "d_gate_up", 0, {d.M, 2 * d.I}, d.cd},
      {Activation::kGateUpTile, "gate_up_tile", 0, {d.M, 2 * d.I}, d.cd},
      {Activation::kMlpDw, "mlp_dw", 0, {3 * d.I * d.C}, F},
      {Activation::kDAtt, "d_att", 0, {d.N, d.H * d.hd}, d.cd},
      {Activation::kDQkv, "d_qkv", 0, {d.B, d.T, d.H + 2 * d.KV, d.hd}, d.cd},
      {Activation::kDQkvRaw, "d_qkv_raw", 0, {d.N, d.H + 2 * d.KV, d.hd}, d.cd},
      {Activation::kDx, "dx", 0, {d.N, d.C}, d.cd},
      {Activation::kDh, "dh", 0, {d.N, d.C}, d.cd},
      {Activation::kHFinal, "h_final", 0, {d.N, d.C}, d.cd},
      {Activation::kRstdFinal, "rstd_final", 0, {d.N}, F},
      {Activation::kRopeCos, "rope_cos", 0, {d.rope_T, d.hd / 2}, F},
      {Activation::kRopeSin, "rope_sin", 0, {d.rope_T, d.hd / 2}, F},
      {Activation::kFp8Amax, "fp8_amax", 0, {layers, kBlockLinears, 2}, F},
  };
}

}  // namespace

Recompute parse_recompute(const std::string& name) { return parse_enum(kRecomputeNames, name, "recompute"); }

const char* recompute_name(Recompute r) { return enum_name(kRecomputeNames, r); }

bool is_block_activation(Activation a) { return a >= Activation::kH1 && a <= Activation::kMoeY; }

bool rows_first(Activation a) {
  return a != Activation::kMoeOffsets && a != Activation::kMoeStats && a != Activation::kMoeAuxGrad;
}

int64_t block_sets(const ModelConfig& c, Recompute r) { return r == Recompute::kFull ? 1 : c.num_layers; }

int64_t auto_mlp_tile(const ModelConfig& c, int64_t tokens, DType compute_dtype) {
  const int64_t row = 2 * c.intermediate_size * static_cast<int64_t>(dtype_size(compute_dtype));
  if (tokens * row <= kMlpUntiledBytes) return tokens;
  int64_t tile = 128;
  while (2 * tile * row <= kMlpTileBytes && 2 * tile < tokens) tile *= 2;
  return std::min(tile, tokens);
}

int64_t effective_mlp_tile(const ModelConfig& c, int64_t tokens, DType compute_dtype, int64_t mlp_tile) {
  ANVIL_ENSURE(mlp_tile >= 0, kUsage, "--mlp-tile ", mlp_tile, ": give a number of tokens, or 0 for auto");
  return mlp_tile == kMlpTileAuto ? auto_mlp_tile(c, tokens, compute_dtype) : std::min(mlp_tile, tokens);
}

void check_offload(Recompute r, bool offload) {
  ANVIL_ENSURE(!offload || r == Recompute::kFull || r == Recompute::kAuto, kUsage,
               "--offload-activations with --recompute ", recompute_name(r),
               ": it moves the blocks' checkpoints (the residual stream) to host memory, which is what --recompute "
               "full keeps; under none or selective every block keeps its own buffers, many times the residual, "
               "so offloading the residual alone saves little; use --recompute full (or drop the flag)");
}

std::vector<ActivationBuffer> activation_buffers(const ModelConfig& c, int64_t micro_batch, int64_t seq_len,
                                                 Recompute r, DType compute_dtype, int64_t mlp_tile,
                                                 DType grad_dtype, int64_t context_parallel, bool offload,
                                                 Fp8Recipe fp8) {
  if (r == Recompute::kAuto)
    raise(ErrorKind::kInternal, "activation sizes of recompute ", recompute_name(r), " (resolve auto first)");
  check_offload(r, offload);
  const int64_t P = context_parallel, T = seq_len / P;
  ANVIL_ENSURE(P >= 1 && seq_len % P == 0 && c.num_kv_heads % P == 0 && c.num_heads % P == 0, kInternal,
               "activation sizes: context parallel ", P, " does not divide sequence ", seq_len, " and the heads");
  const int64_t N = micro_batch * T, M = effective_mlp_tile(c, N, compute_dtype, mlp_tile);
  const Dims d = moe_dims({micro_batch, T, N, c.hidden_size, c.intermediate_size,
                           c.num_heads, c.num_kv_heads, c.head_dim, seq_len, M, compute_dtype}, c);
  const bool selective = r == Recompute::kSelective, tiled = M < N;
  // A set's buffers: a dense layer's or a sparse layer's (set: its layer), or both kinds
  // where one set serves every layer (kFull) and the model has both.
  auto for_set = [&](Activation a, int64_t set) {
    const bool any = set == kEveryBlockSet || r == Recompute::kFull;
    const bool sparse = !any && c.sparse_layer(set);
    if (moe_block_activation(a)) return any ? c.sparse_layers() > 0 : sparse;
    if (a == Activation::kGateUp) return any ? c.has_dense_mlp() : !sparse;
    return true;
  };
  auto wanted = [&](Activation a) {
    if (dense_mlp_activation(a) && !c.has_dense_mlp()) return false;
    if (a == Activation::kGateUp) return !tiled;
    if (a == Activation::kGateUpTile) return tiled;
    if (a == Activation::kMlpDw) return tiled && grad_dtype != DType::kF32;
    if (a == Activation::kFp8Amax) return fp8 == Fp8Recipe::kTensorwise;
    return true;
  };
  std::vector<ActivationBuffer> v;
  const int64_t L = c.num_layers;
  for (int64_t l = 0; l <= L; ++l)
    v.push_back({Activation::kResidual, "x", l, {d.N, d.C}, d.cd, offload && l > 0 && l < L});
  if (offload)
    for (int64_t s = 0; s < std::min(kOffloadRing, L - 1); ++s)
      v.push_back({Activation::kResidualRing, "x_ring", s, {d.N, d.C}, d.cd});
  if (selective)
    for (const ActivationBuffer& b : block_set(d, kEveryBlockSet))
      if (recomputed_by_selective(b.what)) v.push_back(b);
  for (int64_t s = 0; s < block_sets(c, r); ++s)
    for (const ActivationBuffer& b : block_set(d, s))
      if ((!selective || !recomputed_by_selective(b.what)) && wanted(b.what) && for_set(b.what, s)) v.push_back(b);
  for (const ActivationBuffer& b : one_of_each(d, L))
    if (wanted(b.what)) v.push_back(b);
  if (c.sparse_layers() > 0)
    for (const ActivationBuffer& b : moe_one_of_each(d)) v.push_back(b);
  if (P > 1) {
    v.push_back({Activation::kCpSend, "cp_send", 0, {d.N, d.H + 2 * d.KV, d.hd}, d.cd});
    v.push_back({Activation::kCpRecv, "cp_recv", 0, {d.N, d.H + 2 * d.KV, d.hd}, d.cd});
  }
  return v;
}

std::vector<ActivationBuffer> decode_buffers(const ModelConfig& c, int64_t rows, DType compute_dtype) {
  const Dims d = moe_dims({rows, 1, rows, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim,
                           1, rows, compute_dtype}, c);
  const bool moe = c.sparse_layers() > 0, dense = c.has_dense_mlp();
  std::vector<ActivationBuffer> v = {{Activation::kResidual, "x", 0, {d.N, d.C}, d.cd}};
  for (const ActivationBuffer& b : block_set(d, 0))
    if (b.what != Activation::kLse && b.what != Activation::kH2 && b.what != Activation::kRstd2 &&
        (b.what != Activation::kGateUp || dense) && (!moe_block_activation(b.what) || moe))
      v.push_back(b);
  for (const ActivationBuffer& b : one_of_each(d, c.num_layers))
    if (b.what == Activation::kAct && dense) v.push_back(b);
  if (moe)
    for (const ActivationBuffer& b : moe_one_of_each(d))
      if (b.what == Activation::kRouterLogits || b.what == Activation::kMoeX || b.what == Activation::kMoeAct)
        v.push_back(b);
  return v;
}

int64_t activation_bytes(const std::vector<ActivationBuffer>& buffers) {
  int64_t n = 0;
  for (const ActivationBuffer& b : buffers) n += b.host ? 0 : b.bytes();
  return n;
}

int64_t host_activation_bytes(const std::vector<ActivationBuffer>& buffers) {
  int64_t n = 0;
  for (const ActivationBuffer& b : buffers) n += b.host ? b.bytes() : 0;
  return n;
}

}  // namespace anvil
