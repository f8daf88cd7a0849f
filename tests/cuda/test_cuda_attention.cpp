// Attention forward and backward on the CUDA backend against the fp32 CPU reference, on each
// path ANVIL_ATTENTION picks (cuDNN's fused attention, cuDNN's forward with the kernel's
// backward, the mma.sync kernel), and their determinism at a goal shape; the same with
// documents packed in each sequence (positions: one, two, many, and documents of one
// token) on the kernel and, given the documents' lengths, on cuDNN's ragged path (its
// deterministic backward repeating bit for bit; chat-like micro-batches staying on cuDNN,
// with the scratch they take), and qk-norm + RoPE by position. Inputs, poisoning and tolerances: cuda_test_util.h.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/attention_ragged.h"
#include "ops/attention_scratch.h"
#include "ops/documents.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/ops.h"
#include "cuda_test_util.h"

namespace anvil {
namespace {

// A CUDA backend whose attention runs as ANVIL_ATTENTION=impl says (attention_cudnn.h), one
// per impl for the process. Its ops run on its own stream: callers synchronize it before
// reading results through gpu().
Ops& gpu_attention(const std::string& impl) {
  static std::map<std::string, std::unique_ptr<Ops>> backends;
  std::unique_ptr<Ops>& ops = backends[impl];
  if (!ops) {
    struct Restore {  // the caller's ANVIL_ATTENTION, also when make_cuda_ops throws
      const char* prev = std::getenv("ANVIL_ATTENTION");
      std::string saved = prev ? prev : "";
      ~Restore() {
        if (prev) setenv("ANVIL_ATTENTION", saved.c_str(), 1);
        else unsetenv("ANVIL_ATTENTION");
      }
    } restore;
    setenv("ANVIL_ATTENTION", impl.c_str(), 1);
    ops = make_cuda_ops(0);
  }
  return *ops;
}

// Why cuDNN's attention cannot run here, or "" where it must: built in, a Hopper or newer GPU
// and libcudnn.so.9 loaded. Where it must, cuDNN runs attention (the counts move): a silent
// fall back to the kernel would make the cuDNN tests test nothing.
std::string cudnn_missing() {
  if (!cuda::cudnn_attention_built()) return "this build has no cuDNN (ANVIL_HAVE_CUDNN unset)";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "the properties of GPU 0 cannot be read";
  if (prop.major < 9)
    return cat("GPU 0 (", prop.name, ") is sm_", prop.major, prop.minor, ": cuDNN attention runs on sm_90 or newer");
  if (cuda::cudnn_version().empty()) return "libcudnn.so.9 cannot be loaded";
  return "";
}

// The first statement of a cuDNN attention test, after REQUIRE_GPU: without cuDNN the test
// says why and skips; with ANVIL_REQUIRE_CUDNN set (the device machine, where cuDNN is
// expected) or under CI=true, it fails instead.
#define REQUIRE_CUDNN()                                                                              \
  if (const std::string why_ = cudnn_missing(); !why_.empty())                                       \
  ANVIL_SKIP_UNLESS_REQUIRED(testing::env_flag("ANVIL_REQUIRE_CUDNN") || testing::in_ci(),           \
                             "cuDNN attention cannot run here, the kernel would stand in for it: " + why_)

struct Case {
  int64_t b, t;
  int h, kv;
  int64_t hd;
};

// Documents packed in sequences of T tokens, as positions (ops.h), each sequence filled with
// documents whose lengths cycle through `lengths` (the last one cut at T).
std::vector<int32_t> document_positions(int64_t B, int64_t T, const std::vector<int64_t>& lengths) {
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0, doc = 0, at = 0; t < T; ++t, ++at) {
      if (at == lengths[static_cast<size_t>(doc) % lengths.size()]) at = 0, ++doc;
      pos.push_back(static_cast<int32_t>(at));
    }
  return pos;
}

// Forward and backward of one case on `dev` against the CPU reference (positions empty:
// plain causal; lengths: the device also gets the documents' lengths, ops/documents.h, the
// CPU positions alone); returns whether cuDNN ran the forward and the backward.
std::pair<bool, bool> compare_attention(Ops& dev, const Case& cs, const std::vector<int32_t>& positions,
                                        const std::string& tag, bool lengths = false) {
  const int64_t heads = cs.h + 2 * cs.kv, n = cs.b * cs.t * heads * cs.hd, no = cs.b * cs.t * cs.h * cs.hd;
  const cuda::CudnnAttentionCounts before = cuda::cudnn_attention_counts();
  Ids pos(positions.empty() ? std::vector<int32_t>{0} : positions);
  const Tensor pc = positions.empty() ? Tensor() : pos.c();
  const Documents pg = positions.empty() ? Documents()
                       : lengths        ? Documents(pos.g(), document_lengths(positions))
                                        : Documents(pos.g());
  Buf qkv({cs.b, cs.t, heads, cs.hd}, DType::kBF16, randn(n, 31, 1.0f));
  Buf out({cs.b, cs.t, cs.h, cs.hd}, DType::kBF16, nans(no));
  Buf lse({cs.b, cs.h, cs.t}, DType::kF32, nans(cs.b * cs.h * cs.t));
  cpu().attention_forward(out.c(), lse.c(), qkv.c(), cs.h, cs.kv, pc);
  dev.attention_forward(out.g(), lse.g(), qkv.g(), cs.h, cs.kv, pg);
  dev.runtime().synchronize();
  check("attention_forward " + tag + " out", out, kChain);
  check("attention_forward " + tag + " lse", lse, kF32);

  // Backward from the same saved tensors on both sides: the CPU's out (rounded to bf16) and lse.
  std::vector<float> o = out.host();
  for (auto& v : o) v = round_bf16(v);
  Buf saved_out({cs.b, cs.t, cs.h, cs.hd}, DType::kBF16, o);
  Buf saved_lse({cs.b, cs.h, cs.t}, DType::kF32, lse.host());
  Buf dout({cs.b, cs.t, cs.h, cs.hd}, DType::kBF16, randn(no, 32));
  Buf dqkv({cs.b, cs.t, heads, cs.hd}, DType::kBF16, nans(n));
  cpu().attention_backward(dqkv.c(), dout.c(), qkv.c(), saved_out.c(), saved_lse.c(), cs.h, cs.kv, pc);
  dev.attention_backward(dqkv.g(), dout.g(), qkv.g(), saved_out.g(), saved_lse.g(), cs.h, cs.kv, pg);
  dev.runtime().synchronize();
  const cuda::CudnnAttentionCounts after = cuda::cudnn_attention_counts();
  const bool fwd_cudnn = after.forward > before.forward, bwd_cudnn = after.backward > before.backward;
  std::printf("[path] %-40s forward %s, backward %s\n", tag.c_str(), fwd_cudnn ? "cudnn" : "kernel",
              bwd_cudnn ? "cudnn" : "kernel");
  // Per part, so that a wrong dq, dk or dv shows by name.
  const std::vector<double> got = dqkv.got(), want = dqkv.want();
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    const int64_t h0 = part == 0 ? 0 : part == 1 ? cs.h : cs.h + cs.kv, h1 = part == 0 ? cs.h : h0 + cs.kv;
    std::vector<double> gd, wd;
    for (int64_t r = 0; r < cs.b * cs.t; ++r)
      for (int64_t hh = h0; hh < h1; ++hh)
        for (int64_t d = 0; d < cs.hd; ++d) {
          const size_t i = static_cast<size_t>((r * heads + hh) * cs.hd + d);
          gd.push_back(static_cast<float>(got[i]));
          wd.push_back(static_cast<float>(want[i]));
        }
    double max_abs = 0, want_norm = 0;
    for (size_t i = 0; i < gd.size(); ++i) {
      max_abs = std::max(max_abs, std::abs(gd[i] - wd[i]));
      want_norm += wd[i] * wd[i];
    }
    // One key per query (T = 1, or documents of one token): P = 1, dS = dP - dsum = 0, so
    // dq = dk = 0 exactly.
    if (want_norm == 0) {
      std::printf("[err] %-58s max_abs %.2e  (closed form 0, tol 1e-5)\n",
                  ("attention_backward " + tag + " " + names[part]).c_str(), max_abs);
      EXPECT_LT(max_abs, 1e-5) << "attention_backward " << tag << " " << names[part];
      continue;
    }
    std::printf("[err] %-58s rel_l2 %.2e  max_abs %.2e  (tol %.0e)\n",
                ("attention_backward " + tag + " " + names[part]).c_str(),
                testing::rel_l2(gd.data(), wd.data(), gd.size()), max_abs, kChain);
    EXPECT_TRUE(testing::close_rel_l2(gd, wd, kChain)) << "attention_backward " << tag << " " << names[part];
  }
  return {fwd_cudnn, bwd_cudnn};
}

