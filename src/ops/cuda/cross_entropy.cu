// Fused output projection + cross-entropy, block by block of rows (ops/cross_entropy_chunks.h
// says how the rows are cut). For each block of grad_rows rows:
//   for each chunk of logit_rows rows of the block:
//     1. logits (rows, V) fp32 = h_chunk . w^T                        (cuBLASLt)
//     2. one CUDA block per row: lse by an online max/sum, the row's loss, and
//        dlogits = (softmax - onehot(target)) * loss_scale in bf16 into the block's rows
//   3. dh_block = dlogits . w;  dw += dlogits^T . h_block             (cuBLASLt; the first
//      block's dw GEMM has beta 0 when the caller overwrites dw)
// so dw is read and written once per block, and the dh GEMM has the block's rows, not a
// chunk's. Per-row losses go to a vector and are summed at the end in a fixed order
// (deterministic). With row weights, a row's loss in that vector and its dlogits are scaled by
// its weight; with row_losses, its unweighted loss is written there too. The loss alone (no dh, no dw) skips the dlogits and both GEMMs.
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cross_entropy_chunks.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

namespace {
constexpr int kThreads = 1024;

__device__ __forceinline__ void online_add(float x, float& m, float& s) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}
}  // namespace

// One CUDA block per row. VEC 4: the row moves as float4 (vocab a multiple of 4, aligned
// rows), else one float at a time. grad: the row's bf16 dlogits, or null (the loss only).
template <int VEC>
static __global__ void ce_softmax_grad_kernel(const float* logits, __nv_bfloat16* grad, int64_t grad_ld,
                                              float* row_loss, const int32_t* targets, int64_t vocab,
                                              float loss_scale, const float* row_weights, float* row_losses) {
  const float* row = logits + blockIdx.x * vocab;
  const int32_t tgt = targets[blockIdx.x];
  const bool valid = tgt >= 0 && tgt < vocab;
  const float target_logit = valid ? row[tgt] : 0.0f;
  float m = -INFINITY, s = 0.0f;
  for (int64_t j = threadIdx.x * VEC; j < vocab; j += static_cast<int64_t>(blockDim.x) * VEC) {
    if constexpr (VEC == 4) {
      const float4 x = *reinterpret_cast<const float4*>(row + j);
      online_add(x.x, m, s);
      online_add(x.y, m, s);
      online_add(x.z, m, s);
      online_add(x.w, m, s);
    } else {
      online_add(row[j], m, s);
    }
  }
  const float row_max = block_max(m);
  s = m == -INFINITY ? 0.0f : s * expf(m - row_max);
  const float lse = row_max + logf(block_sum(s));
  const float weight = row_weights ? row_weights[blockIdx.x] : 1.0f;
  const float loss = valid ? lse - target_logit : 0.0f;
  if (threadIdx.x == 0) {
    row_loss[blockIdx.x] = row_weights ? weight * loss : loss;
    if (row_losses) row_losses[blockIdx.x] = loss;
  }
  if (!grad) return;
  const float scale = valid ? (row_weights ? weight * loss_scale : loss_scale) : 0.0f;
  __nv_bfloat16* g = grad + blockIdx.x * grad_ld;
  for (int64_t j = threadIdx.x * VEC; j < vocab; j += static_cast<int64_t>(blockDim.x) * VEC) {
    if constexpr (VEC == 4) {
      const float4 x = *reinterpret_cast<const float4*>(row + j);
      const float v[4] = {x.x, x.y, x.z, x.w};
      __nv_bfloat16 o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) o[i] = __float2bfloat16_rn((expf(v[i] - lse) - (j + i == tgt ? 1.0f : 0.0f)) * scale);
      reinterpret_cast<__nv_bfloat162*>(g + j)[0] = __nv_bfloat162{o[0], o[1]};
      reinterpret_cast<__nv_bfloat162*>(g + j)[1] = __nv_bfloat162{o[2], o[3]};
    } else {
      g[j] = __float2bfloat16_rn((expf(row[j] - lse) - (j == tgt ? 1.0f : 0.0f)) * scale);
    }
  }
}

void cross_entropy_forward_backward(const CrossEntropyArgs& a, void* scratch, Gemm& gemm, cudaStream_t stream) {
  if (a.n == 0) {
    if (a.dw && !a.accumulate_dw)
      CUDA_CHECK(cudaMemsetAsync(a.dw, 0, static_cast<size_t>(a.vocab * a.cols) * sizeof(float), stream));
    return;
  }
  const CrossEntropyChunks c = cross_entropy_chunks(a.n, a.vocab);
  float* logits = static_cast<float*>(scratch);
  auto* dlogits = reinterpret_cast<__nv_bfloat16*>(static_cast<char*>(scratch) + c.logits_bytes);
  float* row_loss = reinterpret_cast<float*>(static_cast<char*>(scratch) + c.logits_bytes + c.grad_bytes);
  const bool vec = a.vocab % 4 == 0 && aligned16(scratch);  // every logits row 16-byte aligned; grad_ld % 8 == 0
  for (int64_t b0 = 0; b0 < a.n; b0 += c.grad_rows) {
    const int64_t block_rows = a.n - b0 < c.grad_rows ? a.n - b0 : c.grad_rows;
    for (int64_t r0 = b0; r0 < b0 + block_rows; r0 += c.logit_rows) {
      const int64_t rows = b0 + block_rows - r0 < c.logit_rows ? b0 + block_rows - r0 : c.logit_rows;
      gemm.run(logits, CUDA_R_32F, a.vocab, {a.h + r0 * a.cols, a.cols, false}, {a.w, a.cols, true}, rows, a.vocab,
               a.cols, 0.0f, nullptr);
      if (a.logits)
        CUDA_CHECK(cudaMemcpyAsync(a.logits + r0 * a.vocab, logits,
                                   static_cast<size_t>(rows * a.vocab) * sizeof(float), cudaMemcpyDeviceToDevice,
                                   stream));
      auto kernel = vec ? ce_softmax_grad_kernel<4> : ce_softmax_grad_kernel<1>;
      kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          logits, a.dh ? dlogits + (r0 - b0) * c.grad_ld : nullptr, c.grad_ld, row_loss + r0, a.targets + r0,
          a.vocab, a.loss_scale, a.row_weights ? a.row_weights + r0 : nullptr,
          a.row_losses ? a.row_losses + r0 : nullptr);
      CUDA_CHECK_LAUNCH();
    }
    if (!a.dh) continue;  // the loss only (evaluation)
    const __nv_bfloat16* h = a.h + b0 * a.cols;
    gemm.run(a.dh + b0 * a.cols, CUDA_R_16BF, a.cols, {dlogits, c.grad_ld, false}, {a.w, a.cols, false}, block_rows,
             a.cols, a.vocab, 0.0f, nullptr);
    const bool first = b0 == 0 && !a.accumulate_dw;  // the first block overwrites dw
    gemm.run(a.dw, CUDA_R_32F, a.cols, {dlogits, c.grad_ld, true}, {h, a.cols, false}, a.vocab, a.cols, block_rows,
             first ? 0.0f : 1.0f, nullptr);
  }
  sum_add(a.loss_sum, row_loss, a.n, stream);
}

}  // namespace anvil::cuda
