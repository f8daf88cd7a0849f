// Every CUDA op but attention (GEMMs, embedding, norms, RoPE, SwiGLU, conversions,
// cross-entropy, AdamW, sums of squares, the side queue, determinism) against the fp32 CPU
// reference, on random inputs of several shapes (odd sizes included, so the scalar paths and
// partial tiles run too). Inputs, poisoning and tolerances: cuda_test_util.h. Attention:
// test_cuda_attention.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/ops.h"
#include "cuda_test_util.h"

namespace anvil {
namespace {

TEST(CudaOps, Linear) {
  REQUIRE_GPU();
  struct Case { int64_t m, k, n; bool bias; };
  for (const Case& cs : {Case{64, 128, 96, false}, Case{37, 100, 61, true}, Case{33, 77, 45, true},
                         Case{256, 512, 384, true}, Case{1, 64, 8, false}}) {
    const std::string tag = dims({cs.m, cs.k, cs.n});
    uint32_t seed = static_cast<uint32_t>(cs.m * 7 + cs.k);
    Buf x({cs.m, cs.k}, DType::kBF16, randn(cs.m * cs.k, seed++));
    Buf w({cs.n, cs.k}, DType::kBF16, randn(cs.n * cs.k, seed++, 0.1f));
    Buf b({cs.n}, DType::kBF16, randn(cs.n, seed++));
    Buf y({cs.m, cs.n}, DType::kBF16, nans(cs.m * cs.n));
    Tensor none;
    cpu().linear_forward(y.c(), x.c(), w.c(), cs.bias ? b.c() : none);
    gpu().linear_forward(y.g(), x.g(), w.g(), cs.bias ? b.g() : none);
    check("linear_forward " + tag + (cs.bias ? " +bias" : "") + " y", y, kOut1);

    Buf dy({cs.m, cs.n}, DType::kBF16, randn(cs.m * cs.n, seed++));
    Buf dx({cs.m, cs.k}, DType::kBF16, nans(cs.m * cs.k));
    cpu().linear_backward_input(dx.c(), dy.c(), w.c(), false);
    gpu().linear_backward_input(dx.g(), dy.g(), w.g(), false);
    check("linear_backward_input " + tag + " dx", dx, kOut1);
    Buf dx2({cs.m, cs.k}, DType::kBF16, randn(cs.m * cs.k, seed++));
    cpu().linear_backward_input(dx2.c(), dy.c(), w.c(), true);
    gpu().linear_backward_input(dx2.g(), dy.g(), w.g(), true);
    check("linear_backward_input " + tag + " dx (accumulate)", dx2, kOut1);

    Buf dw({cs.n, cs.k}, DType::kF32, randn(cs.n * cs.k, seed++));
    Buf db({cs.n}, DType::kF32, randn(cs.n, seed++));
    cpu().linear_backward_weight(dw.c(), cs.bias ? db.c() : none, dy.c(), x.c());
    gpu().linear_backward_weight(dw.g(), cs.bias ? db.g() : none, dy.g(), x.g());
    check("linear_backward_weight " + tag + " dw", dw, kF32);
    if (cs.bias) check("linear_backward_weight " + tag + " dbias", db, kF32);
  }
}

TEST(CudaOps, Embedding) {
  REQUIRE_GPU();
  struct Case { int64_t n, vocab, cols; };
  for (const Case& cs : {Case{50, 37, 64}, Case{300, 1000, 100}, Case{700, 5, 24}, Case{9, 20000, 2048}}) {
    const std::string tag = dims({cs.n, cs.vocab, cs.cols});
    std::mt19937 gen(static_cast<uint32_t>(cs.n));
    std::vector<int32_t> id(static_cast<size_t>(cs.n));
    for (auto& v : id) v = static_cast<int32_t>(gen() % static_cast<uint32_t>(cs.vocab));
    Ids ids(id);
    Buf table({cs.vocab, cs.cols}, DType::kBF16, randn(cs.vocab * cs.cols, 3));
    Buf out({cs.n, cs.cols}, DType::kBF16, nans(cs.n * cs.cols));
    cpu().embedding_forward(out.c(), ids.c(), table.c());
    gpu().embedding_forward(out.g(), ids.g(), table.g());
    check("embedding_forward " + tag + " out", out, 0.0);
    Buf dout({cs.n, cs.cols}, DType::kBF16, randn(cs.n * cs.cols, 4));
    Buf dtable({cs.vocab, cs.cols}, DType::kF32, randn(cs.vocab * cs.cols, 5));
    cpu().embedding_backward(dtable.c(), ids.c(), dout.c());
    gpu().embedding_backward(dtable.g(), ids.g(), dout.g());
    check("embedding_backward " + tag + " dtable", dtable, kExact32);
  }
}

TEST(CudaOps, RmsNorm) {
  REQUIRE_GPU();
  struct Case { int64_t rows, cols; };
  // 1100 rows take several rows per block of the backward's fixed grid.
  for (const Case& cs : {Case{7, 64}, Case{33, 1000}, Case{300, 2048}, Case{5, 777}, Case{2, 5120}, Case{3, 8192},
                         Case{1100, 256}}) {
    const std::string tag = dims({cs.rows, cs.cols});
    const int64_t n = cs.rows * cs.cols;
    Buf x({cs.rows, cs.cols}, DType::kBF16, randn(n, 11, 2.0f));
    std::vector<float> wv = randn(cs.cols, 12, 0.2f);
    for (auto& v : wv) v = round_bf16(1.0f + v);
    Buf w({cs.cols}, DType::kBF16, wv);
    Buf out({cs.rows, cs.cols}, DType::kBF16, nans(n));
    Buf rstd({cs.rows}, DType::kF32, nans(cs.rows));
    cpu().rmsnorm_forward(out.c(), rstd.c(), x.c(), w.c(), 1e-6f);
    gpu().rmsnorm_forward(out.g(), rstd.g(), x.g(), w.g(), 1e-6f);
    check("rmsnorm_forward " + tag + " out", out, kOut1);
    check("rmsnorm_forward " + tag + " rstd", rstd, kExact32 * 10);
    Buf dout({cs.rows, cs.cols}, DType::kBF16, randn(n, 13));
    Buf dw({cs.cols}, DType::kF32, randn(cs.cols, 14));
    for (bool acc : {false, true}) {
      Buf dx({cs.rows, cs.cols}, DType::kBF16, acc ? randn(n, 15) : nans(n));
      cpu().rmsnorm_backward(dx.c(), dw.c(), dout.c(), x.c(), w.c(), rstd.c(), acc);
      gpu().rmsnorm_backward(dx.g(), dw.g(), dout.g(), x.g(), w.g(), rstd.g(), acc);
      check("rmsnorm_backward " + tag + (acc ? " dx (accumulate)" : " dx"), dx, kOut1);
      check("rmsnorm_backward " + tag + " dw", dw, kF32);
    }
  }
}

// The residual add fused with the RMSNorm after it: against the CPU reference (add, then
// rmsnorm_forward), and bit for bit against the GPU's own two ops, in place as the model
// runs it (sum aliases a) and not; 777 columns take the unfused path.
TEST(CudaOps, AddRmsNorm) {
  REQUIRE_GPU();
  struct Case { int64_t rows, cols; };
  for (const Case& cs : {Case{7, 64}, Case{33, 1000}, Case{300, 2048}, Case{5, 777}, Case{2, 5120}}) {
    const int64_t n = cs.rows * cs.cols;
    std::vector<float> wv = randn(cs.cols, 22, 0.2f);
    for (auto& v : wv) v = round_bf16(1.0f + v);
    Buf w({cs.cols}, DType::kBF16, wv);
    for (bool in_place : {false, true}) {
      const std::string tag = dims({cs.rows, cs.cols}) + (in_place ? " in place" : "");
      Buf a({cs.rows, cs.cols}, DType::kBF16, randn(n, 23, 2.0f)), b({cs.rows, cs.cols}, DType::kBF16, randn(n, 24));
      Buf sum({cs.rows, cs.cols}, DType::kBF16, nans(n)), out({cs.rows, cs.cols}, DType::kBF16, nans(n));
      Buf rstd({cs.rows}, DType::kF32, nans(cs.rows));
      Buf& sum_out = in_place ? a : sum;
      // The GPU's two ops first, from the same inputs.
      Buf s2({cs.rows, cs.cols}, DType::kBF16, nans(n)), o2({cs.rows, cs.cols}, DType::kBF16, nans(n));
      Buf r2({cs.rows}, DType::kF32, nans(cs.rows));
      gpu().add(s2.g(), a.g(), b.g());
      gpu().rmsnorm_forward(o2.g(), r2.g(), s2.g(), w.g(), 1e-6f);
      cpu().add_rmsnorm_forward(sum_out.c(), out.c(), rstd.c(), a.c(), b.c(), w.c(), 1e-6f);
      gpu().add_rmsnorm_forward(sum_out.g(), out.g(), rstd.g(), a.g(), b.g(), w.g(), 1e-6f);
      check("add_rmsnorm_forward " + tag + " sum", sum_out, kOut1);
      check("add_rmsnorm_forward " + tag + " out", out, kOut1);
      // The GPU norms the sum rounded to bf16 (as add then rmsnorm_forward do), the CPU its
      // fp32 sum: rstd differs by the rounding of the sum, not by the norm's arithmetic,
      // which the equalities with the two GPU ops below pin down exactly.
      check("add_rmsnorm_forward " + tag + " rstd", rstd, kOut1);
      EXPECT_EQ(sum_out.got(), s2.got()) << tag << ": sum differs from add";
      EXPECT_EQ(out.got(), o2.got()) << tag << ": out differs from add then rmsnorm_forward";
      EXPECT_EQ(rstd.got(), r2.got()) << tag << ": rstd differs from rmsnorm_forward";
    }
  }
}

// The side queue: AdamW and the bf16 copy issued there, the main queue ordered after them
// by an event, reads the updated copy; the same bits as the same ops on the main queue.
// GEMMs are refused there (their workspace belongs to the main stream).
TEST(CudaOps, SideQueueOrderedByEvents) {
  REQUIRE_GPU();
  const int64_t n = int64_t{1} << 25;  // long enough that an unordered read would see NaNs
  AdamWHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.1f;
  std::vector<double> result[2];
  for (int side = 0; side < 2; ++side) {
    Buf p({n}, DType::kF32, randn(n, 81)), g({n}, DType::kF32, randn(n, 82));
    Buf m({n}, DType::kF32, randn(n, 83, 0.1f)), v({n}, DType::kF32, std::vector<float>(static_cast<size_t>(n), 0.5f));
    Buf copy({n}, DType::kBF16, nans(n)), back({n}, DType::kF32, nans(n));
    gpu().runtime().synchronize();
    if (side) gpu().runtime().set_queue(Runtime::Queue::kSide);
    gpu().adamw_step(p.g(), g.g(), m.g(), v.g(), h, 0.5f, Tensor(), false);
    gpu().runtime().convert(copy.g(), p.g());
    gpu().runtime().record(7);
    gpu().runtime().set_queue(Runtime::Queue::kMain);
    gpu().runtime().wait(7);
    gpu().runtime().convert(back.g(), copy.g());
    result[side] = back.got();
  }
  size_t bad = 0;
  for (size_t i = 0; i < result[0].size(); ++i) bad += !(result[0][i] == result[1][i]);
  std::printf("[err] %-58s mismatches %zu of %lld\n", "adamw + convert on the side queue", bad,
              static_cast<long long>(n));
  EXPECT_EQ(bad, 0u);
  Buf x({4, 8}, DType::kBF16, randn(32, 84)), w({8, 8}, DType::kBF16, randn(64, 85)), y({4, 8}, DType::kBF16, nans(32));
  gpu().runtime().set_queue(Runtime::Queue::kSide);
  EXPECT_THROW(gpu().linear_forward(y.g(), x.g(), w.g(), Tensor()), Error);
  gpu().runtime().set_queue(Runtime::Queue::kMain);
  gpu().runtime().synchronize();
}

// cos, sin (T, hd/2) of standard RoPE, theta 1e6.
void rope_tables(int64_t T, int64_t hd, std::vector<float>* cos, std::vector<float>* sin) {
  const int64_t half = hd / 2;
  cos->resize(static_cast<size_t>(T * half));
  sin->resize(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) * std::pow(1e6, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
      (*cos)[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(a));
      (*sin)[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(a));
    }
}

TEST(CudaOps, QkNormRope) {
  REQUIRE_GPU();
  struct Case { int64_t b, t; int h, kv; int64_t hd; bool norm; };
  for (const Case& cs : {Case{2, 37, 4, 2, 64, true}, Case{1, 130, 16, 8, 128, true}, Case{2, 9, 2, 1, 32, false},
                         Case{3, 5, 6, 2, 128, false}}) {
    const std::string tag = dims({cs.b, cs.t, cs.h, cs.kv, cs.hd}) + (cs.norm ? " qk-norm" : "");
    const int64_t heads = cs.h + 2 * cs.kv, rows = cs.b * cs.t, n = rows * heads * cs.hd;
    std::vector<float> cv, sv;
    rope_tables(cs.t, cs.hd, &cv, &sv);
    Buf cos({cs.t, cs.hd / 2}, DType::kF32, cv), sin({cs.t, cs.hd / 2}, DType::kF32, sv);
    Buf in({rows, heads, cs.hd}, DType::kBF16, randn(n, 21, 1.5f));
    std::vector<float> qw = randn(cs.hd, 22, 0.3f), kw = randn(cs.hd, 23, 0.3f);
    for (auto& v : qw) v = round_bf16(1.0f + v);
    for (auto& v : kw) v = round_bf16(1.0f + v);
    Buf q_w({cs.hd}, DType::kBF16, qw), k_w({cs.hd}, DType::kBF16, kw);
    Buf out({rows, heads, cs.hd}, DType::kBF16, nans(n));
    Buf rstd({rows, cs.h + cs.kv}, DType::kF32,
             cs.norm ? nans(rows * (cs.h + cs.kv)) : randn(rows * (cs.h + cs.kv), 24));
    Tensor none;
    cpu().qk_norm_rope_forward(out.c(), rstd.c(), in.c(), cs.norm ? q_w.c() : none, cs.norm ? k_w.c() : none,
                               cos.c(), sin.c(), cs.h, cs.kv, 1e-6f);
    gpu().qk_norm_rope_forward(out.g(), rstd.g(), in.g(), cs.norm ? q_w.g() : none, cs.norm ? k_w.g() : none,
                               cos.g(), sin.g(), cs.h, cs.kv, 1e-6f);
    check("qk_norm_rope_forward " + tag + " out", out, kOut1);
    if (cs.norm) check("qk_norm_rope_forward " + tag + " rstd", rstd, kExact32 * 10);
    Buf dout({rows, heads, cs.hd}, DType::kBF16, randn(n, 25));
    Buf din({rows, heads, cs.hd}, DType::kBF16, nans(n));
    Buf dq_w({cs.hd}, DType::kF32, randn(cs.hd, 26)), dk_w({cs.hd}, DType::kF32, randn(cs.hd, 27));
    cpu().qk_norm_rope_backward(din.c(), dq_w.c(), dk_w.c(), dout.c(), in.c(), cs.norm ? q_w.c() : none,
                                cs.norm ? k_w.c() : none, rstd.c(), cos.c(), sin.c(), cs.h, cs.kv);
    gpu().qk_norm_rope_backward(din.g(), dq_w.g(), dk_w.g(), dout.g(), in.g(), cs.norm ? q_w.g() : none,
                                cs.norm ? k_w.g() : none, rstd.g(), cos.g(), sin.g(), cs.h, cs.kv);
    check("qk_norm_rope_backward " + tag + " din", din, kOut1);
    check("qk_norm_rope_backward " + tag + " dq_w", dq_w, kF32);
    check("qk_norm_rope_backward " + tag + " dk_w", dk_w, kF32);
  }
}

// Parameter gradients with accumulate = false (a step's first write, parallel/param_store.h)
// into buffers of NaNs: the bits of accumulate = true into zeros, op by op, on both backends
// (the embedding's rows that no id names become zero).
TEST(CudaOps, GradientsOverwrite) {
  REQUIRE_GPU();
  const DType bf = DType::kBF16, f32 = DType::kF32;
  auto zeros = [](int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); };
  // Each pair: (into zeros, accumulating; into NaNs, overwriting).
  auto same = [](const std::string& what, Buf& added, Buf& written) {
    EXPECT_EQ(written.got(), added.got()) << what << " on the GPU";
    EXPECT_EQ(written.host(), added.host()) << what << " on the CPU";
  };
  Tensor none;
  const int64_t M = 70, K = 96, N = 40;
  Buf dy({M, N}, bf, randn(M * N, 91)), x({M, K}, bf, randn(M * K, 92));
  Buf dw0({N, K}, f32, zeros(N * K)), dw1({N, K}, f32, nans(N * K)), db0({N}, f32, zeros(N)), db1({N}, f32, nans(N));
  for (Ops* o : {&cpu(), &gpu()}) {
    const bool g = o == &gpu();
    o->linear_backward_weight(g ? dw0.g() : dw0.c(), g ? db0.g() : db0.c(), g ? dy.g() : dy.c(), g ? x.g() : x.c());
    o->linear_backward_weight(g ? dw1.g() : dw1.c(), g ? db1.g() : db1.c(), g ? dy.g() : dy.c(), g ? x.g() : x.c(),
                              false);
  }
  same("linear_backward_weight dw", dw0, dw1);
  same("linear_backward_weight dbias", db0, db1);