// Forward and backward on `dev` against the CPU reference, on causal GQA shapes: odd
// lengths, several batches, head_dim 16 to 128, the goal's 16/8 and 32/8 head groups.
void attention_vs_cpu(const std::string& impl) {
  Ops& dev = gpu_attention(impl);
  for (const Case& cs : {Case{1, 64, 2, 1, 64}, Case{2, 37, 4, 2, 128}, Case{1, 200, 6, 2, 128}, Case{2, 130, 2, 2, 64},
                         Case{1, 1, 2, 1, 128}, Case{1, 300, 8, 1, 128}, Case{2, 37, 4, 2, 32},
                         Case{2, 37, 4, 2, 16}, Case{1, 150, 4, 1, 32}, Case{3, 129, 16, 8, 128},
                         Case{1, 333, 32, 8, 128}, Case{2, 256, 16, 8, 128}, Case{1, 128, 4, 2, 128},
                         Case{1, 384, 32, 8, 128}}) {
    const std::string tag = impl + " " + dims({cs.b, cs.t, cs.h, cs.kv, cs.hd});
    const auto [fwd_cudnn, bwd_cudnn] = compare_attention(dev, cs, {}, tag);
    if (impl == "kernel") {
      EXPECT_FALSE(fwd_cudnn || bwd_cudnn) << tag;
    } else if (cs.hd == 128 && cs.t > 1) {  // the production head size
      EXPECT_TRUE(fwd_cudnn) << tag << ": cuDNN did not run the forward (see the log for why)";
      // At lengths not a multiple of 128, cuDNN up to 9.15 needs the frontend's workaround,
      // which loads libcudart.so: where that fails the kernel runs, correctly, and the log
      // says so; the [path] line above shows it.
      if (impl == "cudnn-forward") EXPECT_FALSE(bwd_cudnn) << tag << ": backward path";
      else if (cs.t % 128 == 0) EXPECT_TRUE(bwd_cudnn) << tag << ": cuDNN did not run the backward (see the log)";
    }
  }
}

