// anvil generate on the CPU reference path: greedy continuations against transformers'
// generate (golden files from tests/oracle/make_generate_golden.py), the KV cache against
// recomputing the whole sequence, sampling, and the command's inputs and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/fs.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "infer/decoder.h"
#include "model/weights.h"
#include "infer/generate.h"
#include "train/open_run.h"
#include "testing.h"

namespace anvil {
namespace {

constexpr double kMinMargin = 1e-3;  // below it, fp32 and fp64 may rank the top two apart

struct Golden {
  int64_t max_new_tokens = 0;
  std::vector<int32_t> eos;
  std::vector<std::vector<int32_t>> prompts, ids;
  std::vector<std::vector<double>> margins;
};

Golden read_golden(const std::string& model) {
  const Json j = json_read_file(testing::testdata_dir() + "/generate-" + model + ".json");
  Golden g;
  g.max_new_tokens = j["max_new_tokens"].get<int64_t>();
  g.eos = j["eos"].get<std::vector<int32_t>>();
  for (const Json& c : j["cases"]) {
    g.prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
    g.ids.push_back(c["ids"].get<std::vector<int32_t>>());
    g.margins.push_back(c["margins"].get<std::vector<double>>());
  }
  return g;
}

// Tokens of `got` compared with the golden continuation up to the first step whose top-2
// margin is below kMinMargin; returns how many were compared.
int64_t compare_greedy(const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                       const std::vector<double>& margins, const std::string& what) {
  int64_t compared = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    if (margins[t] <= kMinMargin) return compared;
    EXPECT_LT(t, got.size()) << what << ": stopped after " << got.size() << " tokens, the reference made "
                             << want.size();
    if (t >= got.size()) return compared;
    EXPECT_EQ(got[t], want[t]) << what << ": token " << t << " (margin " << margins[t] << ")";
    if (got[t] != want[t]) return compared;
    ++compared;
  }
  EXPECT_EQ(got.size(), want.size()) << what << ": the reference stopped after " << want.size() << " tokens";
  return compared;
}

class GenerateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateGolden, GreedyMatchesTransformers) {
  const Golden g = read_golden(GetParam());
  Generator gen(testing::fixture_dir(GetParam()), "cpu");
  EXPECT_EQ(gen.eos_ids(), g.eos);
  SamplingOptions s;
  s.max_new_tokens = g.max_new_tokens;
  // Prompts of different lengths in one batch (packed prefill, one decode row each), and
  // one at a time: the same tokens.
  const auto batched = gen.generate(g.prompts, s, 3);
  const auto single = gen.generate(g.prompts, s, 1);
  int64_t compared = 0, total = 0;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    EXPECT_EQ(batched[i], single[i]) << "prompt " << i << ": batch 3 and batch 1 differ";
    compared += compare_greedy(batched[i], g.ids[i], g.margins[i], GetParam() + " prompt " + std::to_string(i));
    total += static_cast<int64_t>(g.ids[i].size());
  }
  std::printf("%s: %lld of %lld reference tokens compared and equal (%zu prompts)\n", GetParam().c_str(),
              static_cast<long long>(compared), static_cast<long long>(total), g.prompts.size());
  EXPECT_GE(compared, total * 3 / 4) << "too few tokens above the margin to mean anything";
}

// The cached decode against recomputing the whole sequence with the training forward
// (Transformer, attention over the full block): two sequences of different lengths in one
// cache, prefilled together, then decoded greedily step by step.
TEST_P(GenerateGolden, CacheEqualsRecomputation) {
  const std::string dir = testing::fixture_dir(GetParam());
  const ModelConfig cfg = load_config(dir);
  const ParamTable table(cfg, 1);
  HostUnits host = make_host_units(table);
  load_hf_weights(dir, table, host);
  auto ops = make_cpu_ops();
  ResidentWeights weights(table, *ops, host);
  Decoder dec(cfg, table, *ops, weights);
  const int64_t V = cfg.vocab_size, steps = 8;
  std::vector<std::vector<int32_t>> seq = {{3, 14, 15, 92, 65}, {2, 71, 82, 81, 82, 84, 59, 45, 23, 53, 60, 28}};
  dec.reserve_cache(2, 40);
  DecodeRows rows;
  for (int32_t s = 0; s < 2; ++s) {
    for (size_t t = 0; t < seq[static_cast<size_t>(s)].size(); ++t)
      rows.add(seq[static_cast<size_t>(s)][t], s, static_cast<int32_t>(t));
    rows.outputs.push_back(static_cast<int32_t>(rows.ids.size() - 1));
  }
  std::vector<float> logits;
  double worst = 0;
  for (int64_t step = 0; step <= steps; ++step) {
    if (step > 0) {  // one decode row per sequence
      rows.clear();
      for (int32_t s = 0; s < 2; ++s) {
        const auto& q = seq[static_cast<size_t>(s)];
        rows.add(q.back(), s, static_cast<int32_t>(q.size() - 1));
        rows.outputs.push_back(s);
      }
    }
    dec.forward(rows, logits);
    for (size_t s = 0; s < 2; ++s) {
      TrainConfig tc;
      tc.model.device = "cpu";
      tc.data.seq_len = static_cast<int64_t>(seq[s].size());
      const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(host), tc, tc.data.seq_len, nullptr, 0);
      Trainer& full = *t;
      TokenBatch b;
      b.ids.assign(seq[s].begin(), seq[s].end());
      std::vector<float> all;
      full.loss_and_grads(b, &all);
      const float* want = all.data() + (seq[s].size() - 1) * static_cast<size_t>(V);
      const float* got = logits.data() + s * static_cast<size_t>(V);
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::fabs(got[v] - want[v])));
      seq[s].push_back(static_cast<int32_t>(std::max_element(got, got + V) - got));
    }
  }
  EXPECT_LT(worst, 1e-5) << "largest logit difference, cache against recomputation";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateGolden, ::testing::ValuesIn(testing::golden_models()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return testing::test_suffix(p.param); });