  Buf xn({M, K}, bf, randn(M * K, 93)), w({K}, bf, randn(K, 94, 0.2f)), rstd({M}, f32, std::vector<float>(M, 0.7f));
  Buf dx({M, K}, bf, nans(M * K)), nw0({K}, f32, zeros(K)), nw1({K}, f32, nans(K));
  for (Ops* o : {&cpu(), &gpu()}) {
    const bool g = o == &gpu();
    o->rmsnorm_backward(g ? dx.g() : dx.c(), g ? nw0.g() : nw0.c(), g ? xn.g() : xn.c(), g ? x.g() : x.c(),
                        g ? w.g() : w.c(), g ? rstd.g() : rstd.c(), false);
    o->rmsnorm_backward(g ? dx.g() : dx.c(), g ? nw1.g() : nw1.c(), g ? xn.g() : xn.c(), g ? x.g() : x.c(),
                        g ? w.g() : w.c(), g ? rstd.g() : rstd.c(), false, false);
  }
  same("rmsnorm_backward dw", nw0, nw1);

  const int64_t T = 9, B = 2, H = 4, KV = 2, hd = 64, rows = B * T, heads = H + 2 * KV, n = rows * heads * hd;
  std::vector<float> cv, sv;
  rope_tables(T, hd, &cv, &sv);
  Buf cos({T, hd / 2}, f32, cv), sin({T, hd / 2}, f32, sv), in({rows, heads, hd}, bf, randn(n, 95));
  Buf qw({hd}, bf, randn(hd, 96, 0.3f)), kw({hd}, bf, randn(hd, 97, 0.3f));
  Buf qr({rows, H + KV}, f32, std::vector<float>(static_cast<size_t>(rows * (H + KV)), 0.9f));
  Buf dq({rows, heads, hd}, bf, randn(n, 98)), din({rows, heads, hd}, bf, nans(n));
  Buf dq0({hd}, f32, zeros(hd)), dk0({hd}, f32, zeros(hd)), dq1({hd}, f32, nans(hd)), dk1({hd}, f32, nans(hd));
  for (Ops* o : {&cpu(), &gpu()}) {
    const bool g = o == &gpu();
    auto t = [g](Buf& b) { return g ? b.g() : b.c(); };
    o->qk_norm_rope_backward(t(din), t(dq0), t(dk0), t(dq), t(in), t(qw), t(kw), t(qr), t(cos), t(sin), H, KV);
    o->qk_norm_rope_backward(t(din), t(dq1), t(dk1), t(dq), t(in), t(qw), t(kw), t(qr), t(cos), t(sin), H, KV, false);
  }
  same("qk_norm_rope_backward dq_w", dq0, dq1);
  same("qk_norm_rope_backward dk_w", dk0, dk1);
  // Written in bf16 (Bf16Gradients below): the written fp32 sums rounded once, bit for bit;
  // against the CPU's at one rounding.
  Buf dqw({hd}, bf, nans(hd)), dkw({hd}, bf, nans(hd));
  dqw.host() = dq1.host();  // the CPU's written values, for check()
  dkw.host() = dk1.host();
  gpu().qk_norm_rope_backward(din.g(), dqw.g(), dkw.g(), dq.g(), in.g(), qw.g(), kw.g(), qr.g(), cos.g(), sin.g(), H,
                              KV, false);
  check("qk_norm_rope_backward bf16 dq_w", dqw, kOut1);
  check("qk_norm_rope_backward bf16 dk_w", dkw, kOut1);
  EXPECT_EQ(dqw.got(), rounded_bf16(dq1)) << "dq_w: the fp32 sums rounded once";
  EXPECT_EQ(dkw.got(), rounded_bf16(dk1)) << "dk_w: the fp32 sums rounded once";

