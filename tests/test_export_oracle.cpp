// Export round trip through transformers: `anvil train --device cpu` a few steps on a tiny
// model, exported in fp32 and in bf16 (--export-dtype), and `anvil init` output (fp32 and
// bf16). transformers' from_pretrained loads each folder with no missing, unexpected or
// mismatched tensor (tests/oracle/export_oracle.py), and its logits, computed in float64 and
// in float32, equal `anvil grad --device cpu` logits on the same folder within rel L2 1e-5.
// The bf16 export holds the fp32 export's weights rounded to nearest even, exactly.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/bf16.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "testing.h"

namespace anvil {
namespace {

void write_tokens(const std::string& path, int64_t rows, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(rows * seq));
  for (auto& v : ids) v = std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {rows, seq}, ids.data());
  w.write(path);
}

// anvil grad's logits on the folder against the oracle's (already written there).
void expect_logits_match(const std::string& folder, const std::string& tokens, double* worst) {
  const auto r = testing::run_anvil({"grad", "--device", "cpu", "--model", folder, "--tokens", tokens, "--out",
                                     folder + "/anvil.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  SafetensorsFile got(folder + "/anvil.safetensors"), want(folder + "/oracle.safetensors");
  const auto logits = read_as_f64(got.get("logits"));
  for (const char* name : {"logits64", "logits32"}) {
    const auto w = read_as_f64(want.get(name));
    EXPECT_TRUE(testing::close_rel_l2(logits, w, 1e-5)) << folder << " " << name;
    *worst = std::max(*worst, testing::rel_l2(logits.data(), w.data(), w.size()));
  }
}

TEST(ExportOracle, TrainedExportsAndInitLoadInTransformersWithEqualLogits) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("export-oracle");
  const std::string fx = testing::fixture_dir("tiny-qwen3-untied");
  const int64_t vocab = json_read_file(fx + "/config.json")["vocab_size"].get<int64_t>();
  write_tokens(dir + "/train.safetensors", 8, 37, vocab, 1);
  write_tokens(dir + "/eval.safetensors", 2, 29, vocab, 2);
  for (const char* dtype : {"fp32", "bf16"}) {
    const auto r = testing::run_anvil({"train", "--device", "cpu", "--model", fx, "--data", dir + "/train.safetensors",
                                       "--seq-len", "37", "--micro-batch", "2", "--steps", "3", "--lr", "1e-3",
                                       "--export", dir + "/" + dtype, "--export-dtype", dtype});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  for (const char* dtype : {"fp32", "bf16"}) {
    const auto r = testing::run_anvil({"init", "--config", testing::fixture_dir("tiny-llama3") + "/config.json", "--out",
                                       dir + "/init-" + dtype, "--dtype", dtype, "--seed", "5"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  const std::vector<std::string> folders = {dir + "/fp32", dir + "/bf16", dir + "/init-fp32", dir + "/init-bf16"};
  std::vector<std::string> args = {dir + "/eval.safetensors"};
  args.insert(args.end(), folders.begin(), folders.end());
  const auto o = testing::run_oracle("export_oracle.py", args);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  std::printf("%s", o.out.c_str());
  // One JSON line per folder: the weights' dtype as loaded, and nothing reported by loading.
  const std::vector<std::string> dtypes = {"torch.float32", "torch.bfloat16", "torch.float32", "torch.bfloat16"};
  size_t line = 0, at = 0;
  for (size_t e; (e = o.out.find('\n', at)) != std::string::npos; at = e + 1) {
    const Json j = json_parse(o.out.substr(at, e - at), "export_oracle output");
    ASSERT_LT(line, folders.size());
    EXPECT_EQ(j["dtype"], dtypes[line]) << j.dump();
    EXPECT_TRUE(j["loading"].empty()) << j.dump();
    ++line;
  }
  EXPECT_EQ(line, folders.size());

  double worst = 0;
  for (const auto& f : folders) expect_logits_match(f, dir + "/eval.safetensors", &worst);

  // The trained weights moved, and the bf16 export is the fp32 one rounded to nearest even.
  SafetensorsFile f32(dir + "/fp32/model.safetensors"), b16(dir + "/bf16/model.safetensors");
  SafetensorsFile start(fx + "/model.safetensors");
  int tensors = 0;
  for (const SafeTensorInfo& t : f32.tensors()) {
    const auto a = read_as_f64(t), b = read_as_f64(b16.get(t.name)), s = read_as_f64(start.get(t.name));
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0;
    for (size_t k = 0; k < a.size(); ++k) differ += b[k] != static_cast<double>(round_bf16(static_cast<float>(a[k])));
    EXPECT_EQ(differ, 0u) << t.name << ": bf16 export values that are not the fp32 export's rounded";
    EXPECT_GT(testing::rel_l2(a.data(), s.data(), a.size()), 1e-4) << t.name << " did not train";
    ++tensors;
  }
  EXPECT_GT(tensors, 0);
  std::printf("4 folders loaded by transformers; worst logits rel L2 against anvil %.2e; %d bf16 tensors exact\n",
              worst, tensors);
}

}  // namespace
}  // namespace anvil
