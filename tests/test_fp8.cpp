// FP8: the host casts (core/fp8.h) against PyTorch's torch.float8_e4m3fn and
// torch.float8_e5m2 casts on every bf16 bit pattern and a million random float32 patterns,
// bit for bit, and every code decoded; the CPU backend's FP8 linear layers (forward, both
// backward GEMMs, both recipes) against the recipe emulated in PyTorch with its float8
// dtypes and float64 matmuls (tests/oracle/fp8_oracle.py), within fp32 rounding; and the
// tiny model trained 8 steps with each recipe, every step's loss and gradients against the
// recipe in PyTorch on the weights anvil reached (checkpointed every step and exported); the
// same run with recomputation, accumulation and 2 ranks (ddp, fsdp); tensorwise steps with the
// amax slots (model/fp8_slots.h) bit for bit those without; --fp8 refused where the device
// cannot run it; a resume naming a changed recipe; bench step's FP8 peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "fp8_amax_steps.h"
#include "model/config.h"
#include "ops/ops.h"
#include "testing.h"
#include "train/bench_step.h"
#include "train/config.h"
#include "train/resolve.h"

namespace anvil {
namespace {

std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST(Fp8Casts, MatchTorchOnEveryBf16PatternAndRandomFloats) {
  ANVIL_REQUIRE_ORACLE();
  std::vector<float> in;
  for (uint32_t b = 0; b < 65536; ++b) in.push_back(bf16_bits_to_f32(static_cast<uint16_t>(b)));
  std::mt19937 rng(26);
  for (int i = 0; i < (1 << 20); ++i) in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  const std::string dir = testing::temp_dir("fp8-casts");
  write_file_atomic(dir + "/in.f32", bytes_of(in));
  const auto r = testing::run_oracle("fp8_oracle.py", {"casts", dir + "/in.f32", dir + "/out.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string out = read_file(dir + "/out.bin");
  ASSERT_EQ(out.size(), 2 * in.size() + 2 * 256 * sizeof(float));
  int64_t checked = 0;
  for (int f = 0; f < 2; ++f) {
    const Fp8Format format = f == 0 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint8_t want = static_cast<uint8_t>(out[f * in.size() + i]);
      const uint8_t got = f32_to_fp8_bits(in[i], format);
      ASSERT_EQ(got, want) << fp8_format_name(format) << " of " << in[i] << " (bits 0x" << std::hex
                           << std::bit_cast<uint32_t>(in[i]) << ")";
      ++checked;
    }
    for (int code = 0; code < 256; ++code) {
      float want;
      std::memcpy(&want, out.data() + 2 * in.size() + (f * 256 + code) * sizeof(float), sizeof(float));
      const float got = fp8_bits_to_f32(static_cast<uint8_t>(code), format);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << fp8_format_name(format) << " code " << code;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << fp8_format_name(format) << " code " << code;
      }
    }
  }
  EXPECT_EQ(checked, 2 * static_cast<int64_t>(in.size()));
}

// The recipe's cast clamps first: nothing finite becomes NaN or infinite, and in range it is the plain cast.
TEST(Fp8Casts, SaturatedCastClampsToTheLargestFiniteValue) {
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const float max = fp8_max(format);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(max * 1.1f, format), format), max);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(-3e38f, format), format), -max);
    EXPECT_EQ(fp8_bits_to_f32(f32_to_fp8_bits_saturated(INFINITY, format), format), max);
    EXPECT_TRUE(std::isnan(fp8_bits_to_f32(f32_to_fp8_bits_saturated(NAN, format), format)));
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = bf16_bits_to_f32(static_cast<uint16_t>(b));
      if (std::fabs(x) <= max) {
        ASSERT_EQ(f32_to_fp8_bits_saturated(x, format), f32_to_fp8_bits(x, format)) << x;
      }
    }
  }
  EXPECT_TRUE(std::isnan(fp8_bits_to_f32(f32_to_fp8_bits(480.0f, Fp8Format::kE4M3), Fp8Format::kE4M3)));
  EXPECT_TRUE(std::isinf(fp8_bits_to_f32(f32_to_fp8_bits(61440.0f, Fp8Format::kE5M2), Fp8Format::kE5M2)));
}

// Values whose rows and columns differ in magnitude by up to e^3 each way, with a few
// outliers and a zero row: the shapes of activations and gradients that tell the recipes apart.
std::vector<float> uneven(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> row_scale(static_cast<size_t>(rows)), col_scale(static_cast<size_t>(cols));
  for (float& s : row_scale) s = std::exp(n(rng));
  for (float& s : col_scale) s = std::exp(n(rng));
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] =
          n(rng) * row_scale[static_cast<size_t>(r)] * col_scale[static_cast<size_t>(c)];
  for (int i = 0; i < 3; ++i) v[rng() % v.size()] *= 40.0f;
  std::fill(v.begin() + (rows / 2) * cols, v.begin() + (rows / 2 + 1) * cols, 0.0f);
  return v;
}

