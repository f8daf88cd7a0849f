// anvil_bench_ops: times every op of the CUDA backend at the shapes of one training step of
// a model (Qwen3-1.7B by default: C 2048, 16 q heads, 8 kv heads, head_dim 128, I 6144,
// V 151936) and prints each op's time against its floor: FLOPs over the bf16 dense rate
// for matrix work, bytes over memory bandwidth for the rest (peaks as flags, defaults
// 790 TFLOP/s and 4.0 TB/s, the rates measured on an H200).
//
// Usage: anvil_bench_ops [--tokens N] [--seq T] [--peak-tflops F] [--peak-tbs B] [--variants K] [--fp8]
//        anvil_bench_ops --attention   (bench/attention_vs_sdpa.py reads its output)
// Times are host-clock medians of 5 batches of back-to-back calls (each batch ends with
// one synchronize), after warm-up; inputs are random, never zeros.
// --attention times attention alone at the shapes of issue 11's goal (head_dim 128, causal,
// 16/8 and 32/8 heads, batch 1 and 4, 2048 and 4096 tokens) on each ANVIL_ATTENTION path
// (kernel, cudnn, cudnn-nondeterministic) and prints one JSON line per path and shape.
// --variants K also times the weight-gradient GEMMs (fp32 dw, beta 1) with each of
// cuBLASLt's first K heuristic candidates, and says whether each repeats bit for bit and how
// far it lands from candidate 0 (a different order of additions), so that a faster
// deterministic choice can be found in one run.
// --fp8 times the blocks' linear layers with tensorwise FP8 instead (ops/fp8_recipe.h), each
// op beside its bf16 form (and as the model runs them: forward with x's amax known, from its
// producer, and the backward with x's and w's, from the forward: Fp8Amax), and its parts: each
// operand's quantization (fp8_cast.h, floor: 2 bytes read twice, 1 written) and the FP8 GEMM
// alone, with fast accumulation off (the recipe's) and on (against the FP8 rate,
// --peak-fp8-tflops, default 1580).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gemm_fp8.h"
#include "ops/ops.h"

namespace anvil {
namespace {

struct Model {
  int64_t C = 2048, H = 16, KV = 8, hd = 128, I = 6144, V = 151936;
};

class Bench {
 public:
  Bench(Ops& ops, double peak_flops, double peak_bytes) : ops_(ops), peak_flops_(peak_flops), peak_bytes_(peak_bytes) {}
  ~Bench() {
    for (void* p : owned_) ops_.runtime().release(p);
  }

  // A device tensor of random values (bf16 or f32), or of token ids in [0, id_range).
  Tensor make(DType dt, Shape s, float scale = 1.0f, int64_t id_range = 0) {
    Tensor t(ops_.runtime().alloc(static_cast<size_t>(s.numel()) * dtype_size(dt)), dt, s, Device::kCUDA);
    owned_.push_back(t.data);
    const size_t n = static_cast<size_t>(s.numel());
    const size_t block = std::min<size_t>(n, size_t{1} << 20);
    std::mt19937 gen(static_cast<uint32_t>(owned_.size()));
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<char> host(block * dtype_size(dt));
    for (size_t i = 0; i < block; ++i) {
      if (dt == DType::kBF16) {
        const uint16_t b = f32_to_bf16_bits(dist(gen));
        std::memcpy(host.data() + 2 * i, &b, 2);
      } else if (dt == DType::kF32) {
        const float f = dist(gen);
        std::memcpy(host.data() + 4 * i, &f, 4);
      } else {
        const int32_t v = static_cast<int32_t>(gen() % static_cast<uint32_t>(id_range));
        std::memcpy(host.data() + 4 * i, &v, 4);
      }
    }
    for (size_t off = 0; off < n; off += block) {
      const size_t len = std::min(block, n - off);
      Tensor part(static_cast<char*>(t.data) + off * dtype_size(dt), dt, {static_cast<int64_t>(len)}, Device::kCUDA);
      ops_.runtime().upload(part, host.data());
    }
    return t;
  }

