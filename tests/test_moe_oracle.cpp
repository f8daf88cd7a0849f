// Qwen3-MoE (Qwen3MoeForCausalLM) against transformers, generated live: random small configs
// (tests/oracle/moe_oracle.py: 2-8 experts, top-1 to top-4, norm_topk_prob on and off,
// decoder_sparse_step 1-2, mlp_only_layers, the load-balancing loss on and off with its
// coefficient, the per-expert and the fused expert layouts of save_pretrained), for several
// seeds. On each: `anvil grad --device cpu` against transformers' float64 loss, logits and
// every gradient (model_golden.h's bars: loss rel 1e-6, logits rel L2 1e-5, gradients rel L2
// 1e-4; the CPU reference computes in fp32), the same with --router-aux-loss where the config
// has no auxiliary loss (transformers' forward with output_router_logits), and `anvil generate`'s greedy continuations
// against transformers' generate, token for token while the top-2 margin allows. Selective and
// full recomputation give the same bits as keeping everything. A trained MoE model exported in
// fp32 and bf16, and `anvil init` of a MoE config, load in transformers with no missing or
// unexpected tensor and give anvil's logits. The presets' parameter counts are the hub's.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "model_golden.h"
#include "testing.h"
#include "train/open_run.h"

namespace anvil {
namespace {

using testing::anvil_grad;
using testing::expect_golden;
using testing::Worst;

constexpr int kCases = 6;            // per seed
constexpr double kMinMargin = 1e-3;  // below it, fp32 and fp64 may rank the top two logits apart

// Greedy ids of anvil generate on case folder c against the oracle's gen.json; returns the
// tokens compared (each step up to the first whose margin is below kMinMargin).
int64_t expect_greedy(const std::string& c, int64_t* total) {
  const Json g = json_read_file(c + "/gen.json");
  std::string rows;
  for (const Json& k : g["cases"]) rows += Json({{"input_ids", k["prompt"]}}).dump() + "\n";
  const std::string in = c + "/rows.jsonl";
  write_file_atomic(in, rows);
  const auto r = testing::run_anvil({"generate", "--device", "cpu", "--model", c, "--input", in, "--max-new-tokens",
                                     std::to_string(g["max_new_tokens"].get<int64_t>()), "--batch", "2"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  int64_t compared = 0;
  size_t pos = 0;
  for (const Json& k : g["cases"]) {
    pos = r.out.find("{\"ids\":", pos);
    EXPECT_NE(pos, std::string::npos) << r.out;
    if (pos == std::string::npos) return compared;
    const size_t end = r.out.find('\n', pos);
    const auto got = Json::parse(r.out.substr(pos, end - pos))["ids"].get<std::vector<int32_t>>();
    const auto want = k["ids"].get<std::vector<int32_t>>();
    const auto margins = k["margins"].get<std::vector<double>>();
    *total += static_cast<int64_t>(want.size());
    EXPECT_EQ(got.size(), want.size()) << c;
    for (size_t t = 0; t < want.size() && t < got.size() && margins[t] > kMinMargin; ++t, ++compared) {
      EXPECT_EQ(got[t], want[t]) << c << ": token " << t << " (margin " << margins[t] << ")";
      if (got[t] != want[t]) break;
    }
    pos = end;
  }
  return compared;
}

// The gradients of case folder c's tokens under `r`, and the loss.
HostUnits grads_under(const std::string& c, Recompute r, double* loss) {
  const ModelConfig cfg = load_config(c);
  SafetensorsFile tokens(c + "/tokens.safetensors");
  const SafeTensorInfo& ids = tokens.get("input_ids");
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(c, table, w);
  TokenBatch batch;
  batch.ids = read_as_i64(ids);
  TrainConfig tc;
  tc.model.device = "cpu";
  tc.data.micro_batch = ids.shape[0];
  tc.data.seq_len = ids.shape[1];
  tc.parallel.recompute = r;
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), tc, tc.data.seq_len, nullptr, 0);
  *loss = t->loss_and_grads(batch, nullptr);
  return t->grads();
}

class MoeOracle : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeOracle, LossLogitsGradientsAndGreedyDecoding) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("moe-oracle");
  const auto made = testing::run_oracle("moe_oracle.py", {std::to_string(kCases), GetParam(), dir});
  ASSERT_EQ(made.exit_code, 0) << made.out;
  std::printf("%s", made.out.c_str());
  Worst worst;
  int64_t compared = 0, total = 0;
  int flagged = 0;
  for (int k = 0; k < kCases; ++k) {
    const std::string c = dir + "/" + std::to_string(k);
    expect_golden(anvil_grad(c, "tokens.safetensors", "anvil.safetensors"), c + "/golden.safetensors",
                  "case " + std::to_string(k), worst);
    if (path_exists(c + "/golden_aux.safetensors")) {  // the config has no auxiliary loss: the flag adds it
      expect_golden(anvil_grad(c, "tokens.safetensors", "anvil_aux.safetensors", {"--router-aux-loss"}),
                    c + "/golden_aux.safetensors", "case " + std::to_string(k) + " --router-aux-loss", worst);
      ++flagged;
    }
    compared += expect_greedy(c, &total);
    double none_loss = 0, loss = 0;
    const HostUnits none = grads_under(c, Recompute::kNone, &none_loss);
    for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
      EXPECT_TRUE(grads_under(c, r, &loss) == none) << "case " << k << ": " << recompute_name(r) << " gradients differ";
      EXPECT_EQ(loss, none_loss) << "case " << k << ": " << recompute_name(r);
    }
  }
  EXPECT_GE(compared, total * 3 / 4) << "too few greedy tokens above the margin to mean anything";
  std::printf("seed %s, %d random MoE configs: worst loss rel error %.2e, logits rel L2 %.2e, gradient rel L2 %.2e "
              "(%s); %d with --router-aux-loss; greedy: %lld of %lld tokens compared and equal\n",
              GetParam(), kCases, worst.loss, worst.logits, worst.grad, worst.grad_name.c_str(), flagged,
              static_cast<long long>(compared), static_cast<long long>(total));
}

