// Model I/O: config.json in both transformers forms and its refusals; safetensors read
// (single, sharded, F32/BF16/F16), write, and its errors; the parameter table's layout; the
// Hugging Face export folder (shards, index, generation config, files of the source folders).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/bf16.h"
#include "core/fs.h"
#include "io/hf_export.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weights.h"
#include "testing.h"

namespace anvil {
namespace {

Json tiny_qwen3() { return json_read_file(testing::shared_dir() + "/fixtures/tiny-qwen3/config.json"); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsTransformers5Form) {
  ModelConfig c = config_from_json(tiny_qwen3(), "config.json");
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 32) << "explicit head_dim, with heads x head_dim != hidden";
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Config, ReadsTransformers4Form) {
  Json j = tiny_qwen3();
  j.erase("rope_parameters");
  j["rope_theta"] = 5e5;
  j["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j.erase("head_dim");
  ModelConfig c = config_from_json(j, "config.json");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.rope.theta, 5e5);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.head_dim, 16) << "derived: hidden / heads";
  EXPECT_FALSE(c.qk_norm);
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(config_from_json(j, "c").rope.type, "default");
}

TEST(Config, Qwen2HasBiases) {
  ModelConfig c = load_config(testing::testdata_dir() + "/tiny-qwen2");
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
}

TEST(Config, RefusesWhatItCannotTrainNamingTheSetting) {
  struct Case {
    const char* key;
    Json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"architectures", Json::array({"MistralForCausalLM"}), "MistralForCausalLM"},
      {"use_sliding_window", true, "use_sliding_window"},
      {"num_experts", 8, "num_experts"},
      {"hidden_act", "gelu", "gelu"},
      {"rope_parameters", {{"rope_type", "longrope"}, {"rope_theta", 1e6}}, "longrope"},
      {"layer_types", Json::array({"sliding_attention"}), "sliding_attention"},
      {"vocab_size", -3, "vocab_size"},
  };
  for (const Case& k : cases) {
    Json j = tiny_qwen3();
    j[k.key] = k.value;
    std::string msg = error_of([&] { config_from_json(j, "cfg.json"); });
    EXPECT_NE(msg.find(k.expect), std::string::npos) << k.key << ": " << msg;
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  }
}

TEST(Config, PresetsHaveTheRealShapes) {
  ModelConfig c = preset_config("qwen3-1.7b");
  EXPECT_EQ(c.num_parameters(), 1720574976) << "Qwen3-1.7B: 1.72e9 with the tied embedding counted once";
  EXPECT_EQ(preset_config("qwen3-8b").num_parameters(), 8190735360);
  EXPECT_FALSE(preset_config("qwen3-8b").tie_word_embeddings);
  EXPECT_THROW(preset_config("qwen3-3b"), Error);
}

TEST(Config, Llama3RopeBands) {
  ModelConfig c = load_config(testing::testdata_dir() + "/tiny-llama3");
  std::vector<float> inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 8u);
  // Band by wavelength: < 16 unscaled, > 64 divided by the factor, between smoothly blended.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  const float base1 = 1.0f / std::pow(500000.0f, 2.0f / 16.0f);
  EXPECT_LT(inv[1], base1);
  EXPECT_GT(inv[1], base1 / 8.0f);
  const float base7 = 1.0f / std::pow(500000.0f, 14.0f / 16.0f);
  EXPECT_FLOAT_EQ(inv[7], base7 / 8.0f);
}