// The document layouts of the packed tests: one document (positions 0..T-1 given), two,
// many of mixed lengths (across tile edges: 64 keys, 32 queries), and every token its own.
const std::vector<std::pair<std::string, std::vector<int64_t>>>& document_layouts() {
  static const std::vector<std::pair<std::string, std::vector<int64_t>>> layouts = {
      {"one document", {1 << 30}},
      {"two documents", {100, 1 << 30}},
      {"many documents", {1, 5, 64, 2, 130, 1, 17, 33, 65, 3}},
      {"documents of one token", {1}}};
  return layouts;
}

// Packed documents (positions; with ragged, their lengths too: cuDNN's ragged path) on `dev`
// against the CPU reference, on each layout. Given positions alone the kernel runs them; given
// their lengths, on a cuDNN path, cuDNN runs the production head size wherever the documents
// form few groups (all but one-token documents; attention_ragged.h).
void attention_documents_vs_cpu(const std::string& impl, bool ragged) {
  Ops& dev = gpu_attention(impl);
  for (const Case& cs : {Case{2, 200, 4, 2, 128}, Case{1, 333, 32, 8, 128}, Case{2, 130, 2, 2, 64},
                         Case{1, 300, 8, 1, 32}, Case{2, 37, 4, 2, 16}, Case{1, 1024, 16, 8, 128}}) {
    for (const auto& [name, lengths] : document_layouts()) {
      const std::string tag = impl + (ragged ? " ragged " : " ") + dims({cs.b, cs.t, cs.h, cs.kv, cs.hd}) + " " + name;
      const auto [fwd_cudnn, bwd_cudnn] =
          compare_attention(dev, cs, document_positions(cs.b, cs.t, lengths), tag, ragged);
      if (!ragged || impl == "kernel") {
        EXPECT_FALSE(fwd_cudnn || bwd_cudnn) << tag;
      } else if (cs.hd == 128 && name != "documents of one token") {
        EXPECT_TRUE(fwd_cudnn) << tag << ": cuDNN did not run the forward (see the log for why)";
        EXPECT_EQ(bwd_cudnn, impl != "cudnn-forward") << tag << ": backward path";
      }
    }
  }
}

