// The mixture-of-experts kernels of the CUDA backend (ops.h's moe_* ops): the router and its
// backward, the load-balancing loss, the sort by expert, the gather of the experts' rows, the
// combine, and their backward. Every sum is in a fixed order (no atomics), so a run repeats
// bit for bit. The experts' GEMMs are moe_ops.cpp's (cuBLAS's grouped GEMM, one call per op).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

// The most experts the router kernels take (a warp per token, 32 per lane).
constexpr int64_t kMaxRouterExperts = 1024;

// probs (N, E) F32 = softmax of logits (N, E) in fp32; topk_idx, topk_w (N, K) the K largest
// (ties: the lower expert), their weights renormalised when `norm` and rounded to bf16 (as
// transformers casts them to the compute dtype); stats (2, E) F32, unless null, the count of
// assignments and the sum of probs per expert.
void moe_router_forward(float* probs, int32_t* topk_idx, float* topk_w, float* stats, const __nv_bfloat16* logits,
                        int64_t N, int64_t E, int64_t K, bool norm, cudaStream_t stream);
// dlogits (N, E) bf16 from dtopk_w (N, K), through the renormalisation and the softmax;
// aux_grad (E), unless null, added to every token's d loss / d probs.
void moe_router_backward(__nv_bfloat16* dlogits, const float* dtopk_w, const float* probs, const int32_t* topk_idx,
                         const float* topk_w, const float* aux_grad, int64_t N, int64_t E, int64_t K, bool norm,
                         cudaStream_t stream);
// ops.h's moe_aux_loss over stats (Ls, 2, E), one block.
void moe_aux_loss(float* loss_sum, float* aux_grad, const float* stats, int64_t Ls, int64_t E, int64_t tokens,
                  float coef, float loss_weight, cudaStream_t stream);

// The scratch moe_sort needs for n assignments (cub's radix sort and its keys and values).
size_t moe_sort_scratch_bytes(int64_t n, int64_t E);
// order, rows (n) and offsets (E + 1) of ops.h's moe_sort: a stable radix sort of the
// assignments by expert.
void moe_sort(int32_t* order, int32_t* rows, int32_t* offsets, const int32_t* topk_idx, int64_t n, int64_t E,
              void* scratch, cudaStream_t stream);

// xs (R, C) row r = x row order[r] / top_k.
void moe_gather(__nv_bfloat16* xs, const __nv_bfloat16* x, const int32_t* order, int64_t R, int64_t C, int top_k,
                cudaStream_t stream);
// dx (N, C) = (+=) the sum over j of dxs row rows[t * K + j], in order of j, in fp32.
void moe_gather_backward(__nv_bfloat16* dx, const __nv_bfloat16* dxs, const int32_t* rows, int64_t N, int64_t C,
                         int64_t K, bool accumulate, cudaStream_t stream);
// out (N, C) = sum over j of topk_w[t, j] * ys row rows[t * K + j], in fp32, rounded once.
void moe_combine_forward(__nv_bfloat16* out, const __nv_bfloat16* ys, const int32_t* rows, const float* topk_w,
                         int64_t N, int64_t C, int64_t K, cudaStream_t stream);
// dys rows = topk_w * dout; dtopk_w (N, K) = dout . ys row, in fp32.
void moe_combine_backward(__nv_bfloat16* dys, float* dtopk_w, const __nv_bfloat16* dout, const __nv_bfloat16* ys,
                          const int32_t* rows, const float* topk_w, int64_t N, int64_t C, int64_t K,
                          cudaStream_t stream);

}  // namespace anvil::cuda