TEST(ParamTable, LayoutGroupsAndPadding) {
  ModelConfig c = load_config(testing::testdata_dir() + "/tiny-qwen2");
  ParamTable t(c, 4);
  EXPECT_EQ(t.total_numel(), c.num_parameters());
  for (auto& u : t.units()) {
    EXPECT_EQ(u.padded % (4 * ParamTable::kShardAlign), 0);
    EXPECT_GE(u.padded, u.numel);
  }
  // q, k, v back to back; gate, up back to back; biases too.
  const auto* q = t.find("model.layers.1.self_attn.q_proj.weight");
  const auto* k = t.find("model.layers.1.self_attn.k_proj.weight");
  const auto* v = t.find("model.layers.1.self_attn.v_proj.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(k->offset, q->offset + q->numel());
  EXPECT_EQ(v->offset, k->offset + k->numel());
  const auto* qb = t.find("model.layers.1.self_attn.q_proj.bias");
  const auto* kb = t.find("model.layers.1.self_attn.k_proj.bias");
  ASSERT_TRUE(qb && kb);
  EXPECT_EQ(kb->offset, qb->offset + qb->numel());
  EXPECT_EQ(t.find("lm_head.weight"), nullptr) << "tied";
  EXPECT_EQ(t.lm_head_unit(), t.embed_unit());
  // No two entries overlap.
  std::vector<std::vector<int>> used(t.units().size());
  for (size_t u = 0; u < used.size(); ++u) used[u].assign(static_cast<size_t>(t.units()[u].numel), 0);
  for (auto& e : t.entries())
    for (int64_t i = 0; i < e.numel(); ++i) ASSERT_EQ(used[static_cast<size_t>(e.unit)][static_cast<size_t>(e.offset + i)]++, 0) << e.name;
}

TEST(Safetensors, WriteReadAllFloatTypes) {
  const std::string dir = testing::temp_dir("st");
  std::vector<float> f = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> b, h;
  for (float x : f) b.push_back(f32_to_bf16_bits(x)), h.push_back(f32_to_f16_bits(x));
  SafetensorsWriter w;
  w.add("a", DType::kF32, {2, 3}, f.data());
  w.add("b", DType::kBF16, {6}, b.data());
  w.add("h", DType::kF16, {3, 2}, h.data());
  w.set_metadata("format", "pt");
  w.write(dir + "/x.safetensors");
  SafetensorsFile r(dir + "/x.safetensors");
  EXPECT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.metadata()["format"], "pt");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.get("a").data) % 8, 0u) << "data 8-byte aligned";
  for (const char* n : {"a", "b", "h"}) {
    auto v = read_as_f64(r.get(n));
    ASSERT_EQ(v.size(), f.size());
    for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(v[i], f[i], std::abs(f[i]) * 4e-3) << n << i;
  }
}

TEST(Safetensors, ShardedFolder) {
  const std::string dir = testing::temp_dir("shard");
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  SafetensorsWriter w1, w2;
  w1.add("x", DType::kF32, {2}, a.data());
  w2.add("y", DType::kF32, {3}, b.data());
  w1.write(dir + "/model-00001-of-00002.safetensors");
  w2.write(dir + "/model-00002-of-00002.safetensors");
  write_file_atomic(dir + "/model.safetensors.index.json",
                    R"({"metadata": {}, "weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}})");
  SafetensorsSet s(dir);
  std::vector<float> out(3);
  s.read_f32("y", {3}, out.data());
  EXPECT_EQ(out, b);
  std::string msg = error_of([&] { s.read_f32("y", {4}, out.data()); });
  EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  msg = error_of([&] { s.read_f32("z", {1}, out.data()); });
  EXPECT_NE(msg.find("tensor z"), std::string::npos) << msg;
  // An index naming a shard by something else than a file name is the index's error.
  write_file_atomic(dir + "/model.safetensors.index.json", R"({"weight_map": {"x": 5}})");
  msg = error_of([&] { SafetensorsSet bad(dir); });
  EXPECT_NE(msg.find("model.safetensors.index.json: weight_map entry x is 5, not a file name"), std::string::npos)
      << msg;
}