  const int64_t V = 50, C = 32, R = 20;
  std::vector<int32_t> idv(R);
  // repeats; rows >= 13 unnamed
  for (int64_t i = 0; i < R; ++i) idv[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 13);
  Ids ids(idv);
  Buf dout({R, C}, bf, randn(R * C, 99)), dt0({V, C}, f32, zeros(V * C)), dt1({V, C}, f32, nans(V * C));
  for (Ops* o : {&cpu(), &gpu()}) {
    const bool g = o == &gpu();
    o->embedding_backward(g ? dt0.g() : dt0.c(), g ? ids.g() : ids.c(), g ? dout.g() : dout.c());
    o->embedding_backward(g ? dt1.g() : dt1.c(), g ? ids.g() : ids.c(), g ? dout.g() : dout.c(), false);
  }
  same("embedding_backward dtable", dt0, dt1);

  const int64_t CN = 33, CV = 1000, CC = 64;
  std::vector<int32_t> tv(CN);
  for (int64_t i = 0; i < CN; ++i) tv[static_cast<size_t>(i)] = i % 5 == 0 ? -100 : static_cast<int32_t>((i * 37) % CV);
  Ids targets(tv);
  Buf h({CN, CC}, bf, randn(CN * CC, 100)), wv({CV, CC}, bf, randn(CV * CC, 101, 0.25f));
  Buf loss({1}, f32, {0.0f}), dh({CN, CC}, bf, nans(CN * CC));
  Buf cw0({CV, CC}, f32, zeros(CV * CC)), cw1({CV, CC}, f32, nans(CV * CC));
  for (Ops* o : {&cpu(), &gpu()}) {
    const bool g = o == &gpu();
    auto t = [g](Buf& b) { return g ? b.g() : b.c(); };
    o->cross_entropy_forward_backward(t(loss), t(dh), t(cw0), t(h), t(wv), g ? targets.g() : targets.c(), 0.1f, none);
    o->cross_entropy_forward_backward(t(loss), t(dh), t(cw1), t(h), t(wv), g ? targets.g() : targets.c(), 0.1f, none,
                                      false);
  }
  same("cross_entropy dw", cw0, cw1);
}

// Parameter gradients written in bf16 (ops.h; one process, one micro-batch): against the CPU
// at one rounding, and the norms' and the bias's (a fixed-order fp32 sum, then rounded) equal
// to the GPU's fp32 result rounded once, bit for bit (qk-norm's: GradientsOverwrite, above).
// Accumulating into bf16 is refused.
TEST(CudaOps, Bf16Gradients) {
  REQUIRE_GPU();
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const int64_t M = 70, K = 96, N = 40;
  Buf dy({M, N}, bf, randn(M * N, 91)), x({M, K}, bf, randn(M * K, 92));
  Buf dw({N, K}, bf, nans(N * K)), db({N}, bf, nans(N)), dwf({N, K}, f32, nans(N * K)), dbf({N}, f32, nans(N));
  cpu().linear_backward_weight(dw.c(), db.c(), dy.c(), x.c(), false);
  gpu().linear_backward_weight(dw.g(), db.g(), dy.g(), x.g(), false);
  gpu().linear_backward_weight(dwf.g(), dbf.g(), dy.g(), x.g(), false);
  check("linear_backward_weight bf16 dw", dw, kOut1);
  check("linear_backward_weight bf16 dbias", db, kOut1);
  EXPECT_EQ(db.got(), rounded_bf16(dbf)) << "dbias: the fp32 column sums rounded once";
  EXPECT_THROW(gpu().linear_backward_weight(dw.g(), Tensor(), dy.g(), x.g(), true), Error) << "bf16 +=";

  Buf xn({M, K}, bf, randn(M * K, 93)), w({K}, bf, randn(K, 94, 0.2f)), rstd({M}, f32, std::vector<float>(M, 0.7f));
  Buf dx({M, K}, bf, nans(M * K)), nw({K}, bf, nans(K)), nwf({K}, f32, nans(K));
  cpu().rmsnorm_backward(dx.c(), nw.c(), xn.c(), x.c(), w.c(), rstd.c(), false, false);
  gpu().rmsnorm_backward(dx.g(), nw.g(), xn.g(), x.g(), w.g(), rstd.g(), false, false);
  gpu().rmsnorm_backward(dx.g(), nwf.g(), xn.g(), x.g(), w.g(), rstd.g(), false, false);
  check("rmsnorm_backward bf16 dw", nw, kOut1);
  EXPECT_EQ(nw.got(), rounded_bf16(nwf)) << "rmsnorm dw: the fp32 sums rounded once";
  EXPECT_THROW(gpu().rmsnorm_backward(dx.g(), nw.g(), xn.g(), x.g(), w.g(), rstd.g(), false, true), Error);
}

TEST(CudaOps, SwiGLU) {
  REQUIRE_GPU();
  struct Case { int64_t n, inter; };
  for (const Case& cs : {Case{5, 24}, Case{33, 100}, Case{64, 1024}, Case{3, 7}}) {
    const std::string tag = dims({cs.n, cs.inter});
    Buf gu({cs.n, 2 * cs.inter}, DType::kBF16, randn(cs.n * 2 * cs.inter, 41, 2.0f));
    Buf out({cs.n, cs.inter}, DType::kBF16, nans(cs.n * cs.inter));
    cpu().swiglu_forward(out.c(), gu.c());
    gpu().swiglu_forward(out.g(), gu.g());
    check("swiglu_forward " + tag + " out", out, kOut1);
    Buf dout({cs.n, cs.inter}, DType::kBF16, randn(cs.n * cs.inter, 42));
    Buf dgu({cs.n, 2 * cs.inter}, DType::kBF16, nans(cs.n * 2 * cs.inter));
    cpu().swiglu_backward(dgu.c(), dout.c(), gu.c());
    gpu().swiglu_backward(dgu.g(), dout.g(), gu.g());
    check("swiglu_backward " + tag + " dgate_up", dgu, kOut1);
    // The forward's output made by the backward's pass: the same bits, the same gradient.
    Buf act({cs.n, cs.inter}, DType::kBF16, nans(cs.n * cs.inter));
    Buf dgu2({cs.n, 2 * cs.inter}, DType::kBF16, nans(cs.n * 2 * cs.inter));
    gpu().swiglu_backward(dgu2.g(), dout.g(), gu.g(), act.g());
    EXPECT_EQ(act.got(), out.got()) << tag << ": the backward's act differs from swiglu_forward";
    EXPECT_EQ(dgu2.got(), dgu.got()) << tag;
  }
}

TEST(CudaOps, AddAndConvert) {
  REQUIRE_GPU();
  for (int64_t n : {13, 4096, 100003}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const std::string tag = std::to_string(n) + " " + dtype_name(dt);
      Buf a({n}, dt, randn(n, 51)), b({n}, dt, randn(n, 52)), out({n}, dt, nans(n));
      cpu().add(out.c(), a.c(), b.c());
      gpu().add(out.g(), a.g(), b.g());
      check("add " + tag + " out", out, dt == DType::kBF16 ? kOut1 : kExact32);
      cpu().add(a.c(), a.c(), b.c());  // in place
      gpu().add(a.g(), a.g(), b.g());
      check("add " + tag + " in place", a, dt == DType::kBF16 ? kOut1 : kExact32);
    }
    // F32 -> BF16 rounds to nearest even exactly as the host rounding; back is exact.
    std::mt19937 gen(static_cast<uint32_t>(n));
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<float> f(static_cast<size_t>(n)), r(static_cast<size_t>(n));
    for (size_t i = 0; i < f.size(); ++i) {
      f[i] = dist(gen);
      r[i] = round_bf16(f[i]);
    }
    Buf src({n}, DType::kF32, f), dst({n}, DType::kBF16, nans(n)), back({n}, DType::kF32, nans(n));
    gpu().runtime().convert(dst.g(), src.g());
    gpu().runtime().convert(back.g(), dst.g());
    const std::vector<double> got = back.got();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != static_cast<double>(r[i]);
    std::printf("[err] %-58s mismatches %zu of %lld\n", ("convert F32->BF16->F32 " + std::to_string(n)).c_str(), bad,
                static_cast<long long>(n));
    EXPECT_EQ(bad, 0u);
  }
}

