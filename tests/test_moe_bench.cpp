// The step benchmark of MoE models: MFU counts the active parameters (the router and top_k of
// the num_experts experts), and --num-layers shortens a preset or a folder's config to its
// first layers with fresh weights, the config anvil init --num-layers writes.
#include "core/fs.h"
#include "core/json.h"
#include "model/config.h"
#include "model/init.h"
#include "testing.h"
#include "train/bench_step.h"

namespace anvil {
namespace {

// Qwen3-30B-A3B's first 8 layers, by hand. C = 2048, q_dim = 32 x 128 = 4096, kv_dim = 4 x 128
// = 512, 128 experts of I = 768, top 8, vocabulary 151,936, untied.
//   attention block: C (q + 2 kv) + q C + 2 C (norms) + 2 x 128 (q/k norms)
//                    = 2048 x 5120 + 4096 x 2048 + 4096 + 256 = 18,878,720
//   router: 128 x 2048 = 262,144; one expert: 3 x 2048 x 768 = 4,718,592
//   all parameters: 8 x (18,878,720 + 262,144 + 128 x 4,718,592) + 2 x 151,936 x 2048 + 2048
//                   = 8 x 623,120,640 + 622,329,856 + 2048 = 5,607,297,024
//   in products per token: 8 x (18,878,720 + 262,144 + 8 x 4,718,592) + 151,936 x 2048 (the
//                   output layer; the embedding is a lookup) + 2048 = 8 x 56,889,600 +
//                   311,164,928 + 2048 = 766,283,776
//   FLOPs per token at sequence 2048: 6 x 766,283,776 + 6 x 8 x 2048 x 4096 (causal attention)
//                   = 4,597,702,656 + 402,653,184 = 5,000,355,840
TEST(MoeBench, FlopsCountTheActiveParameters) {
  const ModelConfig eight = preset_config("qwen3-30b-a3b", 8);
  EXPECT_EQ(eight.num_parameters(), 5607297024);
  EXPECT_EQ(model_flops_per_token(eight, 2048), 5000355840.0);
  // Every expert active (top_k = num_experts): every parameter is a product, as in a dense model.
  ModelConfig all = eight;
  all.moe.top_k = all.moe.num_experts;
  EXPECT_EQ(model_flops_per_token(all, 2048),
            6.0 * static_cast<double>(all.num_parameters() - all.vocab_size * all.hidden_size) + 402653184.0);
}

// The JSON line of `anvil bench step` on the CPU: 1 sequence of 32 tokens, 2 steps.
Json bench_step(const std::vector<std::string>& model) {
  std::vector<std::string> args = {"bench", "step", "--device", "cpu", "--seq-len", "32",
                                   "--steps", "2", "--warmup", "1"};
  args.insert(args.end(), model.begin(), model.end());
  const testing::RunResult r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const size_t json = r.out.rfind('{');
  return r.exit_code != 0 || json == std::string::npos ? Json::object() : json_parse(r.out.substr(json), "bench step");
}

TEST(MoeBench, NumLayersShortensAPresetOrAFolder) {
  const Json tiny = bench_step({"--preset", "tiny", "--num-layers", "2"});
  ASSERT_TRUE(tiny.contains("params")) << tiny.dump();
  EXPECT_EQ(tiny["num_layers"], 2);
  EXPECT_EQ(tiny["params"], preset_config("tiny", 2).num_parameters());

  // A folder holding only a MoE config.json (no weights: the shortened model's are fresh), 4
  // layers, layer 1 dense; its first 3 layers are timed.
  const std::string dir = testing::temp_dir("moe-bench");
  const Json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 200}, {"hidden_size", 48},
                    {"intermediate_size", 64}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
                    {"num_key_value_heads", 2}, {"head_dim", 16}, {"num_experts", 4}, {"num_experts_per_tok", 2},
                    {"moe_intermediate_size", 24}, {"norm_topk_prob", true}, {"mlp_only_layers", {1}}};
  json_write_file(dir + "/config.json", cfg);
  const ModelConfig three = init_config(dir + "/config.json", "", 3);
  EXPECT_EQ(three.num_layers, 3);
  EXPECT_EQ(three.sparse_layers(), 2);
  const Json moe = bench_step({"--model", dir, "--num-layers", "3"});
  ASSERT_TRUE(moe.contains("params")) << moe.dump();
  EXPECT_EQ(moe["num_layers"], 3);
  EXPECT_EQ(moe["params"], three.num_parameters());
  EXPECT_EQ(moe["flops_per_token"].get<double>(), model_flops_per_token(three, 32));
  EXPECT_GT(moe["tokens_per_s"].get<double>(), 0);
  // The first layer alone: mlp_only_layers loses its entry 1 (transformers reads it as a list of
  // layers to keep dense; anvil refuses an entry past the last layer).
  const ModelConfig one = init_config(dir + "/config.json", "", 1);
  EXPECT_EQ(one.sparse_layers(), 1);
  const Json first = bench_step({"--model", dir, "--num-layers", "1"});
  EXPECT_EQ(first.value("params", int64_t{0}), one.num_parameters());

  // More layers than the model has, or a negative count: refused, naming the flag.
  for (const auto& bad : {std::vector<std::string>{"--preset", "tiny", "--num-layers", "5"},
                          std::vector<std::string>{"--model", dir, "--num-layers", "5"},
                          std::vector<std::string>{"--preset", "tiny", "--num-layers", "-1"}}) {
    std::vector<std::string> args = {"bench", "step", "--device", "cpu", "--steps", "2", "--warmup", "1"};
    args.insert(args.end(), bad.begin(), bad.end());
    const testing::RunResult r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("--num-layers"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace anvil