  // Seconds per call of fn: the median of 5 batches of back-to-back calls, after warm-up.
  double time(const std::function<void()>& fn) {
    using clock = std::chrono::steady_clock;
    fn();
    ops_.runtime().synchronize();
    auto t0 = clock::now();
    fn();
    ops_.runtime().synchronize();
    const double once = std::chrono::duration<double>(clock::now() - t0).count();
    const int reps = std::max(1, std::min(200, static_cast<int>(2e-3 / std::max(once, 1e-6))));
    std::vector<double> per;
    for (int b = 0; b < 5; ++b) {
      t0 = clock::now();
      for (int r = 0; r < reps; ++r) fn();
      ops_.runtime().synchronize();
      per.push_back(std::chrono::duration<double>(clock::now() - t0).count() / reps);
    }
    std::sort(per.begin(), per.end());
    return per[per.size() / 2];
  }

  // Times fn; flops or bytes (one of them non-zero) give the floor, flops at peak_flops
  // (default: the bf16 rate).
  void run(const std::string& name, const std::string& shape, double flops, double bytes,
           const std::function<void()>& fn, double peak_flops = 0) {
    const double t = time(fn);
    const double floor = flops > 0 ? flops / (peak_flops > 0 ? peak_flops : peak_flops_) : bytes / peak_bytes_;
    if (flops > 0)
      std::printf("%-28s %-22s %10.1f us %9.1f TFLOP/s  floor %8.1f us  %5.1f%% of peak\n", name.c_str(),
                  shape.c_str(), t * 1e6, flops / t / 1e12, floor * 1e6, 100.0 * floor / t);
    else
      std::printf("%-28s %-22s %10.1f us %9.2f TB/s     floor %8.1f us  %5.1f%% of peak\n", name.c_str(),
                  shape.c_str(), t * 1e6, bytes / t / 1e12, floor * 1e6, 100.0 * floor / t);
    std::fflush(stdout);
  }