TEST(CudaOps, CrossEntropy) {
  REQUIRE_GPU();
  struct Case { int64_t n, vocab, cols; bool logits; };
  // At V = 151936 (ops/cross_entropy_chunks.h) the last case has two blocks of rows (1152
  // and 48), the first of four chunks of fp32 logits (288 rows each); 5003 and 17 take the
  // one-float-at-a-time softmax.
  for (const Case& cs : {Case{33, 1000, 64, true}, Case{70, 5003, 128, false}, Case{1, 17, 8, true},
                         Case{1200, 151936, 64, false}}) {
    const std::string tag = dims({cs.n, cs.vocab, cs.cols});
    std::mt19937 gen(static_cast<uint32_t>(cs.n + cs.vocab));
    std::vector<int32_t> tg(static_cast<size_t>(cs.n));
    int64_t valid = 0;
    for (auto& v : tg) {
      v = gen() % 5 == 0 ? -100 : static_cast<int32_t>(gen() % static_cast<uint32_t>(cs.vocab));
      valid += v >= 0;
    }
    Ids targets(tg);
    Buf h({cs.n, cs.cols}, DType::kBF16, randn(cs.n * cs.cols, 61));
    Buf w({cs.vocab, cs.cols}, DType::kBF16,
          randn(cs.vocab * cs.cols, 62, 2.0f / std::sqrt(static_cast<float>(cs.cols))));
    Buf loss({1}, DType::kF32, {0.5f});
    Buf dh({cs.n, cs.cols}, DType::kBF16, nans(cs.n * cs.cols));
    Buf dw({cs.vocab, cs.cols}, DType::kF32, randn(cs.vocab * cs.cols, 63, 1e-3f));
    Buf logits({cs.n, cs.vocab}, DType::kF32, nans(cs.n * cs.vocab));
    const float scale = 1.0f / static_cast<float>(std::max<int64_t>(valid, 1));
    Tensor none;
    cpu().cross_entropy_forward_backward(loss.c(), dh.c(), dw.c(), h.c(), w.c(), targets.c(), scale,
                                         cs.logits ? logits.c() : none);
    gpu().cross_entropy_forward_backward(loss.g(), dh.g(), dw.g(), h.g(), w.g(), targets.g(), scale,
                                         cs.logits ? logits.g() : none);
    check("cross_entropy " + tag + " loss_sum", loss, kF32);
    // The loss alone (no dh, no dw: evaluation) is the same sum, bit for bit.
    Buf loss_only({1}, DType::kF32, {0.5f});
    gpu().cross_entropy_forward_backward(loss_only.g(), none, none, h.g(), w.g(), targets.g(), scale, none);
    EXPECT_EQ(loss_only.got(), loss.got()) << "cross_entropy " << tag << " without gradients";
    check("cross_entropy " + tag + " dh", dh, kChain);
    check("cross_entropy " + tag + " dw", dw, kChain);
    if (cs.logits) check("cross_entropy " + tag + " logits", logits, kF32);
  }
}

