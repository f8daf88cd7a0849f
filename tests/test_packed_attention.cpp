// Packed documents in the CPU reference ops (ops.h, positions): attention over a sequence of
// several documents gives, bit for bit, what each document gives as a sequence of its own;
// qk-norm + RoPE with positions gives what a table with one row per token (the angles of
// its position) gives, and not what positions 0..T-1 give. The model-level check against
// transformers is tests/test_model_oracle.cpp (PackedOracle); RoPE is relative, so there
// the documents' positions cancel out of attention and only this test sees them.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ops/ops.h"

namespace anvil {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

Tensor f32(std::vector<float>& v, Shape s) { return Tensor(v.data(), DType::kF32, s, Device::kCPU); }
Tensor i32(std::vector<int32_t>& v) {
  return Tensor(v.data(), DType::kI32, {static_cast<int64_t>(v.size())}, Device::kCPU);
}

// Positions of one sequence holding documents of these lengths.
std::vector<int32_t> positions_of(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> pos;
  for (int64_t n : lengths)
    for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(i));
  return pos;
}

constexpr int kH = 4, kKV = 2;
constexpr int64_t kHd = 8, kHeads = kH + 2 * kKV;

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// Forward and backward of one sequence of T tokens: qkv and dout are its rows.
AttentionResult attend(Ops& ops, std::vector<float> qkv, std::vector<float> dout, std::vector<int32_t> pos) {
  const int64_t T = static_cast<int64_t>(qkv.size()) / (kHeads * kHd);
  AttentionResult r;
  r.out.resize(static_cast<size_t>(T * kH * kHd));
  r.lse.resize(static_cast<size_t>(kH * T));
  r.dqkv.resize(qkv.size());
  const Tensor p = pos.empty() ? Tensor() : i32(pos);
  ops.attention_forward(f32(r.out, {1, T, kH, kHd}), f32(r.lse, {1, kH, T}), f32(qkv, {1, T, kHeads, kHd}), kH, kKV, p);
  ops.attention_backward(f32(r.dqkv, {1, T, kHeads, kHd}), f32(dout, {1, T, kH, kHd}), f32(qkv, {1, T, kHeads, kHd}),
                         f32(r.out, {1, T, kH, kHd}), f32(r.lse, {1, kH, T}), kH, kKV, p);
  return r;
}

// Rows [begin, end) of a (T, width) buffer.
std::vector<float> rows(const std::vector<float>& v, int64_t width, int64_t begin, int64_t end) {
  return std::vector<float>(v.begin() + begin * width, v.begin() + end * width);
}

TEST(PackedAttention, EachDocumentAsItsOwnSequence) {
  const std::unique_ptr<Ops> ops = make_cpu_ops();
  const std::vector<int64_t> lengths = {5, 1, 12, 2, 1, 9};
  const int64_t T = 30;
  const std::vector<float> qkv = random_values(T * kHeads * kHd, 1), dout = random_values(T * kH * kHd, 2);
  const AttentionResult packed = attend(*ops, qkv, dout, positions_of(lengths));
  int64_t start = 0;
  for (int64_t n : lengths) {
    const int64_t end = start + n;
    const AttentionResult alone =
        attend(*ops, rows(qkv, kHeads * kHd, start, end), rows(dout, kH * kHd, start, end), {});
    EXPECT_EQ(rows(packed.out, kH * kHd, start, end), alone.out) << "document at " << start;
    EXPECT_EQ(rows(packed.dqkv, kHeads * kHd, start, end), alone.dqkv) << "document at " << start;
    for (int h = 0; h < kH; ++h)
      EXPECT_EQ(rows(packed.lse, 1, h * T + start, h * T + end), rows(alone.lse, 1, h * n, h * n + n))
          << "document at " << start << ", head " << h;
    start = end;
  }
  // The same tokens as one document: attention crosses the documents.
  const AttentionResult wrapped = attend(*ops, qkv, dout, {});
  EXPECT_NE(wrapped.out, packed.out);
  EXPECT_NE(wrapped.dqkv, packed.dqkv);
}

TEST(PackedAttention, RopeTakesEachTokensPosition) {
  const std::unique_ptr<Ops> ops = make_cpu_ops();
  std::vector<int32_t> pos = positions_of({3, 1, 6, 4});
  const int64_t N = static_cast<int64_t>(pos.size()), half = kHd / 2, qk = kH + kKV;
  std::vector<float> in = random_values(N * kHeads * kHd, 3), dout = random_values(N * kHeads * kHd, 4);
  std::vector<float> qw = random_values(kHd, 5), kw = random_values(kHd, 6);
  std::vector<float> cos = random_values(N * half, 7), sin = random_values(N * half, 8);
  // The table gathered by position: row n holds position pos[n]'s angles.
  std::vector<float> cos_rows, sin_rows;
  for (int32_t p : pos) {
    cos_rows.insert(cos_rows.end(), cos.begin() + p * half, cos.begin() + (p + 1) * half);
    sin_rows.insert(sin_rows.end(), sin.begin() + p * half, sin.begin() + (p + 1) * half);
  }
  struct Run {
    std::vector<float> out, rstd, din, dq, dk;
  };
  const auto run = [&](std::vector<float>& c, std::vector<float>& s, const Tensor& positions) {
    Run r{std::vector<float>(in.size()), std::vector<float>(static_cast<size_t>(N * qk)), std::vector<float>(in.size()),
          std::vector<float>(kHd), std::vector<float>(kHd)};
    const Shape rows_shape{N, kHeads, kHd}, table{static_cast<int64_t>(c.size()) / half, half};
    ops->qk_norm_rope_forward(f32(r.out, rows_shape), f32(r.rstd, {N, qk}), f32(in, rows_shape), f32(qw, {kHd}),
                              f32(kw, {kHd}), f32(c, table), f32(s, table), kH, kKV, 1e-6f, positions);
    ops->qk_norm_rope_backward(f32(r.din, rows_shape), f32(r.dq, {kHd}), f32(r.dk, {kHd}), f32(dout, rows_shape),
                               f32(in, rows_shape), f32(qw, {kHd}), f32(kw, {kHd}), f32(r.rstd, {N, qk}), f32(c, table),
                               f32(s, table), kH, kKV, false, positions);
    return r;
  };
  const Run by_position = run(cos, sin, i32(pos)), by_row = run(cos_rows, sin_rows, Tensor());
  const Run in_order = run(cos, sin, Tensor());
  EXPECT_EQ(by_position.out, by_row.out);
  EXPECT_EQ(by_position.din, by_row.din);
  EXPECT_EQ(by_position.dq, by_row.dq);
  EXPECT_EQ(by_position.dk, by_row.dk);
  EXPECT_NE(by_position.out, in_order.out) << "positions were ignored";
  EXPECT_NE(by_position.din, in_order.din) << "positions were ignored";
}

}  // namespace
}  // namespace anvil