 private:
  Ops& ops_;
  double peak_flops_, peak_bytes_;
  std::vector<void*> owned_;
};

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

// A CUDA backend whose attention runs on the ANVIL_ATTENTION path `impl`.
std::unique_ptr<Ops> make_ops_with_attention(const char* impl) {
  const char* prev = std::getenv("ANVIL_ATTENTION");
  const std::string saved = prev ? prev : "";
  setenv("ANVIL_ATTENTION", impl, 1);
  auto ops = make_cuda_ops(0);
  if (prev) setenv("ANVIL_ATTENTION", saved.c_str(), 1);
  else unsetenv("ANVIL_ATTENTION");
  return ops;
}

// Attention alone at the goal's shapes, on each path: one JSON line per (path, shape) with
// the time per call and TFLOP/s of forward and backward, and which implementation ran each
// (cuDNN, or the kernel where cuDNN refused the shape: the log says why).
// FLOPs, causal: forward 2 * 2 * B * H * T * T * hd / 2, backward 2.5x the forward.
int attention_main() {
  struct Shape { int64_t b, t, h, kv; };
  const int64_t hd = 128;
  std::printf("{\"cudnn_version\": \"%s\"}\n", cuda::cudnn_version().c_str());
  for (const char* impl : {"kernel", "cudnn", "cudnn-nondeterministic"}) {
    auto ops = make_ops_with_attention(impl);
    for (const Shape& s : {Shape{1, 2048, 16, 8}, Shape{4, 2048, 16, 8}, Shape{1, 4096, 16, 8}, Shape{4, 4096, 16, 8},
                           Shape{1, 2048, 32, 8}, Shape{4, 2048, 32, 8}, Shape{1, 4096, 32, 8},
                           Shape{4, 4096, 32, 8}}) {
      Bench b(*ops, 1, 1);
      const int64_t heads = s.h + 2 * s.kv;
      Tensor qkv = b.make(DType::kBF16, {s.b, s.t, heads, hd}), out = b.make(DType::kBF16, {s.b, s.t, s.h, hd});
      Tensor lse = b.make(DType::kF32, {s.b, s.h, s.t}), dout = b.make(DType::kBF16, {s.b, s.t, s.h, hd});
      Tensor dqkv = b.make(DType::kBF16, {s.b, s.t, heads, hd});
      const int H = static_cast<int>(s.h), KV = static_cast<int>(s.kv);
      const cuda::CudnnAttentionCounts c0 = cuda::cudnn_attention_counts();
      ops->attention_forward(out, lse, qkv, H, KV);
      const cuda::CudnnAttentionCounts c1 = cuda::cudnn_attention_counts();
      ops->attention_backward(dqkv, dout, qkv, out, lse, H, KV);
      ops->runtime().synchronize();
      const cuda::CudnnAttentionCounts c2 = cuda::cudnn_attention_counts();
      const double fwd = b.time([&] { ops->attention_forward(out, lse, qkv, H, KV); });
      const double bwd = b.time([&] { ops->attention_backward(dqkv, dout, qkv, out, lse, H, KV); });
      const double fl = 2.0 * s.b * s.h * static_cast<double>(s.t) * s.t * hd;
      std::printf(
          "{\"impl\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
          "\"head_dim\": %lld, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"bwd_tflops\": %.1f, "
          "\"fwd_ran\": \"%s\", \"bwd_ran\": \"%s\", \"peak_gib\": %.3f}\n",
          impl, static_cast<long long>(s.b), static_cast<long long>(s.t), static_cast<long long>(s.h),
          static_cast<long long>(s.kv), static_cast<long long>(hd), fwd * 1e3, bwd * 1e3, fl / fwd / 1e12,
          2.5 * fl / bwd / 1e12, c1.forward > c0.forward ? "cudnn" : "kernel",
          c2.backward > c1.backward ? "cudnn" : "kernel",
          static_cast<double>(ops->runtime().memory_stats().peak) / (1ll << 30));
      std::fflush(stdout);
    }
  }
  return 0;
}

// A GEMM workspace from the runtime, for a Gemm or Fp8Gemm made here.
struct GemmWorkspace {
  GemmWorkspace(Runtime& rt, size_t bytes) : rt(rt), p(rt.alloc(bytes)) {}
  ~GemmWorkspace() { rt.release(p); }
  GemmWorkspace(const GemmWorkspace&) = delete;
  GemmWorkspace& operator=(const GemmWorkspace&) = delete;
  Runtime& rt;
  void* p;
};

// The FP8 linear layers (see the top) at the shapes of one block.
void bench_fp8(Ops& ops, Bench& b, int64_t N, double peak_fp8) {
  const Model m;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const auto stream = static_cast<cudaStream_t>(ops.runtime().stream());
  const GemmWorkspace exact_ws(ops.runtime(), cuda::Fp8Gemm::kWorkspaceBytes),
      fast_ws(ops.runtime(), cuda::Fp8Gemm::kWorkspaceBytes);
  cuda::Fp8Gemm exact(stream, exact_ws.p), fast(stream, fast_ws.p, true);
  const Fp8Recipe tw = Fp8Recipe::kTensorwise;
  Tensor none;
  struct Lin { const char* name; int64_t k, n; };
  for (const Lin& l : {Lin{"qkv", m.C, (m.H + 2 * m.KV) * m.hd}, Lin{"o", m.H * m.hd, m.C},
                       Lin{"gate_up", m.C, 2 * m.I}, Lin{"down", m.I, m.C}}) {
    Tensor x = b.make(bf, {N, l.k}), w = b.make(bf, {l.n, l.k}, 0.02f), y = b.make(bf, {N, l.n});
    Tensor dw = b.make(f32, {l.n, l.k}, 0.0f);
    const double fl = 2.0 * N * l.n * l.k;
    const std::string nm = l.name;
    b.run("bf16 forward " + nm, dims({N, l.k, l.n}), fl, 0, [&] { ops.linear_forward(y, x, w, none); });
    b.run("fp8 forward " + nm, dims({N, l.k, l.n}), fl, 0, [&] { ops.linear_fp8_forward(y, x, w, none, tw); });
    b.run("bf16 backward_input " + nm, dims({N, l.n, l.k}), fl, 0, [&] { ops.linear_backward_input(x, y, w, false); });
    b.run("fp8 backward_input " + nm, dims({N, l.n, l.k}), fl, 0,
          [&] { ops.linear_fp8_backward_input(x, y, w, tw, false); });
    b.run("bf16 backward_weight " + nm, dims({l.n, l.k, N}), fl, 0,
          [&] { ops.linear_backward_weight(dw, none, y, x); });
    b.run("fp8 backward_weight " + nm, dims({l.n, l.k, N}), fl, 0,
          [&] { ops.linear_fp8_backward_weight(dw, none, y, x, tw); });
    b.run("fp8 backward (both, one op) " + nm, dims({N, l.n, l.k}), 2 * fl, 0,
          [&] { ops.linear_fp8_backward(x, dw, none, y, x, w, tw, true); });
    Tensor slot = b.make(f32, {2}, 0.0f);
    ops.linear_fp8_forward(y, x, w, none, tw, {slot});  // x's and w's amax into the slot
    b.run("fp8 forward, x amax known " + nm, dims({N, l.k, l.n}), fl, 0,
          [&] { ops.linear_fp8_forward(y, x, w, none, tw, {slot, true, false}); });
    b.run("fp8 backward (both, one op), amax known " + nm, dims({N, l.n, l.k}), 2 * fl, 0,
          [&] { ops.linear_fp8_backward(x, dw, none, y, x, w, tw, true, {slot, true, true}); });
    // The parts: each operand (source, its rows as the GEMM reads them, transposed) quantized.
    Tensor q8 = b.make(DType::kI32, {(std::max(N, l.n) * std::max(l.k, l.n) + 3) / 4}, 0, INT32_MAX);
    Tensor stats = b.make(f32, {3 * std::max({N, l.n, l.k})}, 0.0f);
    struct Src { const char* what; const Tensor& t; int64_t rows, k; bool transposed; };
    for (const Src& src : {Src{"x", x, N, l.k, false}, Src{"w", w, l.n, l.k, false}, Src{"dy", y, N, l.n, false},
                           Src{"w^T", w, l.k, l.n, true}, Src{"dy^T", y, l.n, N, true}, Src{"x^T", x, l.k, N, true}})
      b.run("fp8 quantize " + nm + " " + src.what, dims({src.rows, src.k}), 0, 5.0 * src.rows * src.k, [&] {
        cuda::quantize_fp8(static_cast<uint8_t*>(q8.data), static_cast<float*>(stats.data),
                           static_cast<const __nv_bfloat16*>(src.t.data), src.rows, src.k, src.transposed, false,
                           stream);
      });
    const cuda::Fp8Operand p8{q8.data, static_cast<const float*>(stats.data)};
    for (cuda::Fp8Gemm* g : {&exact, &fast}) {
      const std::string acc = g == &fast ? " (fast accumulation)" : "";
      b.run(
          "fp8 gemm forward " + nm + acc, dims({N, l.k, l.n}), fl, 0,
          [&] { g->run(y.data, CUDA_R_16BF, l.n, p8, p8, N, l.n, l.k, 0.0f, nullptr, false); }, peak_fp8 * 1e12);
      b.run(
          "fp8 gemm backward_weight " + nm + acc, dims({l.n, l.k, N}), fl, 0,
          [&] { g->run(dw.data, CUDA_R_32F, l.k, p8, p8, l.n, l.k, N, 1.0f, nullptr, false); }, peak_fp8 * 1e12);
    }
  }
}

int bench_main(int argc, char** argv) {
  int64_t tokens = 2048, seq = 2048, variants = 0;
  double peak_tflops = 790, peak_tbs = 4.0, peak_fp8 = 1580;
  bool fp8 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--attention") return attention_main();
    if (k == "--fp8") {
      fp8 = true;
      continue;
    }
    ANVIL_ENSURE(i + 1 < argc, kUsage, k, " needs a value");
    const char* v = argv[++i];
    if (k == "--tokens") tokens = std::atoll(v);
    else if (k == "--seq") seq = std::atoll(v);
    else if (k == "--peak-tflops") peak_tflops = std::atof(v);
    else if (k == "--peak-tbs") peak_tbs = std::atof(v);
    else if (k == "--variants") variants = std::atoll(v);
    else if (k == "--peak-fp8-tflops") peak_fp8 = std::atof(v);
    else raise(ErrorKind::kUsage, "unknown flag ", k,
               " (flags: --tokens --seq --peak-tflops --peak-tbs --peak-fp8-tflops --variants --fp8, or --attention)");
  }
  ANVIL_ENSURE(seq > 0 && tokens % seq == 0, kUsage, "--tokens must be a multiple of --seq");
  auto ops = make_cuda_ops(0);
  std::printf("%s, %lld tokens (sequences of %lld); peaks %.0f TFLOP/s, %.1f TB/s\n", ops->runtime().name().c_str(),
              static_cast<long long>(tokens), static_cast<long long>(seq), peak_tflops, peak_tbs);
  Bench b(*ops, peak_tflops * 1e12, peak_tbs * 1e12);
  if (fp8) {
    bench_fp8(*ops, b, tokens, peak_fp8);
    return 0;
  }
  const Model m;
  const int64_t N = tokens, B = tokens / seq, T = seq, heads = m.H + 2 * m.KV, QKV = heads * m.hd;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  Tensor none;

