// The parameter table's layout (model/params.h), and the gradient dtype's names and rule.
#include "model/params.h"

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

ParamTable::ParamTable(const ModelConfig& c, int world_size) : world_(world_size) {
  ANVIL_ENSURE(world_size >= 1, kInternal, "world size ", world_size);
  num_layers_ = static_cast<int>(c.num_layers);
  tied_ = c.tie_word_embeddings;
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

  // A sparse layer's router and experts: every expert's gate and up rows, then every expert's
  // down projection, so that each group is one (E, rows, cols) tensor (FusedExperts).
  const int64_t E = c.moe.num_experts, Im = c.moe.intermediate;
  auto add_experts = [&](BlockLayout& b, int unit, const std::string& p) {
    b.router_w = Part{add(unit, p + "mlp.gate.weight", {E, C}), {E, C}};
    const std::string x = p + "mlp.experts.";
    b.experts_gate_up = Part{units_[static_cast<size_t>(unit)].numel, {E, 2 * Im, C}};
    for (int64_t e = 0; e < E; ++e) {
      add(unit, x + std::to_string(e) + ".gate_proj.weight", {Im, C});
      add(unit, x + std::to_string(e) + ".up_proj.weight", {Im, C});
    }
    b.experts_down = Part{units_[static_cast<size_t>(unit)].numel, {E, C, Im}};
    for (int64_t e = 0; e < E; ++e) add(unit, x + std::to_string(e) + ".down_proj.weight", {C, Im});
    fused_.push_back({x + "gate_up_proj", x + "0.gate_proj.weight", unit, b.experts_gate_up.offset, {E, 2 * Im, C}});
    fused_.push_back({x + "down_proj", x + "0.down_proj.weight", unit, b.experts_down.offset, {E, C, Im}});
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
      add_experts(b, u, p);
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
  for (auto& unit : units_) unit.padded = round_up(unit.numel, kShardAlign * world_size);
}

Tensor tensor_at(const Tensor& flat, int64_t offset, Shape shape) {
  ANVIL_ASSERT(offset >= 0 && offset + shape.numel() <= flat.numel());
  return Tensor(static_cast<char*>(flat.data) + static_cast<size_t>(offset) * dtype_size(flat.dtype), flat.dtype,
                shape, flat.device);
}

BlockWeights ParamTable::block_weights(int64_t layer, const Tensor& unit) const {
  ANVIL_ASSERT(layer >= 0 && layer < num_layers_);
  auto view = [&](const Part& part) { return part.offset < 0 ? Tensor() : tensor_at(unit, part.offset, part.shape); };
  const BlockLayout& b = sparse_[static_cast<size_t>(layer)] ? moe_ : dense_;
  return {view(b.attn_norm), view(b.qkv_w),    view(b.qkv_b),     view(b.q_norm),          view(b.k_norm),
          view(b.o_w),       view(b.mlp_norm), view(b.gate_up_w), view(b.down_w),          view(b.router_w),
          view(b.experts_gate_up), view(b.experts_down)};
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