INSTANTIATE_TEST_SUITE_P(Seeds, MoeOracle, ::testing::Values("20261202", "31", "4099"));

void write_tokens(const std::string& path, int64_t rows, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(rows * seq));
  for (auto& v : ids) v = std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {rows, seq}, ids.data());
  w.write(path);
}

TEST(MoeExport, TrainedExportsAndInitLoadInTransformersWithEqualLogits) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("moe-export");
  // One oracle case (its model folder, fused or not), trained three steps with the auxiliary loss.
  const auto made = testing::run_oracle("moe_oracle.py", {"1", "77", dir});
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const std::string start = dir + "/0";
  const int64_t vocab = json_read_file(start + "/config.json")["vocab_size"].get<int64_t>();
  write_tokens(dir + "/train.safetensors", 8, 19, vocab, 1);
  write_tokens(dir + "/eval.safetensors", 2, 13, vocab, 2);
  for (const char* dtype : {"fp32", "bf16"}) {
    const auto r = testing::run_anvil({"train", "--device", "cpu", "--model", start, "--data",
                                       dir + "/train.safetensors", "--seq-len", "19", "--micro-batch", "2", "--steps",
                                       "3", "--lr", "1e-3", "--export", dir + "/" + dtype, "--export-dtype", dtype});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  const auto init =
      testing::run_anvil({"init", "--config", start + "/config.json", "--out", dir + "/init", "--seed", "3"});
  ASSERT_EQ(init.exit_code, 0) << init.out;
  const std::vector<std::string> folders = {dir + "/fp32", dir + "/bf16", dir + "/init"};
  std::vector<std::string> args = {dir + "/eval.safetensors"};
  args.insert(args.end(), folders.begin(), folders.end());
  const auto o = testing::run_oracle("export_oracle.py", args);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  std::printf("%s", o.out.c_str());
  size_t line = 0, at = 0;
  for (size_t e; (e = o.out.find('\n', at)) != std::string::npos; at = e + 1, ++line)
    EXPECT_TRUE(json_parse(o.out.substr(at, e - at), "export_oracle output")["loading"].empty()) << o.out;
  EXPECT_EQ(line, folders.size());
  double worst = 0;
  for (const std::string& f : folders) {
    SafetensorsFile got(anvil_grad(f, "../eval.safetensors", "anvil.safetensors")), want(f + "/oracle.safetensors");
    const auto logits = read_as_f64(got.get("logits"));
    for (const char* name : {"logits64", "logits32"}) {
      const auto w = read_as_f64(want.get(name));
      EXPECT_TRUE(testing::close_rel_l2(logits, w, 1e-5)) << f << " " << name;
      worst = std::max(worst, testing::rel_l2(logits.data(), w.data(), w.size()));
    }
  }
  // The export names every expert's tensors as the hub does.
  const ModelConfig mc = load_config(start);
  int64_t sparse = 0;
  while (!mc.sparse_layer(sparse)) ++sparse;
  SafetensorsFile exported(dir + "/fp32/model.safetensors");
  const std::string expert = "model.layers." + std::to_string(sparse) + ".mlp.experts.";
  EXPECT_NE(exported.find(expert + std::to_string(mc.moe.num_experts - 1) + ".down_proj.weight"), nullptr);
  EXPECT_NE(exported.find(expert + "0.gate_proj.weight"), nullptr);
  std::printf("3 MoE folders loaded by transformers; worst logits rel L2 against anvil %.2e\n", worst);
}

// The presets' parameter counts are those of the hub's safetensors, and a shallower copy keeps
// every expert.
TEST(MoeConfig, PresetsAndShallowerCopies) {
  EXPECT_EQ(preset_config("qwen3-30b-a3b").num_parameters(), 30532122624);
  EXPECT_EQ(preset_config("qwen3-235b-a22b").num_parameters(), 235093634560);
  const ModelConfig eight = preset_config("qwen3-30b-a3b", 8);
  EXPECT_EQ(eight.num_layers, 8);
  EXPECT_EQ(eight.moe.num_experts, 128);
  EXPECT_EQ(eight.num_parameters(), 5607297024);
  EXPECT_EQ(eight.sparse_layers(), 8);
  EXPECT_EQ(ParamTable(eight, 1).total_numel(), eight.num_parameters());
  EXPECT_THROW(preset_config("qwen3-30b-a3b", 49), Error);
  // mlp_only_layers and decoder_sparse_step choose the dense layers, as transformers does.
  Json j = config_to_json(eight);
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = Json::array({3});
  const ModelConfig mixed = config_from_json(j, "mixed");
  std::vector<bool> sparse;
  for (int64_t l = 0; l < mixed.num_layers; ++l) sparse.push_back(mixed.sparse_layer(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true, false, true}));
  EXPECT_EQ(ParamTable(mixed, 1).total_numel(), mixed.num_parameters());
  j["mlp_only_layers"] = Json::array({8});
  EXPECT_THROW(config_from_json(j, "bad"), Error);
  j["mlp_only_layers"] = Json::array();
  j["num_experts_per_tok"] = 129;
  EXPECT_THROW(config_from_json(j, "bad"), Error);
}

}  // namespace
}  // namespace anvil