  // GEMMs of one block (forward and both backward GEMMs of the largest).
  struct Lin { const char* name; int64_t k, n; };
  for (const Lin& l : {Lin{"qkv", m.C, QKV}, Lin{"o", m.H * m.hd, m.C}, Lin{"gate_up", m.C, 2 * m.I},
                       Lin{"down", m.I, m.C}}) {
    Tensor x = b.make(bf, {N, l.k}), w = b.make(bf, {l.n, l.k}, 0.02f), y = b.make(bf, {N, l.n});
    const double fl = 2.0 * N * l.n * l.k;
    b.run(std::string("linear_forward ") + l.name, dims({N, l.k, l.n}), fl, 0,
          [&] { ops->linear_forward(y, x, w, none); });
    if (std::string(l.name) == "gate_up" || std::string(l.name) == "down") {
      Tensor dw = b.make(f32, {l.n, l.k}, 0.0f);
      b.run(std::string("linear_backward_input ") + l.name, dims({N, l.n, l.k}), fl, 0,
            [&] { ops->linear_backward_input(x, y, w, false); });
      b.run(std::string("linear_backward_weight ") + l.name, dims({l.n, l.k, N}), fl, 0,
            [&] { ops->linear_backward_weight(dw, none, y, x); });
    }
  }

  // Weight-gradient GEMMs with each heuristic candidate (see the top).
  for (const Lin& l : {Lin{"qkv", m.C, QKV}, Lin{"o", m.H * m.hd, m.C}, Lin{"gate_up", m.C, 2 * m.I},
                       Lin{"down", m.I, m.C}}) {
    if (variants == 0) break;
    Tensor x = b.make(bf, {N, l.k}), dy = b.make(bf, {N, l.n}, 0.02f), dw = b.make(f32, {l.n, l.k}, 0.0f);
    std::vector<float> first;  // candidate 0's dw
    for (int64_t rank = 0; rank < variants; ++rank) {
      const GemmWorkspace ws(ops->runtime(), cuda::Gemm::kWorkspaceBytes);
      cuda::Gemm gemm(static_cast<cudaStream_t>(ops->runtime().stream()), ws.p, static_cast<int>(rank));
      auto dw_product = [&] {
        gemm.run(dw.data, CUDA_R_32F, l.k, {dy.data, l.n, true}, {x.data, l.k, false}, l.n, l.k, N, 1.0f, nullptr);
      };
      auto once = [&] {  // dw from zero: one product
        ops->runtime().zero(dw);
        dw_product();
        std::vector<float> h(static_cast<size_t>(dw.numel()));
        ops->runtime().download(h.data(), dw);
        return h;
      };
      const std::vector<float> r1 = once(), r2 = once();
      if (rank == 0) first = r1;
      double diff = 0, norm = 0;
      for (size_t i = 0; i < r1.size(); ++i) {
        const double d = static_cast<double>(r1[i]) - first[i];
        diff += d * d;
        norm += static_cast<double>(first[i]) * first[i];
      }
      b.run("dw candidate " + std::to_string(gemm.last_rank()) + " " + l.name, dims({l.n, l.k, N}),
            2.0 * N * l.n * l.k, 0, dw_product);
      std::printf("    %s, rel L2 to candidate 0: %.2e\n", r1 == r2 ? "repeats bit for bit" : "NOT DETERMINISTIC",
                  std::sqrt(diff / std::max(norm, 1e-300)));
    }
  }