TEST(CudaOps, AdamW) {
  REQUIRE_GPU();
  for (int64_t n : {1000, 12345}) {
    for (int64_t step : {1, 7}) {
      const std::string tag = std::to_string(n) + " step " + std::to_string(step);
      std::vector<float> vv = randn(n, 73, 0.01f);
      for (auto& x : vv) x = x * x;
      Buf param({n}, DType::kF32, randn(n, 71)), grad({n}, DType::kF32, randn(n, 72, 0.1f));
      Buf m({n}, DType::kF32, randn(n, 74, 0.01f)), v({n}, DType::kF32, vv);
      AdamWHyper hp;
      hp.lr = 3e-4f;
      hp.weight_decay = 0.1f;
      hp.step = step;
      cpu().adamw_step(param.c(), grad.c(), m.c(), v.c(), hp, 0.5f, Tensor(), false);
      gpu().adamw_step(param.g(), grad.g(), m.g(), v.g(), hp, 0.5f, Tensor(), false);
      check("adamw_step " + tag + " param", param, kExact32);
      check("adamw_step " + tag + " m", m, kExact32);
      check("adamw_step " + tag + " v", v, kExact32);
      // The same step with the bf16 copy and the gradient's zeroing in the pass: the same
      // param, m, v bits, the copy bit for bit convert()'s, the gradient zero.
      Buf p2({n}, DType::kF32, randn(n, 71)), g2({n}, DType::kF32, randn(n, 72, 0.1f));
      Buf m2({n}, DType::kF32, randn(n, 74, 0.01f)), v2({n}, DType::kF32, vv), copy({n}, DType::kBF16, nans(n));
      Buf conv({n}, DType::kBF16, nans(n));
      gpu().adamw_step(p2.g(), g2.g(), m2.g(), v2.g(), hp, 0.5f, copy.g(), true);
      gpu().runtime().convert(conv.g(), p2.g());
      EXPECT_EQ(p2.got(), param.got()) << tag;
      EXPECT_EQ(m2.got(), m.got()) << tag;
      EXPECT_EQ(v2.got(), v.got()) << tag;
      EXPECT_EQ(copy.got(), conv.got()) << tag << ": the copy differs from convert";
      EXPECT_EQ(g2.got(), std::vector<double>(static_cast<size_t>(n), 0.0)) << tag << ": the gradient is not zero";
      // Views one element into their buffers (not 16-byte aligned: one element at a time
      // instead of four): the same bits as the aligned run.
      auto shifted = [&](const std::vector<float>& v) {
        std::vector<float> out(1, 7.0f);
        out.insert(out.end(), v.begin(), v.end());
        return out;
      };
      Buf p3({n + 1}, DType::kF32, shifted(randn(n, 71))), g3({n + 1}, DType::kF32, shifted(randn(n, 72, 0.1f)));
      Buf m3({n + 1}, DType::kF32, shifted(randn(n, 74, 0.01f))), v3({n + 1}, DType::kF32, shifted(vv));
      Buf copy3({n + 1}, DType::kBF16, nans(n + 1));
      auto view = [&](Buf& b) { return b.g().slice_rows(1, n + 1); };
      gpu().adamw_step(view(p3), view(g3), view(m3), view(v3), hp, 0.5f, view(copy3), true);
      auto tail = [](std::vector<double> v) { return std::vector<double>(v.begin() + 1, v.end()); };
      EXPECT_EQ(tail(p3.got()), param.got()) << tag << " unaligned";
      EXPECT_EQ(tail(m3.got()), m.got()) << tag << " unaligned";
      EXPECT_EQ(tail(v3.got()), v.got()) << tag << " unaligned";
      EXPECT_EQ(tail(copy3.got()), conv.got()) << tag << " unaligned copy";
      EXPECT_EQ(p3.got()[0], 7.0) << tag << ": the element before the view was written";
      // A bf16 gradient of the same values (randn's are bf16 already), aligned (four elements
      // at a time) and one element in (one at a time): the fp32 gradient's bits.
      Buf p4({n}, DType::kF32, randn(n, 71)), g4({n}, DType::kBF16, randn(n, 72, 0.1f));
      Buf m4({n}, DType::kF32, randn(n, 74, 0.01f)), v4({n}, DType::kF32, vv), copy4({n}, DType::kBF16, nans(n));
      gpu().adamw_step(p4.g(), g4.g(), m4.g(), v4.g(), hp, 0.5f, copy4.g(), false);
      EXPECT_EQ(p4.got(), param.got()) << tag << " bf16 gradient";
      EXPECT_EQ(m4.got(), m.got()) << tag << " bf16 gradient";
      EXPECT_EQ(v4.got(), v.got()) << tag << " bf16 gradient";
      EXPECT_EQ(copy4.got(), conv.got()) << tag << " bf16 gradient";
      Buf p5({n + 1}, DType::kF32, shifted(randn(n, 71))), g5({n + 1}, DType::kBF16, shifted(randn(n, 72, 0.1f)));
      Buf m5({n + 1}, DType::kF32, shifted(randn(n, 74, 0.01f))), v5({n + 1}, DType::kF32, shifted(vv));
      gpu().adamw_step(view(p5), view(g5), view(m5), view(v5), hp, 0.5f, Tensor(), false);
      EXPECT_EQ(tail(p5.got()), param.got()) << tag << " bf16 gradient, unaligned";
      EXPECT_EQ(tail(m5.got()), m.got()) << tag << " bf16 gradient, unaligned";
      EXPECT_EQ(tail(v5.got()), v.got()) << tag << " bf16 gradient, unaligned";
      EXPECT_THROW(gpu().adamw_step(p4.g(), g4.g(), m4.g(), v4.g(), hp, 0.5f, Tensor(), true), Error)
          << "a bf16 gradient zeroed in the update";
      // Split masters (core/bf16.h) of the same params, aligned (four at a time) and one
      // element in, with the fp32 and the bf16 gradient: the fp32 run's values bit for bit.
      const std::vector<float> p0 = randn(n, 71), want = [&] {
        std::vector<double> w = param.got();
        return std::vector<float>(w.begin(), w.end());
      }();
      for (int64_t first : {0, 1})
        for (Buf* grad_in : {&grad, &g4}) {
          const std::string what = tag + (first ? " split, unaligned" : " split") +
                                   (grad_in == &g4 ? ", bf16 gradient" : ", fp32 gradient");
          std::vector<uint16_t> hb(static_cast<size_t>(n + 1));
          std::vector<int16_t> lb(static_cast<size_t>(n + 1));
          for (size_t i = 0; i < p0.size(); ++i) {
            const size_t k = i + static_cast<size_t>(first);
            split_master(p0[i], &hb[k], &lb[k]);
          }
          void* dev = gpu().runtime().alloc(4 * static_cast<size_t>(n + 1));
          Tensor h_all(dev, DType::kBF16, {n + 1}, Device::kCUDA);
          Tensor l_all(static_cast<char*>(dev) + 2 * (n + 1), DType::kI16, {n + 1}, Device::kCUDA);
          gpu().runtime().upload(h_all, hb.data());
          gpu().runtime().upload(l_all, lb.data());
          Buf m6({n}, DType::kF32, randn(n, 74, 0.01f)), v6({n}, DType::kF32, vv);
          gpu().adamw_step_split(h_all.slice_rows(first, first + n), l_all.slice_rows(first, first + n), grad_in->g(),
                                 m6.g(), v6.g(), hp, 0.5f);
          gpu().runtime().download(hb.data(), h_all);
          gpu().runtime().download(lb.data(), l_all);
          gpu().runtime().release(dev);
          for (int64_t i = 0; i < n; ++i) {
            const size_t k = static_cast<size_t>(i + first);
            const float got = join_master(hb[k], lb[k]), w = want[static_cast<size_t>(i)];
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(w)) << what << ", element " << i;
            uint16_t whi = 0;
            int16_t wlo = 0;
            split_master(w, &whi, &wlo);
            ASSERT_EQ(hb[k], whi) << what << ": the high half, element " << i;
          }
          EXPECT_EQ(m6.got(), m.got()) << what;
          EXPECT_EQ(v6.got(), v.got()) << what;
        }
    }
  }
}

