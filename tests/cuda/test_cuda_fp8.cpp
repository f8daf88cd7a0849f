// The FP8 linear layers on the GPU against the CPU emulation (ops/fp8_recipe.h): the casts,
// amaxes and scales of fp8_cast.h bit for bit (every operand layout, both recipes), and each
// cuBLASLt FP8 GEMM (forward, both backward GEMMs, bias, accumulation) within the rounding of
// its bf16 output (fp32 outputs: the order of the fp32 additions). FP8 against bf16 differs by
// about 3%, far outside these bounds, so a GEMM that skipped the casts would fail. The amax
// that RMSNorm, the fused add + RMSNorm and SwiGLU write of their outputs is the cast's own
// amax pass's, bit for bit, and a cast given it writes the same bytes; training steps with the
// model's amax slots (model/fp8_slots.h) give the bits of steps without them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/fp8.h"
#include "cuda_test_util.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/fp8_recipe.h"
#include "ops/ops.h"
#include "../fp8_amax_steps.h"

namespace anvil {
namespace {

// An FP8 GEMM's fp32 output (dw) against the fp32 emulation of the same FP8 operands: Hopper's
// FP8 tensor cores add the products in an accumulator narrower than fp32 (about 14 bits kept:
// DeepSeek-V3's report, section 3.3.2), so the two differ by more than the order of fp32
// additions (kF32); measured on an H200, rel L2 1.3e-4 to 2.7e-4 over these shapes. Still well
// inside one bf16 rounding (kOut1), the bar for every FP8 GEMM.
constexpr double kFp8F32 = 1e-3;

// Rows of different magnitudes (e^-2 .. e^2), so that per-row scales differ.
std::vector<float> uneven(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> v = randn(rows * cols, seed);
  std::mt19937 gen(seed + 1);
  std::uniform_real_distribution<float> e(-2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(e(gen));
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] = round_bf16(v[static_cast<size_t>(r * cols + c)] * s);
  }
  return v;
}

// quantize_fp8 of an operand (rows, k) (the source (rows, k), or (k, rows) transposed): its
// bytes and inverse scales against the CPU's; tensorwise transposed, also its straight copy
// (the source cast as it lies).
void expect_exact_cast(int64_t rows, int64_t k, bool transposed, Fp8Recipe recipe) {
  const std::string what =
      std::string(fp8_recipe_name(recipe)) + (transposed ? " transposed " : " ") + dims({rows, k});
  const std::vector<float> src = uneven(transposed ? k : rows, transposed ? rows : k, 11);
  const auto at = [&](int64_t r, int64_t c) { return transposed ? src[c * rows + r] : src[r * k + c]; };
  std::vector<float> amax(static_cast<size_t>(rows), 0.0f);
  float whole = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      amax[static_cast<size_t>(r)] = std::max(amax[static_cast<size_t>(r)], std::fabs(at(r, c)));
      whole = std::max(whole, std::fabs(at(r, c)));
    }
  std::vector<uint16_t> bits(src.size());
  for (size_t i = 0; i < src.size(); ++i) bits[i] = f32_to_bf16_bits(src[i]);
  void* d_src = gpu().runtime().alloc(bits.size() * 2);
  void* d_dst = gpu().runtime().alloc(static_cast<size_t>(rows * k));
  void* d_stats = gpu().runtime().alloc(static_cast<size_t>(fp8_scratch(rows, 0, k).p_stats));
  const bool both = transposed && recipe == Fp8Recipe::kTensorwise;
  void* d_straight = both ? gpu().runtime().alloc(static_cast<size_t>(rows * k)) : nullptr;
  ASSERT_EQ(cudaMemcpy(d_src, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  const float* d_inv = cuda::quantize_fp8(
      static_cast<uint8_t*>(d_dst), static_cast<float*>(d_stats), static_cast<const __nv_bfloat16*>(d_src), rows, k,
      transposed, recipe == Fp8Recipe::kRowwise, static_cast<cudaStream_t>(gpu().runtime().stream()),
      static_cast<uint8_t*>(d_straight));
  const int64_t scales = recipe == Fp8Recipe::kRowwise ? rows : 1;
  std::vector<uint8_t> got(static_cast<size_t>(rows * k));
  std::vector<float> inv(static_cast<size_t>(scales));
  gpu().runtime().synchronize();
  ASSERT_EQ(cudaMemcpy(got.data(), d_dst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(inv.data(), d_inv, inv.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float scale =
        fp8_scale(recipe == Fp8Recipe::kRowwise ? amax[static_cast<size_t>(r)] : whole, kFp8Format, recipe);
    if (r < scales) {
      EXPECT_EQ(inv[static_cast<size_t>(r)], 1.0f / scale) << what << " row " << r;
    }
    for (int64_t c = 0; c < k; ++c)
      wrong += got[static_cast<size_t>(r * k + c)] != f32_to_fp8_bits_saturated(at(r, c) * scale, kFp8Format);
  }
  EXPECT_EQ(wrong, 0) << what << ": FP8 bytes that differ from the CPU's";
  if (both) {
    const float scale = fp8_scale(whole, kFp8Format, recipe);
    ASSERT_EQ(cudaMemcpy(got.data(), d_straight, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    wrong = 0;
    for (size_t i = 0; i < src.size(); ++i) wrong += got[i] != f32_to_fp8_bits_saturated(src[i] * scale, kFp8Format);
    EXPECT_EQ(wrong, 0) << what << ": FP8 bytes of the straight copy that differ from the CPU's";
    gpu().runtime().release(d_straight);
  }
  gpu().runtime().release(d_src);
  gpu().runtime().release(d_dst);
  gpu().runtime().release(d_stats);
}

// Tensorwise takes the two-pass kernels where rows and k are multiples of 8 (96 x 80; 200 x 136
// with partial 64 x 64 tiles; 1024 x 1536, whose amax joins 768 blocks), else the three-pass
// ones (90 x 70).
TEST(CudaFp8, CastsAmaxAndScalesAreExact) {
  REQUIRE_GPU();
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{96, 80}, {90, 70}, {200, 136}, {1024, 1536}})
    for (bool transposed : {false, true})
      for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise})
        expect_exact_cast(rows, k, transposed, recipe);
}

TEST(CudaFp8, GemmsMatchTheCpuEmulation) {
  REQUIRE_GPU();
  if (!gpu().fp8_unsupported(Fp8Recipe::kTensorwise).empty())
    GTEST_SKIP() << gpu().fp8_unsupported(Fp8Recipe::kTensorwise);
  struct Case {
    int64_t m, k, n;
    bool bias;
  };
  for (Fp8Recipe recipe : {Fp8Recipe::kTensorwise, Fp8Recipe::kRowwise}) {
    if (!gpu().fp8_unsupported(recipe).empty()) {
      std::printf("%s: not run here: %s\n", fp8_recipe_name(recipe), gpu().fp8_unsupported(recipe).c_str());
      continue;
    }
    for (const Case& cs : {Case{64, 128, 96, false}, Case{256, 512, 384, true}, Case{48, 64, 32, true}}) {
      const std::string tag = std::string(fp8_recipe_name(recipe)) + " " + dims({cs.m, cs.k, cs.n});
      uint32_t seed = static_cast<uint32_t>(cs.m * 7 + cs.k);
      Buf x({cs.m, cs.k}, DType::kBF16, uneven(cs.m, cs.k, seed++));
      Buf w({cs.n, cs.k}, DType::kBF16, uneven(cs.n, cs.k, seed++));
      Buf b({cs.n}, DType::kBF16, randn(cs.n, seed++));
      Buf y({cs.m, cs.n}, DType::kBF16, nans(cs.m * cs.n));
      Tensor none;
      cpu().linear_fp8_forward(y.c(), x.c(), w.c(), cs.bias ? b.c() : none, recipe);
      gpu().linear_fp8_forward(y.g(), x.g(), w.g(), cs.bias ? b.g() : none, recipe);
      check("linear_fp8_forward " + tag + (cs.bias ? " +bias" : "") + " y", y, kOut1);

      Buf dy({cs.m, cs.n}, DType::kBF16, uneven(cs.m, cs.n, seed++));
      Buf dx({cs.m, cs.k}, DType::kBF16, nans(cs.m * cs.k));
      cpu().linear_fp8_backward_input(dx.c(), dy.c(), w.c(), recipe, false);
      gpu().linear_fp8_backward_input(dx.g(), dy.g(), w.g(), recipe, false);
      check("linear_fp8_backward_input " + tag + " dx", dx, kOut1);
      Buf dx2({cs.m, cs.k}, DType::kBF16, randn(cs.m * cs.k, seed++));
      cpu().linear_fp8_backward_input(dx2.c(), dy.c(), w.c(), recipe, true);
      gpu().linear_fp8_backward_input(dx2.g(), dy.g(), w.g(), recipe, true);
      check("linear_fp8_backward_input " + tag + " dx (accumulate)", dx2, kOut1);

      Buf dw({cs.n, cs.k}, DType::kF32, randn(cs.n * cs.k, seed++));
      Buf db({cs.n}, DType::kF32, randn(cs.n, seed++));
      cpu().linear_fp8_backward_weight(dw.c(), cs.bias ? db.c() : none, dy.c(), x.c(), recipe);
      gpu().linear_fp8_backward_weight(dw.g(), cs.bias ? db.g() : none, dy.g(), x.g(), recipe);
      check("linear_fp8_backward_weight " + tag + " dw", dw, kFp8F32);
      if (cs.bias) check("linear_fp8_backward_weight " + tag + " dbias", db, kF32);
      Buf dw16({cs.n, cs.k}, DType::kBF16, nans(cs.n * cs.k));
      cpu().linear_fp8_backward_weight(dw16.c(), none, dy.c(), x.c(), recipe, false);
      gpu().linear_fp8_backward_weight(dw16.g(), none, dy.g(), x.g(), recipe, false);
      check("linear_fp8_backward_weight " + tag + " dw (bf16, written)", dw16, kOut1);
    }
  }
}

// linear_fp8_backward (dy quantized once for both GEMMs) gives the bits of the two ops it
// stands for: dw (fp32 accumulated, fp32 written, bf16 written), dbias and dx.
TEST(CudaFp8, BackwardInOneOpEqualsTheTwoOps) {
  REQUIRE_GPU();
  if (!gpu().fp8_unsupported(Fp8Recipe::kTensorwise).empty())
    GTEST_SKIP() << gpu().fp8_unsupported(Fp8Recipe::kTensorwise);
  const Fp8Recipe tw = Fp8Recipe::kTensorwise;
  const auto bits_equal = [](Buf& a, Buf& b) { return a.got() == b.got(); };
  for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{64, 128, 96}, {256, 512, 384}, {48, 64, 32}})
    for (const auto& [dw_type, acc] : {std::pair{DType::kF32, true}, {DType::kF32, false}, {DType::kBF16, false}}) {
      const std::string tag = dims({m, k, n}) + " dw " + dtype_name(dw_type) + (acc ? " accumulated" : " written");
      uint32_t seed = static_cast<uint32_t>(m + k + n);
      Buf x({m, k}, DType::kBF16, uneven(m, k, seed++)), w({n, k}, DType::kBF16, uneven(n, k, seed++));
      Buf dy({m, n}, DType::kBF16, uneven(m, n, seed++));
      const std::vector<float> dw0 = randn(n * k, seed++), db0 = randn(n, seed++);
      Buf dx1({m, k}, DType::kBF16, nans(m * k)), dw1({n, k}, dw_type, dw0), db1({n}, DType::kF32, db0);
      Buf dx2({m, k}, DType::kBF16, nans(m * k)), dw2({n, k}, dw_type, dw0), db2({n}, DType::kF32, db0);
      const bool bias = dw_type == DType::kF32;
      gpu().linear_fp8_backward_weight(dw1.g(), bias ? db1.g() : Tensor(), dy.g(), x.g(), tw, acc);
      gpu().linear_fp8_backward_input(dx1.g(), dy.g(), w.g(), tw, false);
      gpu().linear_fp8_backward(dx2.g(), dw2.g(), bias ? db2.g() : Tensor(), dy.g(), x.g(), w.g(), tw, acc);
      cpu().linear_fp8_backward(dx2.c(), dw2.c(), bias ? db2.c() : Tensor(), dy.c(), x.c(), w.c(), tw, acc);
      EXPECT_TRUE(bits_equal(dx1, dx2)) << tag << ": dx";
      EXPECT_TRUE(bits_equal(dw1, dw2)) << tag << ": dw";
      EXPECT_TRUE(bits_equal(db1, db2)) << tag << ": dbias";
      check("linear_fp8_backward " + tag + " dx against the CPU", dx2, kOut1);
      check("linear_fp8_backward " + tag + " dw against the CPU", dw2, dw_type == DType::kF32 ? kFp8F32 : kOut1);
    }
}