  {  // attention
    Tensor qkv = b.make(bf, {B, T, heads, m.hd}), out = b.make(bf, {B, T, m.H, m.hd});
    Tensor lse = b.make(f32, {B, m.H, T}), dout = b.make(bf, {B, T, m.H, m.hd}), dqkv = b.make(bf, {B, T, heads, m.hd});
    const double fl = 2.0 * B * m.H * static_cast<double>(T) * T * m.hd;  // causal: half of 4 B H T^2 hd
    b.run("attention_forward", dims({B, T, m.H, m.KV, m.hd}), fl, 0,
          [&] { ops->attention_forward(out, lse, qkv, static_cast<int>(m.H), static_cast<int>(m.KV)); });
    b.run("attention_backward", dims({B, T, m.H, m.KV, m.hd}), 2.5 * fl, 0, [&] {
      ops->attention_backward(dqkv, dout, qkv, out, lse, static_cast<int>(m.H), static_cast<int>(m.KV));
    });
  }

  {  // norms, rope, swiglu, add, embedding
    Tensor x = b.make(bf, {N, m.C}), w = b.make(bf, {m.C}), out = b.make(bf, {N, m.C}), rstd = b.make(f32, {N});
    Tensor dw = b.make(f32, {m.C}, 0.0f);
    const double row = 2.0 * N * m.C;
    b.run("rmsnorm_forward", dims({N, m.C}), 0, 2 * row, [&] { ops->rmsnorm_forward(out, rstd, x, w, 1e-6f); });
    b.run("rmsnorm_backward", dims({N, m.C}), 0, 3 * row,
          [&] { ops->rmsnorm_backward(out, dw, x, x, w, rstd, false); });
    b.run("add", dims({N, m.C}), 0, 3 * row, [&] { ops->add(out, x, out); });
    Tensor sum = b.make(bf, {N, m.C}), x2 = b.make(bf, {N, m.C});
    b.run("add + rmsnorm_forward", dims({N, m.C}), 0, 5 * row, [&] {
      ops->add(sum, x, x2);
      ops->rmsnorm_forward(out, rstd, sum, w, 1e-6f);
    });
    b.run("add_rmsnorm_forward (fused)", dims({N, m.C}), 0, 4 * row,
          [&] { ops->add_rmsnorm_forward(sum, out, rstd, x, x2, w, 1e-6f); });

    Tensor qkv = b.make(bf, {N, heads, m.hd}), qo = b.make(bf, {N, heads, m.hd}), qr = b.make(f32, {N, m.H + m.KV});
    Tensor cs = b.make(f32, {T, m.hd / 2}), sn = b.make(f32, {T, m.hd / 2});
    Tensor qw = b.make(bf, {m.hd}), kw = b.make(bf, {m.hd}), dqw = b.make(f32, {m.hd}, 0.0f), dkw = b.make(f32, {m.hd}, 0.0f);
    const double qb = 2.0 * N * QKV;
    b.run("qk_norm_rope_forward", dims({N, heads, m.hd}), 0, 2 * qb, [&] {
      ops->qk_norm_rope_forward(qo, qr, qkv, qw, kw, cs, sn, static_cast<int>(m.H), static_cast<int>(m.KV), 1e-6f);
    });
    b.run("qk_norm_rope_backward", dims({N, heads, m.hd}), 0, 3 * qb, [&] {
      ops->qk_norm_rope_backward(qo, dqw, dkw, qkv, qkv, qw, kw, qr, cs, sn, static_cast<int>(m.H),
                                 static_cast<int>(m.KV));
    });

    Tensor gu = b.make(bf, {N, 2 * m.I}), act = b.make(bf, {N, m.I}), dgu = b.make(bf, {N, 2 * m.I});
    const double ib = 2.0 * N * m.I;
    b.run("swiglu_forward", dims({N, m.I}), 0, 3 * ib, [&] { ops->swiglu_forward(act, gu); });
    b.run("swiglu_backward", dims({N, m.I}), 0, 5 * ib, [&] { ops->swiglu_backward(dgu, act, gu); });
    Tensor act2 = b.make(bf, {N, m.I});
    b.run("swiglu_backward + act", dims({N, m.I}), 0, 6 * ib, [&] { ops->swiglu_backward(dgu, act, gu, act2); });

    Tensor ids = b.make(DType::kI32, {N}, 0, m.V), table = b.make(bf, {m.V, m.C}), dtable = b.make(f32, {m.V, m.C}, 0.0f);
    b.run("embedding_forward", dims({N, m.C}), 0, 2 * row, [&] { ops->embedding_forward(out, ids, table); });
    b.run("embedding_backward", dims({N, m.C}), 0, row + 8.0 * N * m.C,
          [&] { ops->embedding_backward(dtable, ids, out); });

    Tensor loss = b.make(f32, {1}, 0.0f), dh = b.make(bf, {N, m.C}), targets = b.make(DType::kI32, {N}, 0, m.V);
    b.run("cross_entropy (fused)", dims({N, m.V, m.C}), 6.0 * N * m.V * m.C, 0, [&] {
      ops->cross_entropy_forward_backward(loss, dh, dtable, x, table, targets, 1.0f / static_cast<float>(N), none);
    });
  }

