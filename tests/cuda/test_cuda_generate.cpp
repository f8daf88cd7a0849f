// anvil generate on the GPU (bf16 weights, the decode-attention kernel, CUDA graphs)
// against the fp32 CPU reference:
//  - attention_cached against the CPU op on random rows: packed prefill rows of two slots
//    (several 64-position chunks, GQA groups of 2 and 4, head_dim 64 and 128), then decode rows;
//  - the decoder's logits, prefill and cached decode steps, against the CPU's;
//  - greedy continuations against the CPU's (and so the transformers goldens) on the tiny
//    fixtures, token for token wherever the reference's top-2 margin exceeds bf16 noise,
//    with CUDA graphs and without (the same kernels: the same tokens).
// A build without a usable GPU skips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/json.h"
#include "infer/decoder.h"
#include "model/weights.h"
#include "ops/ops.h"
#include "infer/generate.h"
#include "../testing.h"
#include "require_gpu.h"

namespace anvil {
namespace {

// bf16 logits of the tiny models carry errors of a few 1e-3 (weights, activations and the
// cache rounded to bf16); a top-2 margin above this is decided the same way on both sides.
constexpr double kBf16Margin = 0.05;

std::vector<float> randn_bf16(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16(dist(gen));
  return v;
}

// A tensor on both backends from the same bf16-exact values.
struct Pair {
  Ops &cpu, &gpu;
  Shape shape;
  DType dtype;
  std::vector<float> host;
  void* dev = nullptr;
  Pair(Ops& c, Ops& g, Shape s, DType d, std::vector<float> v)
      : cpu(c), gpu(g), shape(s), dtype(d), host(std::move(v)) {
    dev = gpu.runtime().alloc(tg().bytes());
    if (dtype == DType::kBF16) {
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) bits[i] = f32_to_bf16_bits(host[i]);
      gpu.runtime().upload(tg(), bits.data());
    } else {
      gpu.runtime().upload(tg(), host.data());  // I32 values travel as their bits
    }
  }
  ~Pair() { gpu.runtime().release(dev); }
  Tensor tc() { return Tensor(host.data(), dtype == DType::kI32 ? DType::kI32 : DType::kF32, shape, Device::kCPU); }
  Tensor tg() { return Tensor(dev, dtype, shape, Device::kCUDA); }
  std::vector<float> got() {
    std::vector<uint16_t> bits(host.size());
    gpu.runtime().download(bits.data(), tg());
    std::vector<float> out(host.size());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_bits_to_f32(bits[i]);
    return out;
  }
};

std::vector<float> int_bits(const std::vector<int32_t>& v) {
  std::vector<float> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct AttnCase {
  int H, KV, hd;
};

TEST(CudaGenerate, AttentionCachedMatchesCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = make_cuda_ops(0);
  for (const AttnCase& c : {AttnCase{16, 8, 128}, AttnCase{8, 2, 64}, AttnCase{4, 2, 32}}) {
    const int64_t S = 2, P = 300, heads = c.H + 2 * c.KV;
    Pair kc(*cpu, *gpu, {S, c.KV, P, c.hd}, DType::kBF16, std::vector<float>(static_cast<size_t>(S * c.KV * P * c.hd)));
    Pair vc(*cpu, *gpu, {S, c.KV, P, c.hd}, DType::kBF16, std::vector<float>(static_cast<size_t>(S * c.KV * P * c.hd)));
    // Prefill: 200 rows of slot 1 and 130 of slot 0, interleaved in blocks; then decode rows.
    std::vector<int32_t> slots, pos;
    for (int32_t t = 0; t < 200; ++t) {
      slots.push_back(1);
      pos.push_back(t);
      if (t < 130) {
        slots.push_back(0);
        pos.push_back(t);
      }
    }
    for (int step = 0; step < 2; ++step) {
      const int64_t R = static_cast<int64_t>(slots.size());
      Pair qkv(*cpu, *gpu, {R, heads, c.hd}, DType::kBF16, randn_bf16(R * heads * c.hd, 7 + step));
      Pair sl(*cpu, *gpu, {R}, DType::kI32, int_bits(slots));
      Pair po(*cpu, *gpu, {R}, DType::kI32, int_bits(pos));
      Pair out(*cpu, *gpu, {R, c.H, c.hd}, DType::kBF16, std::vector<float>(static_cast<size_t>(R * c.H * c.hd), NAN));
      cpu->attention_cached(out.tc(), qkv.tc(), kc.tc(), vc.tc(), sl.tc(), po.tc(), c.H, c.KV);
      gpu->attention_cached(out.tg(), qkv.tg(), kc.tg(), vc.tg(), sl.tg(), po.tg(), c.H, c.KV);
      const double err = rel_l2(out.got(), out.host);
      std::printf("[err] attention_cached H=%d KV=%d hd=%d rows=%lld: rel_l2 %.3g\n", c.H, c.KV, c.hd,
                  static_cast<long long>(R), err);
      EXPECT_LT(err, 1.2e-2);
      slots = {0, 1};  // decode: one row per slot, at the next position
      pos = {130, 200};
    }
  }
}

// Linear layers of a decode step's few rows (the GEMV kernel), bf16 and F32 outputs, with
// and without a bias, K past one unrolled pass and a ragged tail.
TEST(CudaGenerate, FewRowLinearMatchesCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = make_cuda_ops(0);
  for (int64_t M : {1, 2, 3, 8})
    for (int64_t K : {64, 1096, 2048})
      for (int variant = 0; variant < 3; ++variant) {  // bf16 out, bf16 out + bias, F32 out
        const int64_t N = 999;
        Pair x(*cpu, *gpu, {M, K}, DType::kBF16, randn_bf16(M * K, 1));
        Pair w(*cpu, *gpu, {N, K}, DType::kBF16, randn_bf16(N * K, 2));
        Pair b(*cpu, *gpu, {N}, DType::kBF16, randn_bf16(N, 3));
        const DType yd = variant == 2 ? DType::kF32 : DType::kBF16;
        Pair y(*cpu, *gpu, {M, N}, yd, std::vector<float>(static_cast<size_t>(M * N), NAN));
        const Tensor bc = variant == 1 ? b.tc() : Tensor(), bg = variant == 1 ? b.tg() : Tensor();
        cpu->linear_forward(y.tc(), x.tc(), w.tc(), bc);
        gpu->linear_forward(y.tg(), x.tg(), w.tg(), bg);
        std::vector<float> got(y.host.size());
        if (yd == DType::kF32) gpu->runtime().download(got.data(), y.tg());
        else got = y.got();
        const double err = rel_l2(got, y.host);
        std::printf("[err] linear M=%lld K=%lld variant %d: rel_l2 %.3g\n", static_cast<long long>(M),
                    static_cast<long long>(K), variant, err);
        EXPECT_LT(err, yd == DType::kF32 ? 1e-4 : 4e-3) << "M=" << M << " K=" << K << " variant " << variant;
      }
}

TEST(CudaGenerate, AddRmsnormMatchesCpu) {
  REQUIRE_GPU();
  auto cpu = make_cpu_ops();
  auto gpu = make_cuda_ops(0);
  for (int64_t C : {64, 2048, 1000}) {
    const int64_t R = 5;
    Pair x(*cpu, *gpu, {R, C}, DType::kBF16, randn_bf16(R * C, 4));
    Pair a(*cpu, *gpu, {R, C}, DType::kBF16, randn_bf16(R * C, 5));
    Pair w(*cpu, *gpu, {C}, DType::kBF16, randn_bf16(C, 6));
    Pair out(*cpu, *gpu, {R, C}, DType::kBF16, std::vector<float>(static_cast<size_t>(R * C), NAN));
    Pair rstd(*cpu, *gpu, {R}, DType::kF32, std::vector<float>(static_cast<size_t>(R), NAN));
    cpu->add_rmsnorm_forward(x.tc(), out.tc(), rstd.tc(), x.tc(), a.tc(), w.tc(), 1e-6f);
    gpu->add_rmsnorm_forward(x.tg(), out.tg(), rstd.tg(), x.tg(), a.tg(), w.tg(), 1e-6f);
    const double ex = rel_l2(x.got(), x.host), eo = rel_l2(out.got(), out.host);
    std::printf("[err] add_rmsnorm C=%lld: x rel_l2 %.3g, out rel_l2 %.3g\n", static_cast<long long>(C), ex, eo);
    EXPECT_LT(ex, 4e-3);
    EXPECT_LT(eo, 1.2e-2);
  }
}

TEST(CudaGenerate, DecoderLogitsMatchCpu) {
  REQUIRE_GPU();
  for (const std::string& name : testing::golden_models()) {
    const std::string dir = testing::fixture_dir(name);
    const ModelConfig cfg = load_config(dir);
    const ParamTable table(cfg, 1);
    HostUnits host = make_host_units(table);
    load_hf_weights(dir, table, host);
    for (auto& u : host)
      for (float& x : u) x = round_bf16(x);  // the same weights on both sides
    auto cpu = make_cpu_ops();
    auto gpu = make_cuda_ops(0);
    ResidentWeights wc(table, *cpu, host), wg(table, *gpu, host);
    Decoder dc(cfg, table, *cpu, wc), dg(cfg, table, *gpu, wg);
    dc.reserve_cache(2, 120);
    dg.reserve_cache(2, 120);
    DecodeRows rows;
    std::mt19937 gen(3);
    for (int32_t s = 0; s < 2; ++s) {
      for (int32_t t = 0; t < 40 + 30 * s; ++t) rows.add(static_cast<int32_t>(gen() % cfg.vocab_size), s, t);
      rows.outputs.push_back(static_cast<int32_t>(rows.ids.size() - 1));
    }
    std::vector<int32_t> len = {40, 70};
    std::vector<float> lc, lg;
    for (int step = 0; step < 6; ++step) {
      dc.forward(rows, lc);
      dg.forward(rows, lg);
      const double err = rel_l2(lg, lc);
      std::printf("[err] %s decoder logits, step %d: rel_l2 %.3g\n", name.c_str(), step, err);
      EXPECT_LT(err, 2e-2) << name << " step " << step;
      rows.clear();
      for (int32_t s = 0; s < 2; ++s) {
        rows.add(static_cast<int32_t>(gen() % cfg.vocab_size), s, len[static_cast<size_t>(s)]++);
        rows.outputs.push_back(s);
      }
    }
  }
}

TEST(CudaGenerate, GreedyMatchesCpu) {
  REQUIRE_GPU();
  int64_t compared = 0, total = 0;
  for (const std::string& name : testing::golden_models()) {
    const Json j = json_read_file(testing::testdata_dir() + "/generate-" + name + ".json");
    std::vector<std::vector<int32_t>> prompts;
    for (const Json& c : j["cases"]) prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
    SamplingOptions s;
    s.max_new_tokens = j["max_new_tokens"].get<int64_t>();
    Generator cpu(testing::fixture_dir(name), "cpu"), gpu(testing::fixture_dir(name), "cuda");
    const auto want = cpu.generate(prompts, s, 3);
    const auto got = gpu.generate(prompts, s, 3);
    gpu.set_cuda_graphs(false);
    EXPECT_EQ(gpu.generate(prompts, s, 3), got) << name << ": CUDA graphs change the tokens";
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto margins = j["cases"][i]["margins"].get<std::vector<double>>();
      for (size_t t = 0; t < want[i].size() && t < margins.size() && margins[t] > kBf16Margin; ++t) {
        ASSERT_LT(t, got[i].size()) << name << " prompt " << i;
        EXPECT_EQ(got[i][t], want[i][t]) << name << " prompt " << i << " token " << t;
        if (got[i][t] != want[i][t]) break;
        ++compared;
      }
      total += static_cast<int64_t>(want[i].size());
    }
  }
  std::printf("GPU greedy = CPU greedy on %lld of %lld tokens (compared where the margin > %g)\n",
              static_cast<long long>(compared), static_cast<long long>(total), kBf16Margin);
  EXPECT_GE(compared, 150);  // the goldens' margins exceed kBf16Margin on 159 leading tokens
}

}  // namespace
}  // namespace anvil
