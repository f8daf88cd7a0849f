// A tiny Qwen3-MoE model folder for the plan's, step model's and router statistics' tests:
// anvil init (fresh weights, seed 0) of 4 layers of hidden 48 and a vocabulary of 1,000
// (write_random_blocks' ids), 4 experts of intermediate 24, 2 per token, the auxiliary loss on
// (output_router_logits); `sparsity` adds its mlp_only_layers or decoder_sparse_step. The
// model lies in a fresh temporary folder, named `name`.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "io/safetensors.h"
#include "testing.h"

namespace anvil::testing {

inline std::string tiny_moe_dir(const std::string& name, const Json& sparsity) {
  const std::string dir = temp_dir("moe-" + name);
  Json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"model_type", "qwen3_moe"}, {"vocab_size", 1000},
              {"hidden_size", 48}, {"intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 24}, {"norm_topk_prob", true}, {"output_router_logits", true},
              {"initializer_range", 0.2}};
  cfg.update(sparsity);
  json_write_file(dir + "/config.json", cfg);
  const RunResult init = run_anvil({"init", "--config", dir + "/config.json", "--out", dir + "/" + name});
  EXPECT_EQ(init.exit_code, 0) << init.out;
  return dir + "/" + name;
}

// The parallel layouts' Qwen3-MoE (tests/test_moe_parallel.cpp, test_moe_expert_parallel.cpp):
// anvil init (seed 9) of 3 layers of hidden 48, 4 experts (top 2) in layers 0 and 2, layer 1
// dense, a vocabulary of 200, as DIR/model, and 40 blocks of 37 random tokens (seed 7) as
// DIR/blocks.safetensors; DIR, a fresh temporary folder named `name`, is returned.
inline std::string parallel_moe_dir(const std::string& name) {
  const std::string dir = temp_dir(name);
  const Json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 200}, {"hidden_size", 48},
                    {"intermediate_size", 64}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
                    {"num_key_value_heads", 2}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                    {"moe_intermediate_size", 24}, {"norm_topk_prob", true}, {"mlp_only_layers", {1}},
                    {"initializer_range", 0.2}};
  json_write_file(dir + "/config.json", cfg);
  const RunResult init = run_anvil({"init", "--config", dir + "/config.json", "--out", dir + "/model", "--seed", "9"});
  EXPECT_EQ(init.exit_code, 0) << init.out;
  std::mt19937 rng(7);
  std::vector<int64_t> ids(40 * 37);
  for (auto& x : ids) x = static_cast<int64_t>(rng() % 200);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {40, 37}, ids.data());
  w.write(dir + "/blocks.safetensors");
  return dir;
}

}  // namespace anvil::testing