Tensor cpu_tensor(std::vector<float>& v, Shape s) { return Tensor(v.data(), DType::kF32, s, Device::kCPU); }

TEST(Fp8Linear, ForwardAndBothBackwardGemmsMatchTheTorchEmulation) {
  ANVIL_REQUIRE_ORACLE();
  const int64_t M = 37, K = 70, N = 53;
  std::mt19937 rng(8);
  std::vector<float> x = uneven(M, K, rng), w = uneven(N, K, rng), dy = uneven(M, N, rng), bias = uneven(1, N, rng);
  const std::string dir = testing::temp_dir("fp8-linear");
  SafetensorsWriter in;
  in.add("x", DType::kF32, {M, K}, x.data());
  in.add("w", DType::kF32, {N, K}, w.data());
  in.add("bias", DType::kF32, {N}, bias.data());
  in.add("dy", DType::kF32, {M, N}, dy.data());
  in.write(dir + "/in.safetensors");
  const auto r = testing::run_oracle("fp8_oracle.py", {"linear", dir + "/in.safetensors", dir});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::unique_ptr<Ops> ops = make_cpu_ops();
  for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    const std::string name = fp8_recipe_name(recipe), out = dir + "/" + name + ".safetensors";
    std::vector<float> y(static_cast<size_t>(M * N)), dx(static_cast<size_t>(M * K)),
        dw(static_cast<size_t>(N * K), 1.0f), dbias(static_cast<size_t>(N), 1.0f);
    ops->linear_fp8_forward(cpu_tensor(y, {M, N}), cpu_tensor(x, {M, K}), cpu_tensor(w, {N, K}), cpu_tensor(bias, {N}),
                            recipe);
    ops->linear_fp8_backward_input(cpu_tensor(dx, {M, K}), cpu_tensor(dy, {M, N}), cpu_tensor(w, {N, K}), recipe,
                                   false);
    ops->linear_fp8_backward_weight(cpu_tensor(dw, {N, K}), cpu_tensor(dbias, {N}), cpu_tensor(dy, {M, N}),
                                    cpu_tensor(x, {M, K}), recipe, false);
    SafetensorsFile want(out);
    const auto as_f64 = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    EXPECT_TRUE(testing::close_rel_l2(as_f64(y), read_as_f64(want.get("y")), 1e-6)) << name << " y";
    EXPECT_TRUE(testing::close_rel_l2(as_f64(dx), read_as_f64(want.get("dx")), 1e-6)) << name << " dx";
    EXPECT_TRUE(testing::close_rel_l2(as_f64(dw), read_as_f64(want.get("dw")), 1e-6)) << name << " dw";
    EXPECT_TRUE(testing::close_rel_l2(as_f64(dbias), read_as_f64(want.get("dbias")), 1e-6)) << name << " dbias";
  }
}