TEST(Sampling, PicksByTheCuts) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingOptions s;
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.99), 0);  // greedy ignores u
  s.temperature = 1.0;
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.1), 0);
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.6), 1);
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.9), 2);
  s.top_k = 2;  // renormalised over {0.5, 0.3}: 0 below 0.625
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.6), 0);
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.7), 1);
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.99), 1);
  s.top_k = 0;
  s.top_p = 0.7;  // 0.5 < 0.7 <= 0.8: the nucleus is {0, 1}
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.99), 1);
  s.top_p = 0.4;  // {0}
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.99), 0);
  s.top_p = 1.0;
  s.temperature = 1e-3;  // nearly greedy
  EXPECT_EQ(pick_token(logits.data(), 3, s, 0.99), 0);
}

TEST(Sampling, RepeatableWithTheSeedWhateverTheBatch) {
  Generator gen(testing::fixture_dir("tiny-qwen3"), "cpu");
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {9, 8, 7, 6, 5, 4}, {42}};
  SamplingOptions s;
  s.max_new_tokens = 12;
  s.temperature = 1.0;
  s.top_p = 0.9;
  s.top_k = 50;
  s.seed = 7;
  const auto a = gen.generate(prompts, s, 3);
  EXPECT_EQ(gen.generate(prompts, s, 3), a);
  EXPECT_EQ(gen.generate(prompts, s, 1), a);
  s.seed = 8;
  EXPECT_NE(gen.generate(prompts, s, 3), a);
  s.seed = 7;
  s.temperature = 0;
  EXPECT_NE(gen.generate(prompts, s, 3), a);
}

// ---- the command

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string ids_json(const std::vector<int32_t>& ids) { return Json(ids).dump(); }

