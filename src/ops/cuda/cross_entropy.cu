// Fused output projection + cross-entropy, chunk by chunk of rows:
//   1. logits (rows, V) fp32 = h_chunk . w^T                      (cuBLASLt)
//   2. one block per row: lse by an online max/sum, the row's loss, and
//      dlogits = (softmax - onehot(target)) * loss_scale in bf16   (this file)
//   3. dh_chunk = dlogits . w;  dw += dlogits^T . h_chunk          (cuBLASLt, beta 0 / 1)
// The bf16 dlogits overwrite the fp32 logits in place, row r's bf16 values at the start of
// its own fp32 row (so the bf16 matrix has row stride 2V). The in-place write is safe
// because the row is swept in tiles: a tile is read into registers, a barrier passes, then
// its bf16 values are written; bf16 element j lands in fp32 element j/2 <= j, which has
// been read already. So a chunk needs 4 bytes per logit, nothing more.
// Per-row losses go to a vector and are summed at the end in a fixed order (deterministic).
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

namespace {
constexpr int kThreads = 512;
constexpr int kTile = 4;  // values per thread held in registers across the in-place barrier

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

static __global__ void ce_softmax_grad_kernel(float* logits, float* row_loss, const int32_t* targets,
                                              int64_t vocab, float loss_scale) {
  float* row = logits + blockIdx.x * vocab;
  const int32_t tgt = targets[blockIdx.x];
  const bool valid = tgt >= 0 && tgt < vocab;
  const float target_logit = valid ? row[tgt] : 0.0f;
  float m = -INFINITY, s = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = row[j];
    if (x > m) {
      s = s * expf(m - x) + 1.0f;
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  const float row_max = block_max(m);
  s = m == -INFINITY ? 0.0f : s * expf(m - row_max);
  const float lse = row_max + logf(block_sum(s));
  if (threadIdx.x == 0) row_loss[blockIdx.x] = valid ? lse - target_logit : 0.0f;
  const float scale = valid ? loss_scale : 0.0f;
  __nv_bfloat16* grad = reinterpret_cast<__nv_bfloat16*>(row);
  for (int64_t base = 0; base < vocab; base += static_cast<int64_t>(blockDim.x) * kTile) {
    float v[kTile];
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      const int64_t j = base + t * blockDim.x + threadIdx.x;
      v[t] = j < vocab ? (expf(row[j] - lse) - (j == tgt ? 1.0f : 0.0f)) * scale : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      const int64_t j = base + t * blockDim.x + threadIdx.x;
      if (j < vocab) grad[j] = __float2bfloat16_rn(v[t]);
    }
    __syncthreads();
  }
}

int64_t cross_entropy_chunk_rows(int64_t n, int64_t vocab) {
  int64_t rows = static_cast<int64_t>(kCrossEntropyChunkBytes / (static_cast<size_t>(vocab) * sizeof(float)));
  if (rows >= 64) rows = rows / 64 * 64;
  if (rows < 1) rows = 1;
  return rows < n ? rows : n;
}

size_t cross_entropy_scratch_bytes(int64_t n, int64_t vocab) {
  const size_t chunk = static_cast<size_t>(cross_entropy_chunk_rows(n, vocab)) * static_cast<size_t>(vocab) * 4;
  return round_up(chunk, 256) + static_cast<size_t>(n) * sizeof(float);
}

void cross_entropy_forward_backward(const CrossEntropyArgs& a, void* scratch, Gemm& gemm, cudaStream_t stream) {
  if (a.n == 0) return;
  const int64_t chunk = cross_entropy_chunk_rows(a.n, a.vocab);
  float* logits = static_cast<float*>(scratch);
  float* row_loss = reinterpret_cast<float*>(static_cast<char*>(scratch) +
                                             round_up(static_cast<size_t>(chunk) * static_cast<size_t>(a.vocab) * 4, 256));
  const auto* dlogits = reinterpret_cast<const __nv_bfloat16*>(logits);
  for (int64_t r0 = 0; r0 < a.n; r0 += chunk) {
    const int64_t rows = a.n - r0 < chunk ? a.n - r0 : chunk;
    const __nv_bfloat16* h = a.h + r0 * a.cols;
    gemm.run(logits, CUDA_R_32F, a.vocab, {h, a.cols, false}, {a.w, a.cols, true}, rows, a.vocab, a.cols, 0.0f,
             nullptr);
    if (a.logits)
      CUDA_CHECK(cudaMemcpyAsync(a.logits + r0 * a.vocab, logits, static_cast<size_t>(rows * a.vocab) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream));
    ce_softmax_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, row_loss + r0,
                                                                                  a.targets + r0, a.vocab, a.loss_scale);
    CUDA_CHECK_LAUNCH();
    if (!a.dh) continue;  // the loss only (evaluation)
    gemm.run(a.dh + r0 * a.cols, CUDA_R_16BF, a.cols, {dlogits, 2 * a.vocab, false}, {a.w, a.cols, false}, rows,
             a.cols, a.vocab, 0.0f, nullptr);
    gemm.run(a.dw, CUDA_R_32F, a.cols, {dlogits, 2 * a.vocab, true}, {h, a.cols, false}, a.vocab, a.cols, rows, 1.0f,
             nullptr);
  }
  sum_add(a.loss_sum, row_loss, a.n, stream);
}

}  // namespace anvil::cuda