TEST(Safetensors, TruncatedAndBadHeadersNameTheFile) {
  const std::string dir = testing::temp_dir("bad");
  std::vector<float> a(100, 1.0f);
  SafetensorsWriter w;
  w.add("weight", DType::kF32, {10, 10}, a.data());
  w.write(dir + "/good.safetensors");
  std::string bytes = read_file(dir + "/good.safetensors");
  write_file_atomic(dir + "/trunc.safetensors", bytes.substr(0, bytes.size() - 10));
  std::string msg = error_of([&] { SafetensorsFile f(dir + "/trunc.safetensors"); });
  EXPECT_NE(msg.find("trunc.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  std::string bad = bytes;
  bad[8] = 'x';  // the header's opening brace
  write_file_atomic(dir + "/hdr.safetensors", bad);
  msg = error_of([&] { SafetensorsFile f(dir + "/hdr.safetensors"); });
  EXPECT_NE(msg.find("hdr.safetensors"), std::string::npos) << msg;
  write_file_atomic(dir + "/tiny.safetensors", "abc");
  EXPECT_NE(error_of([&] { SafetensorsFile f(dir + "/tiny.safetensors"); }).find("tiny.safetensors"), std::string::npos);
  EXPECT_EQ(error_of([&] { SafetensorsFile f(dir + "/good.safetensors"); }), "");
}

TEST(HfExport, Bf16ShardsIndexAndGenerationConfig) {
  const std::string dir = testing::temp_dir("hf-export");
  const std::string out = dir + "/out";
  make_directories(out);
  write_file_atomic(out + "/model-00001-of-00003.safetensors", "stale");
  std::vector<float> a(6), b(4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1.0f / 3.0f + 0.1f * static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -2.7f + static_cast<float>(i);
  HfExportSettings s;
  s.out_dir = out;
  s.max_shard_bytes = 12;  // bf16: a (12 bytes) fills the first shard, b goes to a second
  export_hf_folder({{"model_type", "qwen3"}, {"eos_token_id", 7}, {"bos_token_id", nullptr}},
                   {{"a.weight", {2, 3}, a.data()}, {"b.weight", {4}, b.data()}}, s);

  EXPECT_FALSE(path_exists(out + "/model-00001-of-00003.safetensors")) << "an earlier export's shard is left";
  EXPECT_FALSE(path_exists(out + "/model.safetensors"));
  const Json config = json_read_file(out + "/config.json");
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["dtype"], "bfloat16");
  const Json index = json_read_file(out + "/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 20);
  EXPECT_EQ(index["weight_map"]["a.weight"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["b.weight"], "model-00002-of-00002.safetensors");
  const std::pair<const char*, const std::vector<float>*> files[] = {{"model-00001-of-00002.safetensors", &a},
                                                                      {"model-00002-of-00002.safetensors", &b}};
  for (const auto& [file, values] : files) {
    SafetensorsFile f(out + "/" + file);
    ASSERT_EQ(f.tensors().size(), 1u) << file;
    const SafeTensorInfo& t = f.tensors()[0];
    EXPECT_EQ(f.metadata()["format"], "pt");
    EXPECT_EQ(t.dtype, DType::kBF16);
    EXPECT_EQ(static_cast<size_t>(t.shape.numel()), values->size());
    const auto* bits = reinterpret_cast<const uint16_t*>(t.data);
    for (size_t i = 0; i < values->size(); ++i) EXPECT_EQ(bits[i], f32_to_bf16_bits((*values)[i])) << file << i;
  }
  EXPECT_EQ(json_read_file(out + "/generation_config.json"), Json({{"_from_model_config", true}, {"eos_token_id", 7}}));
  EXPECT_FALSE(path_exists(out + "/tokenizer.json"));
  EXPECT_FALSE(path_exists(out + "/anvil_config.toml"));
}

TEST(HfExport, Fp32FileAndTheSourceFoldersFiles) {
  const std::string dir = testing::temp_dir("hf-export-src");
  for (const char* d : {"/first", "/second"}) make_directories(dir + d);
  write_file_atomic(dir + "/first/tokenizer.json", "first tokenizer");
  write_file_atomic(dir + "/second/tokenizer.json", "second tokenizer");
  write_file_atomic(dir + "/second/merges.txt", "a b");
  write_file_atomic(dir + "/second/generation_config.json", R"({"temperature": 0.6})");
  const std::vector<float> w = {1.5f, -0.1f, 3.25f};
  HfExportSettings s;
  s.out_dir = dir + "/out";
  s.dtype = DType::kF32;
  s.source_dirs = {"", dir + "/first", dir + "/second"};
  s.config_toml = "lr = 1e-5\n";
  export_hf_folder({{"eos_token_id", 7}}, {{"w", {3}, w.data()}}, s);

  EXPECT_EQ(json_read_file(s.out_dir + "/config.json")["dtype"], "float32");
  EXPECT_FALSE(path_exists(s.out_dir + "/model.safetensors.index.json"));
  SafetensorsFile f(s.out_dir + "/model.safetensors");
  EXPECT_EQ(f.get("w").dtype, DType::kF32);
  EXPECT_EQ(std::memcmp(f.get("w").data, w.data(), w.size() * sizeof(float)), 0);
  EXPECT_EQ(read_file(s.out_dir + "/tokenizer.json"), "first tokenizer");
  EXPECT_EQ(read_file(s.out_dir + "/merges.txt"), "a b");
  // The source's generation config, with the model's eos_token_id added (generate stops there).
  EXPECT_EQ(json_read_file(s.out_dir + "/generation_config.json"), Json({{"eos_token_id", 7}, {"temperature", 0.6}}));
  EXPECT_EQ(read_file(s.out_dir + "/anvil_config.toml"), "lr = 1e-5\n");
  EXPECT_FALSE(path_exists(s.out_dir + "/vocab.json"));
}

TEST(Weights, MissingTensorNamesFileAndTensor) {
  const std::string dir = testing::temp_dir("w");
  ModelConfig c = load_config(testing::shared_dir() + "/fixtures/tiny-qwen3-untied");
  json_write_file(dir + "/config.json", c.raw);
  ParamTable t(c, 1);
  HostUnits u = make_host_units(t);
  init_weights(c, t, 1, u);
  save_hf_weights(dir + "/model.safetensors", t, u, DType::kBF16);
  HostUnits back = make_host_units(t);
  load_hf_weights(dir, t, back);
  for (size_t i = 0; i < u.size(); ++i)
    for (size_t j = 0; j < u[i].size(); ++j) ASSERT_EQ(back[i][j], round_bf16(u[i][j]));
  // Drop lm_head from the file: the error names it.
  SafetensorsFile f(dir + "/model.safetensors");
  SafetensorsWriter w;
  for (auto& ti : f.tensors())
    if (ti.name != "lm_head.weight") w.add(ti.name, ti.dtype, ti.shape, ti.data);
  w.write(dir + "/model2.safetensors");
  std::rename((dir + "/model2.safetensors").c_str(), (dir + "/model.safetensors").c_str());
  std::string msg = error_of([&] { load_hf_weights(dir, t, back); });
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

// Host units made for one process, read by a rank of a larger world whose units are padded
// further: the elements past a unit's end are padding and read as zero (under ASan, the copy
// read past the vector: tests/test_plan.cpp's ranks read one-process units so).
TEST(HostUnits, ReadingPastAUnitsEndGivesZeros) {
  const ModelConfig cfg = load_config(testing::shared_dir() + "/fixtures/tiny-qwen3");
  const ParamTable one(cfg, 1), eight(cfg, 8);
  HostUnits w = make_host_units(one);
  for (std::vector<float>& u : w) std::fill(u.begin(), u.end(), 1.0f);
  const UnitReader read = host_units_reader(w);
  for (size_t u = 0; u < w.size(); ++u) {
    const int64_t size = static_cast<int64_t>(w[u].size()), padded = eight.units()[u].padded;
    ASSERT_GE(padded, size);
    std::vector<float> out(static_cast<size_t>(padded), -1.0f);
    read(static_cast<int>(u), 0, padded, out.data());
    EXPECT_TRUE(std::all_of(out.begin(), out.begin() + size, [](float v) { return v == 1.0f; })) << u;
    EXPECT_TRUE(std::all_of(out.begin() + size, out.end(), [](float v) { return v == 0.0f; })) << u;
    std::vector<float> tail(4, -1.0f);
    read(static_cast<int>(u), padded - 4, padded, tail.data());
    EXPECT_EQ(tail, std::vector<float>(4, padded - 4 >= size ? 0.0f : 1.0f)) << u;
  }
}

}  // namespace
}  // namespace anvil