// A producer's amax (written into `amax` by the op) against the tensorwise cast of its bf16
// output t (rows, k): the cast's own amax pass (written to a slot) gives the same bits, and the
// cast given the producer's amax writes the same bytes and inverse scale as the one taking its own.
void expect_cast_amax(const std::string& what, Buf& t, Buf& amax, int64_t rows, int64_t k) {
  const auto stream = static_cast<cudaStream_t>(gpu().runtime().stream());
  const auto* src = static_cast<const __nv_bfloat16*>(t.g().data);
  const size_t n = static_cast<size_t>(rows * k);
  void* d_bytes = gpu().runtime().alloc(2 * n);
  void* d_stats = gpu().runtime().alloc(2 * static_cast<size_t>(fp8_scratch(rows, 0, k).p_stats));
  void* d_own = gpu().runtime().alloc(sizeof(float));
  auto* own_bytes = static_cast<uint8_t*>(d_bytes);
  auto* stats = static_cast<float*>(d_stats);
  const float* own_inv =
      cuda::quantize_fp8(own_bytes, stats, src, rows, k, false, false, stream, nullptr, {static_cast<float*>(d_own)});
  const float* known_inv = cuda::quantize_fp8(own_bytes + n, stats + 3 * std::max(rows, k), src, rows, k, false, false,
                                              stream, nullptr, {static_cast<float*>(amax.g().data), true});
  gpu().runtime().synchronize();
  float own = NAN, inv[2] = {NAN, NAN};
  std::vector<uint8_t> bytes(2 * n);
  ASSERT_EQ(cudaMemcpy(&own, d_own, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&inv[0], own_inv, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(&inv[1], known_inv, sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bytes.data(), d_bytes, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  double host = 0;
  for (double v : t.got()) host = std::max(host, std::fabs(v));
  const float written = static_cast<float>(amax.got()[0]);
  EXPECT_EQ(std::bit_cast<uint32_t>(written), std::bit_cast<uint32_t>(own)) << what << ": " << written << " vs " << own;
  EXPECT_EQ(static_cast<double>(own), host) << what;
  EXPECT_EQ(inv[0], inv[1]) << what;
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n),
                         bytes.begin() + static_cast<std::ptrdiff_t>(n)))
      << what << ": the cast given the amax wrote other bytes";
  gpu().runtime().release(d_bytes);
  gpu().runtime().release(d_stats);
  gpu().runtime().release(d_own);
}