  {  // optimizer over 2^28 parameters
    const int64_t n = int64_t{1} << 28;
    Tensor p = b.make(f32, {n}), g = b.make(f32, {n}, 1e-3f), mm = b.make(f32, {n}, 0.0f), vv = b.make(f32, {n}, 0.0f);
    Tensor ss = b.make(f32, {1}, 0.0f);
    AdamWHyper hp;
    Tensor copy = b.make(bf, {n});
    b.run("adamw_step", dims({n}), 0, 28.0 * n, [&] { ops->adamw_step(p, g, mm, vv, hp, 1.0f, Tensor(), false); });
    b.run("adamw_step + bf16 copy", dims({n}), 0, 30.0 * n, [&] { ops->adamw_step(p, g, mm, vv, hp, 1.0f, copy, false); });
    b.run("adamw_step + bf16 copy + zero grad", dims({n}), 0, 34.0 * n,
          [&] { ops->adamw_step(p, g, mm, vv, hp, 1.0f, copy, true); });
    b.run("sum_squares", dims({n}), 0, 4.0 * n, [&] { ops->sum_squares(ss, g); });
    // The optimizer overlapped with the forward: AdamW on the side queue beside 40 gate_up
    // GEMMs on the main one; compare its time with the two alone and with their sum.
    Tensor x = b.make(bf, {N, m.C}), w = b.make(bf, {2 * m.I, m.C}, 0.02f), y = b.make(bf, {N, 2 * m.I});
    auto gemms = [&] {
      for (int i = 0; i < 40; ++i) ops->linear_forward(y, x, w, none);
    };
    auto adamw_side = [&] {
      ops->runtime().set_queue(Runtime::Queue::kSide);
      ops->adamw_step(p, g, mm, vv, hp, 1.0f, Tensor(), false);
      ops->runtime().set_queue(Runtime::Queue::kMain);
    };
    b.run("40 x gate_up alone", dims({N, m.C, 2 * m.I}), 40 * 2.0 * N * m.C * 2 * m.I, 0, gemms);
    b.run("adamw_step alone, side queue", dims({n}), 0, 28.0 * n, adamw_side);
    b.run("both, overlapped", dims({n}), 0, 28.0 * n, [&] {
      adamw_side();
      gemms();
    });
  }
  return 0;
}

}  // namespace
}  // namespace anvil

int main(int argc, char** argv) {
  try {
    return anvil::bench_main(argc, argv);
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "anvil_bench_ops: %s\n", e.what());
    return anvil::exit_code(e.kind());
  }
}