TEST(CudaOps, SumSquares) {
  REQUIRE_GPU();
  // The last two sizes run the kernel's four-vectors-per-thread loop and its remainders.
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}, int64_t{(1 << 23) + 5}, int64_t{11 << 20}}) {
    Buf x({n}, DType::kF32, randn(n, 81)), out({1}, DType::kF32, {2.0f});
    cpu().sum_squares(out.c(), x.c());
    gpu().sum_squares(out.g(), x.g());
    check("sum_squares " + std::to_string(n), out, kF32 / 10);
    // A view one element in (not 16-byte aligned): the scalar loop, the same sum.
    Buf y({n + 1}, DType::kF32, [&] {
      std::vector<float> v = randn(n, 81);
      v.insert(v.begin(), 1e3f);
      return v;
    }());
    Buf out2({1}, DType::kF32, {2.0f});
    cpu().sum_squares(out2.c(), x.c());
    gpu().sum_squares(out2.g(), y.g().slice_rows(1, n + 1));
    check("sum_squares unaligned " + std::to_string(n), out2, kF32 / 10);
    // The same values as bf16 (eight per vector), aligned and one element in.
    Buf xa({n}, DType::kBF16, randn(n, 81)), xb({n + 1}, DType::kBF16, y.host());
    Buf out3({1}, DType::kF32, {2.0f}), out4({1}, DType::kF32, {2.0f});
    cpu().sum_squares(out3.c(), x.c());
    cpu().sum_squares(out4.c(), x.c());
    gpu().sum_squares(out3.g(), xa.g());
    gpu().sum_squares(out4.g(), xb.g().slice_rows(1, n + 1));
    check("sum_squares bf16 " + std::to_string(n), out3, kF32 / 10);
    check("sum_squares bf16 unaligned " + std::to_string(n), out4, kF32 / 10);
  }
}