// cuDNN's fused attention (the default path; the kernel where cuDNN cannot run a shape).
TEST(CudaOps, Attention) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  attention_vs_cpu("cudnn");
}

// cuDNN's forward with the kernel's backward, which reads cuDNN's out and lse.
TEST(CudaOps, AttentionCudnnForward) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  attention_vs_cpu("cudnn-forward");
}

// The mma.sync kernel: the path of GPUs and shapes cuDNN does not take.
TEST(CudaOps, AttentionKernel) {
  REQUIRE_GPU();
  attention_vs_cpu("kernel");
}

// Past cuDNN's dP bound (ops/attention_scratch.h; here 3 x 48 heads x 4,096^2 x 2 bytes =
// 4.5 GiB, over 4 GiB) the default path's backward runs cuDNN's non-deterministic algorithm
// and cudnn-deterministic's the kernel, each within the scratch the plan counts, after
// cuDNN's forward: all against the CPU reference.
TEST(CudaOps, AttentionPastTheDpBound) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  const Case cs{3, 4096, 48, 8, 32};
  ASSERT_FALSE(cudnn_backward_within_bound(cs.b, cs.t, cs.h));
  const auto [fwd, bwd] = compare_attention(gpu_attention("cudnn"), cs, {}, "cudnn past the dP bound");
  EXPECT_TRUE(fwd && bwd) << "the default path past the bound: cuDNN's forward and non-deterministic backward";
  const auto [fwd_det, bwd_det] =
      compare_attention(gpu_attention("cudnn-deterministic"), cs, {}, "cudnn-deterministic past the dP bound");
  EXPECT_TRUE(fwd_det) << "cuDNN's forward";
  EXPECT_FALSE(bwd_det) << "cudnn-deterministic ran cuDNN's backward with a dP over the bound";
}

TEST(CudaOps, AttentionDocumentsKernel) {
  REQUIRE_GPU();
  attention_documents_vs_cpu("kernel", false);
  attention_documents_vs_cpu("kernel", true);
}

// The default path with packed documents, given their positions alone (the kernel).
TEST(CudaOps, AttentionDocuments) {
  REQUIRE_GPU();
  attention_documents_vs_cpu("cudnn", false);
}

// The default path with packed documents and their lengths: cuDNN's ragged forward and
// deterministic backward, reading and writing lse in the kernel's (B, H, T) layout.
TEST(CudaOps, AttentionDocumentsCudnnRagged) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  attention_documents_vs_cpu("cudnn", true);
}

// cuDNN's ragged forward with the kernel's backward: the kernel reads the lse cuDNN wrote.
TEST(CudaOps, AttentionDocumentsCudnnRaggedForward) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  attention_documents_vs_cpu("cudnn-forward", true);
}

