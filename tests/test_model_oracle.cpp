// Model parity generated live: random small configs of each supported family (Qwen3; Qwen2
// with q/k/v biases; Llama 3 with llama3 RoPE scaling), head_dim 16-128, 1-8 query heads per
// key/value head, tied and untied embeddings, odd sizes. tests/oracle/model_oracle.py makes
// each model folder, its tokens and transformers' float64 loss, logits and gradients on the
// CPU (eager attention); `anvil grad --device cpu` computes them on the same folder and
// tokens. Bars: loss rel 1e-6, logits rel L2 1e-5, every gradient rel L2 1e-4. The seed is
// fixed, so the configs are the same on every run.
// Packed documents: tests/oracle/packed_oracle.py packs several documents in each sequence
// (position_ids) and runs each alone through transformers; anvil's per-document attention,
// RoPE positions and loss must give the same logits, loss and gradients (same bars), and
// the same tokens wrapped (no position_ids) must give logits that differ clearly: the
// document mask is on. Positions that are not documents' are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "io/safetensors.h"
#include "model_golden.h"
#include "testing.h"

namespace anvil {
namespace {

using testing::anvil_grad;
using testing::expect_golden;
using testing::Worst;

constexpr int kCases = 10;  // per family

// The oracle script's kCases case folders of one family in a new folder (its lines printed);
// "" after a failure.
std::string make_cases(const char* script, const std::string& family, const char* seed) {
  const std::string dir = testing::temp_dir(script);
  const auto made = testing::run_oracle(script, {family, std::to_string(kCases), seed, dir});
  EXPECT_EQ(made.exit_code, 0) << made.out;
  std::printf("%s", made.out.c_str());
  return made.exit_code == 0 ? dir : "";
}

class ModelOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelOracle, LossLogitsAndGradients) {
  ANVIL_REQUIRE_ORACLE();
  const std::string family = GetParam(), dir = make_cases("model_oracle.py", family, "20261130");
  if (dir.empty()) return;
  Worst worst;
  for (int k = 0; k < kCases; ++k) {
    const std::string c = dir + "/" + std::to_string(k);
    expect_golden(anvil_grad(c, "tokens.safetensors", "anvil.safetensors"), c + "/golden.safetensors",
                  "case " + std::to_string(k), worst);
  }
  std::printf("%s, %d random configs: worst loss rel error %.2e, logits rel L2 %.2e, gradient rel L2 %.2e (%s)\n",
              family.c_str(), kCases, worst.loss, worst.logits, worst.grad, worst.grad_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Families, ModelOracle, ::testing::Values("qwen3", "qwen2", "llama"));

class PackedOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(PackedOracle, EachDocumentAsIfAlone) {
  ANVIL_REQUIRE_ORACLE();
  const std::string family = GetParam(), dir = make_cases("packed_oracle.py", family, "20261201");
  if (dir.empty()) return;
  Worst worst;
  double least_wrapped = std::numeric_limits<double>::infinity();
  for (int k = 0; k < kCases; ++k) {
    const std::string c = dir + "/" + std::to_string(k), golden = c + "/golden.safetensors";
    expect_golden(anvil_grad(c, "tokens.safetensors", "packed.safetensors"), golden, "case " + std::to_string(k),
                  worst);
    // The same tokens as one document per sequence: attention crosses the documents.
    SafetensorsFile wrapped(anvil_grad(c, "wrapped.safetensors", "wrapped_out.safetensors")), want(golden);
    const auto logits = read_as_f64(wrapped.get("logits")), want_logits = read_as_f64(want.get("logits"));
    const double e = testing::rel_l2(logits.data(), want_logits.data(), logits.size());
    EXPECT_GT(e, 1e-2) << "case " << k << ": wrapped packing gives the per-document logits";
    least_wrapped = std::min(least_wrapped, e);
  }
  // Positions that skip (0, 1, 3): refused with what is wrong, before any work.
  const std::string c = dir + "/0";
  SafetensorsFile tokens(c + "/tokens.safetensors");
  const SafeTensorInfo& ids = tokens.get("input_ids");
  std::vector<int64_t> ids_v = read_as_i64(ids), bad(ids_v.size());
  for (size_t i = 0; i < bad.size(); ++i) bad[i] = static_cast<int64_t>(i % static_cast<size_t>(ids.shape[1]));
  bad[2] = 3;
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, ids.shape, ids_v.data());
  w.add("position_ids", DType::kI64, ids.shape, bad.data());
  w.write(c + "/bad.safetensors");
  const auto r = testing::run_anvil({"grad", "--device", "cpu", "--model", c, "--tokens", c + "/bad.safetensors",
                                     "--out", c + "/bad_out.safetensors"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("neither starts a document"), std::string::npos) << r.out;
  std::printf("%s, %d packed batches: worst loss rel error %.2e, logits rel L2 %.2e, gradient rel L2 %.2e (%s); "
              "wrapped logits differ by rel L2 %.2e at least\n",
              family.c_str(), kCases, worst.loss, worst.logits, worst.grad, worst.grad_name.c_str(), least_wrapped);
}

INSTANTIATE_TEST_SUITE_P(Families, PackedOracle, ::testing::Values("qwen3", "qwen2", "llama"));

}  // namespace
}  // namespace anvil