// The FP8 recipe is discontinuous: a value near a rounding tie casts either way, and fp32
// against float64 arithmetic puts some of them on the other side (about one activation per
// forward of this model). A flipped element of a gradient can move the whole gradient by 10%:
// the PyTorch recipe itself, from weights 1e-7 apart (relative), gives gradients up to 11%
// apart, and losses up to 2.4e-3 apart after 8 steps. So the run is checked step by step:
// anvil trains 8 steps, saving every step; at each step k the oracle takes the weights anvil
// had (the fixture, then the checkpoints exported in fp32) and batch k, and its loss must be
// anvil's logged loss within 1e-4 (relative; a forward flip moved one by 2.2e-5). The
// gradients are checked where the oracle's are stable, at the first step: `anvil grad`'s
// against the oracle's within 5e-3 relative L2 per tensor.
TEST(Fp8Training, EightStepsFollowTheTorchRecipeStepByStep) {
  ANVIL_REQUIRE_ORACLE();
  const std::string fx = testing::shared_dir() + "/fixtures/tiny-qwen3", golden = fx + "/golden_adamw.safetensors";
  const std::string dir = testing::temp_dir("fp8-train");
  SafetensorsFile gold(golden);
  std::vector<int64_t> all;
  for (int b = 0; b < 8; ++b) {
    const std::vector<int64_t> ids = read_as_i64(gold.get("batch" + std::to_string(b)));
    SafetensorsWriter one;
    one.add("input_ids", DType::kI64, {2, 37}, ids.data());
    one.write(dir + "/batch" + std::to_string(b) + ".safetensors");
    all.insert(all.end(), ids.begin(), ids.end());
  }
  SafetensorsWriter blocks;
  blocks.add("input_ids", DType::kI64, {16, 37}, all.data());
  blocks.write(dir + "/blocks.safetensors");
  for (const char* recipe : {"tensorwise", "rowwise"}) {
    const std::string run = dir + "/" + recipe;
    auto r = testing::run_anvil({"train", "--device", "cpu", "--model", fx, "--data", dir + "/blocks.safetensors",
                                 "--no-shuffle", "--steps", "8", "--micro-batch", "2", "--lr", "1e-3", "--log-every",
                                 "1", "--fp8", recipe, "--metrics", run + ".jsonl", "--save-every", "1", "--ckpt-dir",
                                 run + "-ckpt", "--sync-save"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::vector<double> losses;
    std::ifstream metrics(run + ".jsonl");
    for (std::string line; std::getline(metrics, line);)
      if (const Json j = json_parse(line, "metrics"); j.contains("step")) losses.push_back(j["loss"].get<double>());
    ASSERT_EQ(losses.size(), 8u) << recipe;
    std::vector<std::string> models = {fx};
    for (int k = 1; k < 8; ++k) {
      models.push_back(run + "-step" + std::to_string(k));
      r = testing::run_anvil(
          {"export", "--ckpt", run + "-ckpt/step-" + std::to_string(k), "--out", models.back(), "--dtype", "fp32"});
      ASSERT_EQ(r.exit_code, 0) << r.out;
    }
    std::vector<std::string> args = {"grads", recipe, golden, dir};
    args.insert(args.end(), models.begin(), models.end());
    r = testing::run_oracle("fp8_oracle.py", args);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    for (int k = 0; k < 8; ++k) {
      const std::string what = std::string(recipe) + " step " + std::to_string(k + 1);
      SafetensorsFile want(dir + "/" + std::to_string(k) + ".safetensors");
      const double want_loss = read_as_f64(want.get("loss"))[0];
      EXPECT_NEAR(losses[static_cast<size_t>(k)], want_loss, 1e-4 * want_loss) << what;
      if (k > 0) continue;
      const std::string grads = run + "-grads" + std::to_string(k) + ".safetensors";
      r = testing::run_anvil({"grad", "--device", "cpu", "--model", models[static_cast<size_t>(k)], "--tokens",
                              dir + "/batch" + std::to_string(k) + ".safetensors", "--out", grads, "--fp8", recipe});
      ASSERT_EQ(r.exit_code, 0) << r.out;
      SafetensorsFile got(grads);
      for (const SafeTensorInfo& g : want.tensors()) {
        if (g.name == "loss") continue;
        EXPECT_TRUE(testing::close_rel_l2(read_as_f64(got.get(g.name)), read_as_f64(g), 5e-3)) << what << " " << g.name;
      }
    }
  }
}

// Losses of the tiny fixture trained 3 steps with --fp8 rowwise, 2 sequences a step, and `extra`.
std::vector<double> fp8_losses(const std::string& tag, const std::vector<std::string>& extra) {
  static const std::string dir = testing::temp_dir("fp8-layouts");
  if (!path_exists(dir + "/blocks.safetensors")) testing::write_random_blocks(dir + "/blocks.safetensors", 8, 33, 26);
  std::vector<std::string> args = testing::tiny_train_args(dir + "/blocks.safetensors", 3,
                                                           {"--fp8", "rowwise", "--metrics", dir + "/" + tag + ".jsonl"});
  args.insert(args.end(), extra.begin(), extra.end());
  const testing::RunResult r = testing::run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << tag << ": " << r.out;
  std::vector<double> losses;
  std::ifstream metrics(dir + "/" + tag + ".jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (const Json j = json_parse(line, tag); j.contains("step")) losses.push_back(j["loss"].get<double>());
  return losses;
}

// The recipe quantizes each micro-batch's tensors by themselves, so one sequence per
// micro-batch trains the same in every layout: recomputation repeats the same casts (the
// same bits), two ranks of ddp or fsdp see what two accumulated micro-batches see (within the
// fp32 sums' order, and the casts that order can flip: 1e-4 relative).
TEST(Fp8Training, RecomputeAccumulationAndRanksTrainAlike) {
  const std::vector<double> base = fp8_losses("accum", {"--micro-batch", "1", "--grad-accum", "2"});
  ASSERT_EQ(base.size(), 3u);
  EXPECT_EQ(fp8_losses("full", {"--micro-batch", "1", "--grad-accum", "2", "--recompute", "full"}), base);
  EXPECT_EQ(fp8_losses("selective", {"--micro-batch", "1", "--grad-accum", "2", "--recompute", "selective"}), base);
  for (const char* mode : {"ddp", "fsdp"}) {
    const std::vector<double> two = fp8_losses(mode, {"--micro-batch", "1", "--nproc-per-node", "2", "--mode", mode});
    ASSERT_EQ(two.size(), 3u) << mode;
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(two[i], base[i], 1e-4 * base[i]) << mode << " step " << i + 1;
  }
}

// Each amax kept in a slot (taken in the forward, or written by RMSNorm and SwiGLU) is the one
// the cast would take itself, so the slots change no bit: with every recomputation and with
// the MLP in tiles (their x amax per tile, w's shared).
TEST(Fp8Training, AmaxSlotsGiveTheSameBitsAsEachCastTakingItsOwn) {
  for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull})
    for (int64_t mlp_tile : {kMlpTileAuto, int64_t{16}})
      testing::expect_fp8_amax_slots_change_no_bit(
          std::string(recompute_name(recompute)) + (mlp_tile == 16 ? ", MLP in tiles" : ""), "cpu",
          ParallelMode::kDdp, recompute, mlp_tile, 24);
}

TEST(Fp8Training, RefusedWhereTheDeviceCannotRunIt) {
  const ModelConfig model = preset_config("tiny");
  TrainConfig c;
  c.data.seq_len = 32;
  c.parallel.fp8 = Fp8Recipe::kTensorwise;
  RunFacts f;
  f.model = &model;
  f.fp8_unsupported = "FP8 tensor cores need compute capability 8.9 or newer; this GPU is 8.0";
  try {
    resolve_config(c, f);
    ADD_FAILURE() << "--fp8 tensorwise resolved on a device without FP8";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--fp8 tensorwise: FP8 tensor cores need"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use --fp8 off"), std::string::npos) << e.what();
  }
  // Rowwise where only its per-row scales are missing (cuBLASLt on Hopper): tensorwise is named.
  c.parallel.fp8 = Fp8Recipe::kRowwise;
  f.fp8_unsupported = "cuBLASLt has no FP8 GEMM with per-row scales on compute capability 9.0 (Hopper)";
  try {
    resolve_config(c, f);
    ADD_FAILURE() << "--fp8 rowwise resolved where its GEMMs cannot run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(use --fp8 tensorwise, or off)"), std::string::npos) << e.what();
  }
  c.parallel.fp8 = Fp8Recipe::kTensorwise;
  f.fp8_unsupported.clear();
  const ResolvedConfig r = resolve_config(c, f);
  EXPECT_EQ(r.config.parallel.fp8, Fp8Recipe::kTensorwise);
  EXPECT_NE(r.reasons.end(), std::find_if(r.reasons.begin(), r.reasons.end(), [](const std::string& s) {
              return s.rfind("fp8 tensorwise: ", 0) == 0;
            }));
  EXPECT_EQ(testing::run_anvil({"train", "--fp8", "e4m3"}).exit_code, 2);
}