// Rows of 256 (the vector kernels, and a 64 x 2048 amax joined over 2048 blocks) and of 100
// (the scalar ones; the fused add + RMSNorm falls back to its two ops there). The amax starts
// as NaN: the op must write it, not only raise it.
TEST(CudaFp8, ProducersWriteTheAmaxOfTheCast) {
  REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 256}, {37, 100}, {2048, 256}}) {
    const std::string tag = dims({rows, cols});
    uint32_t seed = static_cast<uint32_t>(rows + cols);
    Buf x({rows, cols}, DType::kBF16, uneven(rows, cols, seed++)), w({cols}, DType::kBF16, randn(cols, seed++));
    Buf b({rows, cols}, DType::kBF16, uneven(rows, cols, seed++)), sum({rows, cols}, DType::kBF16, nans(rows * cols));
    Buf out({rows, cols}, DType::kBF16, nans(rows * cols)), rstd({rows}, DType::kF32, nans(rows));
    Buf amax({1}, DType::kF32, nans(1)), sum_amax({1}, DType::kF32, nans(1));
    gpu().rmsnorm_forward(out.g(), rstd.g(), x.g(), w.g(), 1e-6f, amax.g());
    expect_cast_amax("rmsnorm_forward " + tag, out, amax, rows, cols);
    gpu().add_rmsnorm_forward(sum.g(), out.g(), rstd.g(), x.g(), b.g(), w.g(), 1e-6f, sum_amax.g());
    expect_cast_amax("add_rmsnorm_forward " + tag, out, sum_amax, rows, cols);
    Buf gate_up({rows, 2 * cols}, DType::kBF16, uneven(rows, 2 * cols, seed++));
    Buf act({rows, cols}, DType::kBF16, nans(rows * cols)), act_amax({1}, DType::kF32, nans(1));
    gpu().swiglu_forward(act.g(), gate_up.g(), act_amax.g());
    expect_cast_amax("swiglu_forward " + tag, act, act_amax, rows, cols);
  }
}