// A micro-batch of chat-like documents (1-30 in 2048 tokens, Qwen3-1.7B's heads) stays on
// cuDNN: few groups, each within the memory plan's bound; the scratch it takes is printed.
TEST(CudaOps, AttentionChatBinsStayOnCudnn) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  const Case cs{1, 2048, 16, 8, 128};
  const cuda::AttentionShape s{cs.b, cs.t, cs.h, cs.kv, static_cast<int>(cs.hd)};
  std::string why;
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  const auto dnn =
      cuda::CudnnAttention::create(nullptr, prop.major * 10 + prop.minor, cuda::AttentionImpl::kCudnn, &why);
  ASSERT_TRUE(dnn) << why;
  for (const std::vector<int64_t>& lengths : std::vector<std::vector<int64_t>>{
           {2048}, {1500, 548}, {1400, 500, 148}, {900, 700, 300, 148}, {620, 480, 300, 250, 200, 198},
           {300, 250, 200, 180, 160, 150, 140, 120, 110, 100, 90, 80, 70, 60, 50, 40},
           std::vector<int64_t>(30, 68)}) {
    const std::vector<int32_t> pos = document_positions(cs.b, cs.t, lengths);
    const std::vector<RaggedGroup> groups =
        ragged_groups(document_lengths(pos), cs.b, cs.t, cs.h, cs.kv, static_cast<int>(cs.hd));
    std::string shape;
    for (const RaggedGroup& g : groups) shape += cat(" ", g.entries, "x", g.padded);
    const std::string tag = cat(lengths.size(), " documents, groups", shape);
    const auto [fwd_cudnn, bwd_cudnn] = compare_attention(gpu_attention("cudnn"), cs, pos, tag, true);
    EXPECT_TRUE(fwd_cudnn && bwd_cudnn) << tag;
    const int64_t fwd = dnn->ragged_workspace(s, groups, false), bwd = dnn->ragged_workspace(s, groups, true);
    std::printf("[scratch] %-40s forward %.1f MiB, backward %.1f MiB; dense 1 x 2048: %.1f MiB, bound %.1f MiB\n",
                tag.c_str(), fwd / 1048576.0, bwd / 1048576.0, dnn->backward_workspace(s) / 1048576.0,
                attention_scratch_bytes(cs.b, cs.t, cs.h, cs.kv, cs.hd) / 1048576.0);
  }
}

// qk-norm + RoPE with packed documents' positions (the angles of each token's position in
// its document) against the CPU reference, forward and backward; a kernel that ignored the
// positions would give the CPU's result without them, which is far off.
TEST(CudaOps, QkNormRopeByPosition) {
  REQUIRE_GPU();
  const int64_t B = 2, T = 130, H = 16, KV = 8, hd = 128, heads = H + 2 * KV, rows = B * T, n = rows * heads * hd;
  Ids pos(document_positions(B, T, document_layouts()[2].second));
  Buf cos({T, hd / 2}, DType::kF32, randn(T * hd / 2, 61)), sin({T, hd / 2}, DType::kF32, randn(T * hd / 2, 62));
  Buf in({rows, heads, hd}, DType::kBF16, randn(n, 63, 1.5f));
  Buf q_w({hd}, DType::kBF16, randn(hd, 64)), k_w({hd}, DType::kBF16, randn(hd, 65));
  Buf out({rows, heads, hd}, DType::kBF16, nans(n)), rstd({rows, H + KV}, DType::kF32, nans(rows * (H + KV)));
  cpu().qk_norm_rope_forward(out.c(), rstd.c(), in.c(), q_w.c(), k_w.c(), cos.c(), sin.c(), H, KV, 1e-6f, pos.c());
  gpu().qk_norm_rope_forward(out.g(), rstd.g(), in.g(), q_w.g(), k_w.g(), cos.g(), sin.g(), H, KV, 1e-6f, pos.g());
  check("qk_norm_rope_forward by position out", out, kOut1);
  std::vector<float> in_order(static_cast<size_t>(n));
  cpu().qk_norm_rope_forward(Tensor(in_order.data(), DType::kF32, {rows, heads, hd}, Device::kCPU), rstd.c(), in.c(),
                             q_w.c(), k_w.c(), cos.c(), sin.c(), H, KV, 1e-6f);
  const std::vector<double> got = out.got(), unpositioned(in_order.begin(), in_order.end());
  EXPECT_GT(testing::rel_l2(got.data(), unpositioned.data(), got.size()), 0.1) << "the positions were ignored";
  Buf dout({rows, heads, hd}, DType::kBF16, randn(n, 66)), din({rows, heads, hd}, DType::kBF16, nans(n));
  Buf dq_w({hd}, DType::kF32, randn(hd, 67)), dk_w({hd}, DType::kF32, randn(hd, 68));
  cpu().qk_norm_rope_backward(din.c(), dq_w.c(), dk_w.c(), dout.c(), in.c(), q_w.c(), k_w.c(), rstd.c(), cos.c(),
                              sin.c(), H, KV, true, pos.c());
  gpu().qk_norm_rope_backward(din.g(), dq_w.g(), dk_w.g(), dout.g(), in.g(), q_w.g(), k_w.g(), rstd.g(), cos.g(),
                              sin.g(), H, KV, true, pos.g());
  check("qk_norm_rope_backward by position din", din, kOut1);
  check("qk_norm_rope_backward by position dq_w", dq_w, kF32);
  check("qk_norm_rope_backward by position dk_w", dk_w, kF32);
}

