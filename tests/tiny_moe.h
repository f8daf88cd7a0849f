// A tiny Qwen3-MoE model folder for the plan's, step model's and router statistics' tests:
// anvil init (fresh weights, seed 0) of 4 layers of hidden 48 and a vocabulary of 1,000
// (write_random_blocks' ids), 4 experts of intermediate 24, 2 per token, the auxiliary loss on
// (output_router_logits); `sparsity` adds its mlp_only_layers or decoder_sparse_step. The
// model lies in a fresh temporary folder, named `name`.
#pragma once

#include <string>

#include "core/json.h"
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

}  // namespace anvil::testing