// FP8 changes the numerics: a resume with another recipe says so (nothing FP8 is saved, so
// any recipe resumes any checkpoint).
TEST(Fp8Training, AResumeNamesAChangedRecipe) {
  TrainConfig rowwise;
  rowwise.parallel.fp8 = Fp8Recipe::kRowwise;
  TrainConfig off = rowwise;
  off.parallel.fp8 = Fp8Recipe::kOff;
  EXPECT_EQ(continuation_changes(train_record(rowwise, 1), train_record(off, 1)),
            std::vector<std::string>{"fp8 \"rowwise\" -> \"off\""});
  EXPECT_TRUE(continuation_changes(train_record(rowwise, 1), train_record(rowwise, 1)).empty());
}

TEST(Fp8Bench, StepNamesTheRecipeAndTheFp8Peak) {
  EXPECT_NEAR(gpu_peak_fp8_tflops("NVIDIA H200"), 2 * gpu_peak_tflops("NVIDIA H200"), 0.2);  // the datasheets
  EXPECT_EQ(gpu_peak_fp8_tflops("NVIDIA A100-SXM4-80GB"), 0.0);  // no FP8 tensor cores
  const testing::RunResult r = testing::run_anvil({"bench", "step", "--device", "cpu", "--preset", "tiny", "--seq-len",
                                                   "32", "--steps", "2", "--warmup", "1", "--fp8", "rowwise"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json j = json_parse(r.out.substr(r.out.rfind('{')), "bench step");
  EXPECT_EQ(j["fp8"].get<std::string>(), "rowwise");
  EXPECT_TRUE(j.contains("mfu_fp8") && j["mfu_fp8"].is_null()) << r.out;  // the CPU has no peak
}

}  // namespace
}  // namespace anvil