TEST(CudaOps, AttentionImplIsChecked) {
  REQUIRE_GPU();
  try {
    gpu_attention("fastest");
    ADD_FAILURE() << "ANVIL_ATTENTION=fastest was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
  }
}

// Attention forward and backward give identical bits when run again on the same inputs, on
// one path (cuDNN's deterministic backward, the kernel), at a goal shape, whole sequences
// or (documents) the many-documents layout, given its positions alone or (ragged) its lengths too.
void attention_deterministic(const std::string& impl, bool documents, bool ragged = false) {
  const int64_t B = 2, T = 1024, H = 16, KV = 8, hd = 128, heads = H + 2 * KV;
  Buf qkv({B, T, heads, hd}, DType::kBF16, randn(B * T * heads * hd, 81));
  Buf dout({B, T, H, hd}, DType::kBF16, randn(B * T * H * hd, 82));
  const std::vector<int32_t> host_positions = document_positions(B, T, document_layouts()[2].second);
  Ids pos(host_positions);
  const Documents positions = !documents ? Documents()
                              : ragged   ? Documents(pos.g(), document_lengths(host_positions))
                                         : Documents(pos.g());
  const cuda::CudnnAttentionCounts before = cuda::cudnn_attention_counts();
  Ops& dev = gpu_attention(impl);
  std::vector<double> first[3];
  for (int run = 0; run < 3; ++run) {
    Buf out({B, T, H, hd}, DType::kBF16, nans(B * T * H * hd)), lse({B, H, T}, DType::kF32, nans(B * H * T));
    Buf dqkv({B, T, heads, hd}, DType::kBF16, nans(B * T * heads * hd));
    dev.attention_forward(out.g(), lse.g(), qkv.g(), H, KV, positions);
    dev.attention_backward(dqkv.g(), dout.g(), qkv.g(), out.g(), lse.g(), H, KV, positions);
    dev.runtime().synchronize();
    if (run == 0) {
      first[0] = out.got();
      first[1] = lse.got();
      first[2] = dqkv.got();
    } else {
      EXPECT_TRUE(first[0] == out.got()) << impl << " attention_forward out, run " << run;
      EXPECT_TRUE(first[1] == lse.got()) << impl << " attention_forward lse, run " << run;
      EXPECT_TRUE(first[2] == dqkv.got()) << impl << " attention_backward dqkv, run " << run;
    }
  }
  if (ragged) EXPECT_EQ(cuda::cudnn_attention_counts().backward - before.backward, 3) << "cuDNN's ragged backward";
}

TEST(CudaOps, AttentionDeterministicCudnn) {
  REQUIRE_GPU();
  REQUIRE_CUDNN();
  attention_deterministic("cudnn", false);
  attention_deterministic("cudnn", true);
  attention_deterministic("cudnn", true, true);
}

TEST(CudaOps, AttentionDeterministicKernel) {
  REQUIRE_GPU();
  attention_deterministic("kernel", false);
  attention_deterministic("kernel", true);
}

}  // namespace
}  // namespace anvil
