// The parameter table: every Hugging Face tensor's place in the flat units.
//
// A unit is one flat fp32 buffer: the embedding, each transformer block, the final norm,
// and (untied models) the output layer. Gradients and AdamW m and v share the layout, so the
// optimizer is one pass over flat memory and gradient sync is one collective per unit.
// Inside a block, q/k/v weights are stored back to back (one (H+2KV)*hd x C matrix: one
// GEMM), as are gate/up (one 2I x C matrix) and the q/k/v biases. The layout depends only
// on the model config; the padding at the end of each unit (so that it splits evenly into
// world-size shards of aligned size) depends on the world size and holds zeros.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace anvil {

// The dtype of the gradients of the units a backward writes once, element by element (the
// blocks and the final norm; ParamTable::grads_written_once). The embedding (a sum over
// token rows) and an untied output layer (a sum over the cross-entropy's row blocks) keep
// F32 gradients. kBF16 rounds each gradient once, as PyTorch's autocast and FSDP2 round the
// gradient of a bf16 weight copy before it reaches the fp32 .grad; it needs one micro-batch
// per step (the gradients of several are summed, in fp32). On several ranks the reduction
// then sums the ranks' bf16 gradients (parallel/grad_reducer.h: in fp32 by default, rounded
// once back to bf16 in DDP, added to the fp32 shard in FSDP). kAuto: kBF16 where it can
// be, on a bf16 device; else kF32. Half the bytes of those gradients: less
// memory, and less for the weight-gradient GEMMs, the norm and AdamW to move.
enum class GradDType { kAuto, kF32, kBF16 };
// "auto" | "fp32" | "bf16" (a kUsage error otherwise), and back.
GradDType parse_grad_dtype(const std::string& name);
const char* grad_dtype_name(GradDType g);
// F32 or BF16 for a run; kUsage error when kBF16 is asked where it cannot hold.
DType resolve_grad_dtype(GradDType g, DType compute_dtype, int64_t grad_accum);

struct ParamEntry {
  std::string name;  // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  int unit = 0;
  int64_t offset = 0;  // elements from the start of the unit
  Shape shape;
  int64_t numel() const { return shape.numel(); }
};

// A rank's share of the sparse layers' experts under --expert-parallel (docs/ARCHITECTURE.md,
// Expert parallelism): `degree` N shards of E/N experts; this rank holds shard `shard` (s), as
// replica `replica` (d) of the D = world / N ranks holding it. degree 1: every expert, in the
// block units as before.
struct ExpertLayout {
  int degree = 1;
  int shard = 0;
  int replica = 0;
  // Rank `rank` of `world`: shard rank / D, replica rank % D. N must divide world (kInternal).
  static ExpertLayout of_rank(int degree, int rank, int world);
  // of_rank where `degree` divides the model's experts and the ranks, else every expert (degree
  // 1): for what reads the setting before resolve_config refuses such a degree (a rank's
  // table, the memory plan's).
  static ExpertLayout where_valid(const ModelConfig& c, int64_t degree, int rank, int world);
  int replicas(int world) const { return world / degree; }
};

struct UnitInfo {
  std::string name;     // "embed", "layers.3", "norm", "lm_head"
  int64_t numel = 0;    // elements holding parameters
  int64_t padded = 0;   // numel rounded up to world * kShardAlign
  int64_t shard() const { return padded / world; }
  int world = 1;        // the ranks that split it: every rank, or an experts unit's replicas
  bool experts = false;  // a sparse layer's experts unit (ExpertLayout degree > 1)
};

// A view of `shape` at element `offset` of a flat buffer.
Tensor tensor_at(const Tensor& flat, int64_t offset, Shape shape);

// A block unit's tensors, each a view of the unit (its weights, or its gradients) shaped as the
// table holds it: q/k/v, gate/up and the q/k/v biases as the fused groups the GEMMs run
// ((H+2KV)*hd x C, 2I x C, (H+2KV)*hd). Absent (qkv_b without biases, q_norm and k_norm
// without qk-norm): empty. A sparse layer (Qwen3-MoE) has router_w (E x C), experts_gate_up
// (E x 2Im x C: each expert's gate then up rows) and experts_down (E x C x Im) in place of
// gate_up_w and down_w: the per-expert tensors laid back to back, which is also the layout of
// transformers' fused mlp.experts.gate_up_proj and down_proj.
struct BlockWeights {
  Tensor attn_norm, qkv_w, qkv_b, q_norm, k_norm, o_w, mlp_norm, gate_up_w, down_w;
  Tensor router_w, experts_gate_up, experts_down;
  bool sparse() const { return router_w.data != nullptr; }
};