// The CPU test's (test_fp8.cpp) on the GPU: bf16 tensors, the fused producers' amax, the
// casts' kernels; one-GPU fsdp too.
TEST(CudaFp8, AmaxSlotsGiveTheSameBits) {
  REQUIRE_GPU();
  if (!gpu().fp8_unsupported(Fp8Recipe::kTensorwise).empty())
    GTEST_SKIP() << gpu().fp8_unsupported(Fp8Recipe::kTensorwise);
  struct Case {
    ParallelMode mode;
    Recompute recompute;
    int64_t mlp_tile;
  };
  for (const Case& cs : {Case{ParallelMode::kDdp, Recompute::kNone, kMlpTileAuto},
                         Case{ParallelMode::kFsdp, Recompute::kNone, kMlpTileAuto},
                         Case{ParallelMode::kDdp, Recompute::kSelective, kMlpTileAuto},
                         Case{ParallelMode::kDdp, Recompute::kFull, kMlpTileAuto},
                         Case{ParallelMode::kDdp, Recompute::kNone, 32}})
    testing::expect_fp8_amax_slots_change_no_bit(std::string(cs.mode == ParallelMode::kDdp ? "ddp " : "fsdp ") +
                                                     recompute_name(cs.recompute) +
                                                     (cs.mlp_tile == 32 ? ", MLP in tiles" : ""),
                                                 "cuda", cs.mode, cs.recompute, cs.mlp_tile, 64);
}

}  // namespace
}  // namespace anvil
