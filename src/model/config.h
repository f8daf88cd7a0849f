// ModelConfig: the shape and numerics of a supported causal LM, read from config.json.
//
// Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM and Qwen3MoeForCausalLM share one
// block; they differ in q/k/v biases (Qwen2), per-head q/k RMSNorm (Qwen3, Qwen3-MoE), RoPE
// scaling (llama3, yarn) and the MLP (Qwen3-MoE's sparse layers: a router and experts). Both
// config forms are read: transformers 5 (rope_parameters) and transformers 4 (top-level
// rope_theta and rope_scaling). Anything else (other architectures, sliding windows,
// other mixtures of experts, other RoPE types, other activations) is refused with a message that
// names the setting: a silently different model would be worse than none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace anvil {

enum class Arch { kQwen3, kQwen2, kLlama, kQwen3Moe };

struct RopeConfig {
  std::string type = "default";  // default | llama3 | yarn
  double theta = 10000.0;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3 (factor: yarn too)
  int64_t original_max_position_embeddings = 8192;                     // llama3, yarn
  // yarn, as transformers' _compute_yarn_parameters reads them (attention_factor resolved
  // from factor, mscale and mscale_all_dim where the config does not give it).
  double beta_fast = 32.0, beta_slow = 1.0, attention_factor = 1.0;
  bool truncate = true;
};

// Qwen3-MoE's mixture of experts (transformers' Qwen3MoeConfig). Layer l is sparse (a router
// and experts in place of the dense MLP) when l is not in mlp_only_layers and (l + 1) is a
// multiple of decoder_sparse_step; the dense layers use intermediate_size.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: no experts (a dense model)
  int64_t top_k = 0;        // num_experts_per_tok
  int64_t intermediate = 0; // moe_intermediate_size, each expert's
  bool norm_topk_prob = false;
  int64_t sparse_step = 1;  // decoder_sparse_step
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;  // transformers adds the auxiliary loss when true
};

struct ModelConfig {
  Arch arch = Arch::kQwen3;
  std::string architecture;  // Hugging Face class name, e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "qwen3", "qwen2", "llama"
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, initializer_range = 0.02;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3
  MoeConfig moe;          // Qwen3-MoE
  Json raw;               // config.json as read, kept for export

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  // Parameters counted once (a tied embedding once).
  int64_t num_parameters() const;
  // Layer l runs the router and experts (MoeConfig's rule); false for every layer of a dense model.
  bool sparse_layer(int64_t l) const;
  int64_t sparse_layers() const;              // how many
  int64_t sparse_index(int64_t l) const;      // l's place among the sparse layers (l sparse)
  bool has_dense_mlp() const { return sparse_layers() < num_layers; }
};

ModelConfig config_from_json(const Json& j, const std::string& source);
ModelConfig load_config(const std::string& model_dir);  // reads model_dir/config.json
// config.json text for a config made here (anvil init): transformers 5 form.
Json config_to_json(const ModelConfig& c);

// Real shapes: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, the MoE
// models qwen3-30b-a3b and qwen3-235b-a22b, and "tiny" (the demo size). Throws kUsage
// listing the names for an unknown one. num_layers > 0: the first num_layers layers only (a
// shallower copy for benchmarks and tests; at most the preset's).
ModelConfig preset_config(const std::string& name, int64_t num_layers = 0);
std::vector<std::string> preset_names();

// RoPE inverse frequencies (head_dim/2), computed in fp32 in the order transformers uses,
// with llama3 or yarn scaling applied.
std::vector<float> rope_inv_freq(const ModelConfig& c);
// One position's RoPE table row, cos and sin (head_dim/2 each), as transformers' rotary
// embedding: fp32 angles inv * position, their fp32 cos and sin times the attention scaling
// (yarn's attention_factor; 1 for the other types).
void rope_row(const ModelConfig& c, const std::vector<float>& inv, int64_t position, float* cos, float* sin);

}  // namespace anvil