// A sparse layer's experts as one tensor (transformers 5's layout with save_original_format
// false): `name` ("model.layers.3.mlp.experts.gate_up_proj", (E, 2Im, C), or down_proj, (E, C,
// Im)) holds the per-expert entries from `first` on, which lie back to back in the unit. Under
// expert parallelism the unit holds the rank's experts only: `held` elements of the tensor from
// element `from` on (else all of it, from 0).
struct FusedExperts {
  std::string name;
  std::string first;  // the first per-expert entry's name
  int unit = 0;
  int64_t offset = 0;
  Shape shape;
  int64_t from = 0, held = 0;
};

class ParamTable {
 public:
  static constexpr int64_t kShardAlign = 64;  // elements: 256-byte aligned fp32 shards

  // experts: this rank's share of the experts (ExpertLayout; the default: all of them).
  ParamTable(const ModelConfig& config, int world_size, ExpertLayout experts = {});

  const std::vector<UnitInfo>& units() const { return units_; }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  const ParamEntry* find(const std::string& name) const;
  // The views of layer `layer`'s tensors in `unit`, that block's flat weights or gradients
  // (with an experts unit, experts_unit(layer): the experts' views in `experts`, its data).
  BlockWeights block_weights(int64_t layer, const Tensor& unit, const Tensor& experts = Tensor()) const;
  // The experts unit of a sparse layer under expert parallelism; -1: none (the experts are
  // in the block unit, or the layer is dense).
  int experts_unit(int64_t layer) const { return experts_unit_[static_cast<size_t>(layer)]; }
  const ExpertLayout& expert_layout() const { return expert_layout_; }
  // Which of a unit's `world` slices rank `rank` of the run writes to a checkpoint (and owns
  // in fsdp): its rank, or for an experts unit its replica index.
  int slice_rank(int unit, int rank) const {
    return units_[static_cast<size_t>(unit)].experts ? expert_layout_.replica : rank;
  }
  // The layout a checkpoint records (meta.json's units and tensors): this table's, except that
  // each experts unit holds every shard's experts, the N shards back to back (each `padded`
  // long), so that rank r's slice of it is its replica's slice of its own shard and every
  // expert is listed at its place under its own name.
  struct Saved {
    std::vector<UnitInfo> units;
    std::vector<ParamEntry> entries;
  };
  Saved saved_layout() const;
  // The sparse layers' experts, each group as one tensor (FusedExperts).
  const std::vector<FusedExperts>& fused_experts() const { return fused_; }
  // The tensor of a unit that holds one (the embedding, the final norm, the output layer),
  // viewed in `data`, the unit's flat weights or gradients.
  Tensor unit_tensor(int unit, const Tensor& data) const;
  int world() const { return world_; }

  int embed_unit() const { return 0; }
  int block_unit(int64_t layer) const { return 1 + static_cast<int>(layer); }
  int norm_unit() const { return 1 + num_layers_; }
  int lm_head_unit() const { return tied_ ? embed_unit() : norm_unit() + 1; }  // tied: the embedding
  // Every element of this unit's gradient is written once per backward (GradDType above).
  bool grads_written_once(int unit) const {
    return (unit >= block_unit(0) && unit <= norm_unit()) || units_[static_cast<size_t>(unit)].experts;
  }
  int64_t total_numel() const;   // parameters, counted once
  int64_t total_padded() const;  // with padding

 private:
  ModelConfig config_;
  int world_ = 1;
  ExpertLayout expert_layout_;
  std::vector<int> experts_unit_;  // per layer
  int num_layers_ = 0;
  bool tied_ = false;
  std::vector<UnitInfo> units_;
  std::vector<ParamEntry> entries_;
  // Where each part of a block unit starts and its shape; the same in every block.
  struct Part {
    int64_t offset = -1;  // -1: absent
    Shape shape;
  };
  struct BlockLayout {
    Part attn_norm, qkv_w, qkv_b, q_norm, k_norm, o_w, mlp_norm, gate_up_w, down_w;
    Part router_w, experts_gate_up, experts_down;
  };
  // The dense layers' layout and the sparse layers' (Qwen3-MoE), each the same in every such
  // block; sparse_[l]: layer l is sparse.
  BlockLayout dense_, moe_;
  std::vector<bool> sparse_;
  std::vector<FusedExperts> fused_;
};

}  // namespace anvil