TEST(GenerateCli, InputIdsRowsGiveTheGoldenIds) {
  const Golden g = read_golden("tiny-qwen3");
  const std::string dir = testing::temp_dir("gen-rows");
  std::string rows;
  for (const auto& p : g.prompts) rows += "{\"input_ids\": " + ids_json(p) + "}\n\n";
  const std::string in = write_file(dir, "rows.jsonl", rows);
  auto r = testing::run_anvil({"generate", "--device", "cpu", "--model", testing::fixture_dir("tiny-qwen3"), "--input",
                               in, "--max-new-tokens", std::to_string(g.max_new_tokens), "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("prefill: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode: "), std::string::npos) << r.out;
  size_t i = 0, pos = 0;
  while ((pos = r.out.find("{\"ids\":", pos)) != std::string::npos) {
    const size_t end = r.out.find('\n', pos);
    const Json j = Json::parse(r.out.substr(pos, end - pos));
    EXPECT_FALSE(j.contains("text")) << "no tokenizer, no text";
    ASSERT_LT(i, g.ids.size());
    compare_greedy(j["ids"].get<std::vector<int32_t>>(), g.ids[i], g.margins[i], "row " + std::to_string(i));
    ++i;
    pos = end;
  }
  EXPECT_EQ(i, g.prompts.size()) << r.out;
}

// A model folder whose configs name no EOS (the fixture's eos_token_id is null) stops at
// tokenizer_config.json's eos_token: here the golden continuation's first token.
TEST(GenerateCli, StopsAtTheTokenizersEosToken) {
  const Golden g = read_golden("tiny-qwen3");
  ASSERT_GT(g.margins[0][0], kMinMargin);
  const std::string dir = testing::temp_dir("gen-eos");
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    std::filesystem::copy_file(testing::fixture_dir("tiny-qwen3") + "/" + f, dir + "/" + f);
  const int32_t stop = g.ids[0][0];
  write_file(dir, "tokenizer_config.json",
             Json{{"eos_token", "<stop>"}, {"added_tokens_decoder", {{std::to_string(stop), {{"content", "<stop>"}}}}}}
                 .dump());
  const std::string in = write_file(dir, "rows.jsonl", "{\"input_ids\": " + ids_json(g.prompts[0]) + "}\n");
  auto r = testing::run_anvil({"generate", "--device", "cpu", "--model", dir, "--input", in, "--max-new-tokens", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t pos = r.out.find("{\"ids\":");
  ASSERT_NE(pos, std::string::npos) << r.out;
  EXPECT_EQ(Json::parse(r.out.substr(pos, r.out.find('\n', pos) - pos))["ids"], Json::array({stop})) << r.out;
}

TEST(GenerateCli, BadInputIsOneLineNamingTheRow) {
  const std::string dir = testing::temp_dir("gen-bad");
  const std::string model = testing::fixture_dir("tiny-qwen3");
  auto run = [&](const std::string& rows) {
    return testing::run_anvil({"generate", "--model", model, "--input", write_file(dir, "in.jsonl", rows)});
  };
  auto r = run("{\"input_ids\": [1, 2]}\n{\"text\": \"hello\"}\n");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("in.jsonl:2: a \"text\" row needs a tokenizer"), std::string::npos) << r.out;
  r = run("{\"input_ids\": " + ids_json(std::vector<int32_t>(600, 5)) + "}\n");
  EXPECT_NE(r.out.find("in.jsonl:1: the prompt has 600 tokens: longer than the model's context"), std::string::npos)
      << r.out;
  r = run("{\"input_ids\": [1, 2000]}\n");
  EXPECT_NE(r.out.find("in.jsonl:1: token id 2000 is outside the vocabulary"), std::string::npos) << r.out;
  r = run("{\"messages\": [{\"role\": \"wizard\", \"content\": \"hi\"}]}\n");
  EXPECT_NE(r.out.find("in.jsonl:1: message 0 has the unknown role 'wizard'"), std::string::npos) << r.out;
  r = run("{\"prompt\": \"hi\"}\n");
  EXPECT_NE(r.out.find("in.jsonl:1: a row must hold"), std::string::npos) << r.out;
  r = testing::run_anvil({"generate", "--model", model, "--prompt", "hello"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--prompt needs a tokenizer"), std::string::npos) << r.out;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--chat"}, {"--temperature", "-1"}, {"--top-p", "0"}, {"--batch", "0"},
        {"--max-new-tokens", "0"}, {"--prompt", "x", "--input", "y"}, {"--device", "tpu"}}) {
    std::vector<std::string> args = {"generate", "--model", model};
    args.insert(args.end(), bad.begin(), bad.end());
    r = testing::run_anvil(args);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << ": " << r.out;
  }
}

// The README's loop: train, export, then talk to the result (the demo's tokenizer and chat
// template), with --prompt --chat, and as a chat over piped lines.
TEST(GenerateCli, TrainExportThenChat) {
  const std::string dir = testing::temp_dir("gen-chat");
  const std::string demo = std::string(ANVIL_SOURCE_DIR) + "/data/demo";
  auto r = testing::run_anvil({"train", "--preset", "tiny", "--tokenizer", demo, "--data", demo + "/arithmetic.jsonl",
                               "--seq-len", "64", "--steps", "2", "--data-cache", dir + "/cache", "--export",
                               dir + "/out"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // The preset's config names no EOS: the export takes the tokenizer's eos_token (<|im_end|>).
  const std::optional<int32_t> im_end = Tokenizer::load(demo).token_to_id("<|im_end|>");
  ASSERT_TRUE(im_end.has_value());
  EXPECT_EQ(json_read_file(dir + "/out/config.json").value("eos_token_id", Json()), Json(*im_end));
  EXPECT_EQ(json_read_file(dir + "/out/generation_config.json").value("eos_token_id", Json()), Json(*im_end));
  r = testing::run_anvil({"generate", "--model", dir + "/out", "--prompt", "What is 2 + 3?", "--chat",
                          "--max-new-tokens", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("decode: "), std::string::npos) << r.out;
  r = testing::run_command("printf 'What is 2 + 3?\\n\\nAnd 4 + 4?\\n' | " + testing::anvil_binary() +
                           " generate --model " + dir + "/out --max-new-tokens 4 --temperature 0.7 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("generated for 2 prompts"), std::string::npos) << r.out;  // two turns, the empty line skipped
  r = testing::run_anvil({"generate", "--model", dir + "/out", "--input",
                          write_file(dir, "chats.jsonl",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 1 + 1?\"}]}\n"
                                     "{\"text\": \"12 + 30 =\"}\n"),
                          "--max-new-tokens", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("\"text\":"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
