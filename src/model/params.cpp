// The parameter table's layout (model/params.h), and the gradient dtype's names and rule.
#include "model/params.h"

#include <algorithm>

#include "core/error.h"
#include "core/enum_names.h"

namespace anvil {
namespace {

constexpr EnumName<GradDType> kGradDTypeNames[] = {
    {GradDType::kAuto, "auto"}, {GradDType::kF32, "fp32"}, {GradDType::kBF16, "bf16"}};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

GradDType parse_grad_dtype(const std::string& name) { return parse_enum(kGradDTypeNames, name, "gradient dtype"); }

const char* grad_dtype_name(GradDType g) { return enum_name(kGradDTypeNames, g); }

DType resolve_grad_dtype(GradDType g, DType compute_dtype, int64_t grad_accum) {
  const bool can = compute_dtype == DType::kBF16 && grad_accum == 1;
  if (g == GradDType::kAuto) return can ? DType::kBF16 : DType::kF32;
  if (g == GradDType::kF32) return DType::kF32;
  ANVIL_ENSURE(compute_dtype == DType::kBF16, kUsage, "--grad-dtype bf16 needs a bf16 device (a GPU)");
  ANVIL_ENSURE(grad_accum == 1, kUsage, "--grad-dtype bf16 needs --grad-accum 1 (here: ", grad_accum,
               "): the gradients of several micro-batches are summed, in fp32");
  return DType::kBF16;
}

ExpertLayout ExpertLayout::of_rank(int degree, int rank, int world) {
  ANVIL_ENSURE(degree >= 1 && world % degree == 0 && rank >= 0 && rank < world, kInternal, "expert parallel ",
               degree, " for rank ", rank, " of ", world);
  const int D = world / degree;
  return {degree, rank / D, rank % D};
}

ExpertLayout ExpertLayout::where_valid(const ModelConfig& c, int64_t degree, int rank, int world) {
  const int64_t E = c.moe.num_experts;
  if (degree <= 1 || E == 0 || E % degree != 0 || world % degree != 0) return {};
  return of_rank(static_cast<int>(degree), rank, world);
}

ParamTable::ParamTable(const ModelConfig& c, int world_size, ExpertLayout experts)
    : config_(c), world_(world_size), expert_layout_(experts) {
  ANVIL_ENSURE(world_size >= 1, kInternal, "world size ", world_size);
  const int N = experts.degree;
  ANVIL_ENSURE(N >= 1 && world_size % N == 0 && c.moe.num_experts % std::max(N, 1) == 0 && experts.shard >= 0 &&
                   experts.shard < N && experts.replica >= 0 && experts.replica < world_size / N,
               kInternal, "expert layout ", N, "/", experts.shard, "/", experts.replica, " for world ", world_size,
               " and ", c.moe.num_experts, " experts");
  num_layers_ = static_cast<int>(c.num_layers);
  tied_ = c.tie_word_embeddings;
  experts_unit_.assign(static_cast<size_t>(num_layers_), -1);
  const int64_t C = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;

  auto add_unit = [&](const std::string& name) {
    units_.push_back(UnitInfo{name, 0, 0, world_size});
    return static_cast<int>(units_.size() - 1);
  };
  auto add = [&](int unit, const std::string& name, Shape shape) {
    int64_t off = units_[static_cast<size_t>(unit)].numel;
    entries_.push_back(ParamEntry{name, unit, off, shape});
    units_[static_cast<size_t>(unit)].numel += shape.numel();
    return off;
  };

  // A sparse layer's experts [first, first + n) in `unit`: every expert's gate and up rows, then
  // every expert's down projection, so that each group is one (n, rows, cols) tensor
  // (FusedExperts, where n is every expert).
  const int64_t E = c.moe.num_experts, Im = c.moe.intermediate, El = E / N, first = experts.shard * El;
  auto add_experts = [&](BlockLayout& b, int unit, const std::string& p) {
    const std::string x = p + "mlp.experts.";
    b.experts_gate_up = Part{units_[static_cast<size_t>(unit)].numel, {El, 2 * Im, C}};
    for (int64_t e = first; e < first + El; ++e) {
      add(unit, x + std::to_string(e) + ".gate_proj.weight", {Im, C});
      add(unit, x + std::to_string(e) + ".up_proj.weight", {Im, C});
    }
    b.experts_down = Part{units_[static_cast<size_t>(unit)].numel, {El, C, Im}};
    for (int64_t e = first; e < first + El; ++e) add(unit, x + std::to_string(e) + ".down_proj.weight", {C, Im});
    const std::string e0 = x + std::to_string(first);
    fused_.push_back({x + "gate_up_proj", e0 + ".gate_proj.weight", unit, b.experts_gate_up.offset, {E, 2 * Im, C},
                      first * 2 * Im * C, El * 2 * Im * C});
    fused_.push_back({x + "down_proj", e0 + ".down_proj.weight", unit, b.experts_down.offset, {E, C, Im},
                      first * C * Im, El * C * Im});
  };

  int u = add_unit("embed");
  add(u, "model.embed_tokens.weight", {c.vocab_size, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    u = add_unit("layers." + std::to_string(l));
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Matrices first, in GEMM groups, then the small vectors. A group's part starts at its
    // first tensor and holds the rows of all of them.
    auto part = [&](const std::string& name, Shape shape, Shape part_shape) {
      return Part{add(u, p + name, shape), part_shape};
    };
    BlockLayout b;
    b.qkv_w = part("self_attn.q_proj.weight", {c.q_dim(), C}, {c.qkv_dim(), C});
    add(u, p + "self_attn.k_proj.weight", {c.kv_dim(), C});
    add(u, p + "self_attn.v_proj.weight", {c.kv_dim(), C});
    b.o_w = part("self_attn.o_proj.weight", {C, c.q_dim()}, {C, c.q_dim()});
    const bool sparse = c.sparse_layer(l);
    sparse_.push_back(sparse);
    if (sparse) {
      b.router_w = part("mlp.gate.weight", {E, C}, {E, C});
      if (N == 1) add_experts(b, u, p);  // else in the layer's experts unit, below
    } else {
      b.gate_up_w = part("mlp.gate_proj.weight", {I, C}, {2 * I, C});
      add(u, p + "mlp.up_proj.weight", {I, C});
      b.down_w = part("mlp.down_proj.weight", {C, I}, {C, I});
    }
    if (c.qkv_bias) {
      b.qkv_b = part("self_attn.q_proj.bias", {c.q_dim()}, {c.qkv_dim()});
      add(u, p + "self_attn.k_proj.bias", {c.kv_dim()});
      add(u, p + "self_attn.v_proj.bias", {c.kv_dim()});
    }
    b.attn_norm = part("input_layernorm.weight", {C}, {C});
    b.mlp_norm = part("post_attention_layernorm.weight", {C}, {C});
    if (c.qk_norm) {
      b.q_norm = part("self_attn.q_norm.weight", {hd}, {hd});
      b.k_norm = part("self_attn.k_norm.weight", {hd}, {hd});
    }
    (sparse ? moe_ : dense_) = b;
  }
  u = add_unit("norm");
  add(u, "model.norm.weight", {C});
  if (!c.tie_word_embeddings) {
    u = add_unit("lm_head");
    add(u, "lm_head.weight", {c.vocab_size, C});
  }
  // Expert parallel: each sparse layer's experts of this rank in a unit of their own, after
  // the others (which keep their indices), split among the D replicas of the shard.
  for (int64_t l = 0; N > 1 && l < c.num_layers; ++l) {
    if (!sparse_[static_cast<size_t>(l)]) continue;
    u = add_unit("layers." + std::to_string(l) + ".experts");
    units_.back().world = world_size / N;
    units_.back().experts = true;
    experts_unit_[static_cast<size_t>(l)] = u;
    add_experts(moe_, u, "model.layers." + std::to_string(l) + ".");
  }
  for (auto& unit : units_) unit.padded = round_up(unit.numel, kShardAlign * unit.world);
}

ParamTable::Saved ParamTable::saved_layout() const {
  Saved saved{units_, entries_};
  const int N = expert_layout_.degree;
  if (N == 1) return saved;
  saved.entries.clear();
  for (const ParamEntry& e : entries_)
    if (!units_[static_cast<size_t>(e.unit)].experts) saved.entries.push_back(e);
  for (UnitInfo& u : saved.units)
    if (u.experts) {
      u.numel *= N;  // every shard's experts (the padding between shards included)
      u.padded *= N;
      u.world = world_;
    }
  for (int s = 0; s < N; ++s) {
    const ParamTable shard(config_, world_, ExpertLayout{N, s, 0});
    for (const ParamEntry& e : shard.entries_) {
      const UnitInfo& info = shard.units_[static_cast<size_t>(e.unit)];
      if (info.experts) saved.entries.push_back({e.name, e.unit, s * info.padded + e.offset, e.shape});
    }
  }
  return saved;
}

Tensor tensor_at(const Tensor& flat, int64_t offset, Shape shape) {
  ANVIL_ASSERT(offset >= 0 && offset + shape.numel() <= flat.numel());
  return Tensor(static_cast<char*>(flat.data) + static_cast<size_t>(offset) * dtype_size(flat.dtype), flat.dtype,
                shape, flat.device);
}

BlockWeights ParamTable::block_weights(int64_t layer, const Tensor& unit, const Tensor& experts) const {
  ANVIL_ASSERT(layer >= 0 && layer < num_layers_);
  ANVIL_ASSERT((experts_unit(layer) >= 0) == (experts.data != nullptr));
  auto in = [](const Tensor& t, const Part& part) {
    return part.offset < 0 ? Tensor() : tensor_at(t, part.offset, part.shape);
  };
  auto view = [&](const Part& part) { return in(unit, part); };
  const Tensor& x = experts.data ? experts : unit;
  const BlockLayout& b = sparse_[static_cast<size_t>(layer)] ? moe_ : dense_;
  return {view(b.attn_norm), view(b.qkv_w),    view(b.qkv_b),     view(b.q_norm),          view(b.k_norm),
          view(b.o_w),       view(b.mlp_norm), view(b.gate_up_w), view(b.down_w),          view(b.router_w),
          in(x, b.experts_gate_up), in(x, b.experts_down)};
}

Tensor ParamTable::unit_tensor(int unit, const Tensor& data) const {
  for (const ParamEntry& e : entries_)
    if (e.unit == unit) return tensor_at(data, e.offset, e.shape);
  raise(ErrorKind::kInternal, "unit ", unit, " holds no tensor");
}

const ParamEntry* ParamTable::find(const std::string& name) const {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

int64_t ParamTable::total_numel() const {
  int64_t n = 0;
  for (auto& u : units_) n += u.numel;
  return n;
}

int64_t ParamTable::total_padded() const {
  int64_t n = 0;
  for (auto& u : units_) n += u.padded;
  return n;
}

}  // namespace anvil