// The ops that reduce (dw sums, embedding scatter, attention backward, cross-entropy) give
// identical bits when run twice on the same inputs.
TEST(CudaOps, Deterministic) {
  REQUIRE_GPU();
  const int64_t B = 1, T = 257, H = 4, KV = 2, hd = 128, heads = H + 2 * KV, C = 256, V = 3001;
  Buf qkv({B, T, heads, hd}, DType::kBF16, randn(B * T * heads * hd, 91));
  Buf out({B, T, H, hd}, DType::kBF16, nans(B * T * H * hd)), lse({B, H, T}, DType::kF32, nans(B * H * T));
  gpu().attention_forward(out.g(), lse.g(), qkv.g(), H, KV);
  Buf dout({B, T, H, hd}, DType::kBF16, randn(B * T * H * hd, 92));
  Buf d1({B, T, heads, hd}, DType::kBF16, nans(B * T * heads * hd));
  Buf d2({B, T, heads, hd}, DType::kBF16, nans(B * T * heads * hd));
  gpu().attention_backward(d1.g(), dout.g(), qkv.g(), out.g(), lse.g(), H, KV);
  gpu().attention_backward(d2.g(), dout.g(), qkv.g(), out.g(), lse.g(), H, KV);
  EXPECT_EQ(d1.got(), d2.got()) << "attention_backward";

  std::vector<int32_t> tg(static_cast<size_t>(T));
  for (size_t i = 0; i < tg.size(); ++i) tg[i] = static_cast<int32_t>((i * 7919) % 50);  // many repeats
  Ids ids(tg);
  Buf x({T, C}, DType::kBF16, randn(T * C, 93)), w({V, C}, DType::kBF16, randn(V * C, 94, 0.1f));
  std::vector<double> first[3];
  for (int run = 0; run < 2; ++run) {
    Buf dtab({V, C}, DType::kF32, std::vector<float>(static_cast<size_t>(V * C), 0.0f));
    gpu().embedding_backward(dtab.g(), ids.g(), x.g());
    Buf loss({1}, DType::kF32, {0.0f}), dh({T, C}, DType::kBF16, nans(T * C));
    gpu().cross_entropy_forward_backward(loss.g(), dh.g(), dtab.g(), x.g(), w.g(), ids.g(), 1.0f / T, Tensor());
    Buf nw({C}, DType::kF32, std::vector<float>(static_cast<size_t>(C), 0.0f)), rs({T}, DType::kF32, nans(T));
    Buf nwt({C}, DType::kBF16, std::vector<float>(static_cast<size_t>(C), 1.0f));
    Buf nout({T, C}, DType::kBF16, nans(T * C));
    gpu().rmsnorm_forward(nout.g(), rs.g(), x.g(), nwt.g(), 1e-6f);
    gpu().rmsnorm_backward(nout.g(), nw.g(), x.g(), x.g(), nwt.g(), rs.g(), false);
    if (run == 0) {
      first[0] = dtab.got();
      first[1] = loss.got();
      first[2] = nw.got();
    } else {
      EXPECT_EQ(first[0], dtab.got()) << "embedding_backward + cross_entropy dw";
      EXPECT_EQ(first[1], loss.got()) << "cross_entropy loss";
      EXPECT_EQ(first[2], nw.got()) << "rmsnorm_backward dw";
    }
  }
}

}  // namespace
}  // namespace anvil
