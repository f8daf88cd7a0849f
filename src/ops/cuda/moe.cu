// The mixture-of-experts kernels (moe.h). Routing runs a warp per token (E at most
// kMaxRouterExperts; 128 and top 8 for Qwen3-30B-A3B); per-expert sums run a block per
// expert over the tokens in a fixed order; the rows' gathers and combines run a block per
// row. The sort by expert is cub's stable radix sort of the assignments' experts.
#include <cub/device/device_radix_sort.cuh>

#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/moe.h"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

constexpr int kNone = 0x7fffffff;  // no expert yet

// A warp per token: lane l holds the probabilities of experts l, l + 32, ... (kPer of them, so
// E <= 32 kPer), the logits read and the probabilities written a row at a time. The top K
// are K rounds of a warp-wide argmax over the experts not yet taken: each lane's best (its
// experts in increasing order, so the first of equals is the lower expert), then the larger
// of two lanes' or, on a tie, the lower expert. An expert is taken on the first round that
// finds no better one, so a NaN row still yields K distinct experts.
template <int kPer>
__global__ void router_forward_kernel(float* probs, int32_t* topk_idx, float* topk_w, const __nv_bfloat16* logits,
                                      int64_t N, int64_t E, int64_t K, bool norm) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; t < N; t += warps) {
    const __nv_bfloat16* l = logits + t * E;
    float v[kPer], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t e = lane + 32 * i;
      v[i] = e < E ? __bfloat162float(l[e]) : -INFINITY;
      mx = fmaxf(mx, v[i]);
    }
    mx = warp_max(mx);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[i] = lane + 32 * i < E ? __expf(v[i] - mx) : 0.0f;
      sum += v[i];
    }
    sum = warp_sum(sum);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[i] /= sum;
      if (lane + 32 * i < E) probs[t * E + lane + 32 * i] = v[i];
    }
    int32_t* idx = topk_idx + t * K;
    float* w = topk_w + t * K;
    uint32_t taken = 0;
    float picked = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      float bv = -INFINITY;
      int be = kNone;
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        if (lane + 32 * i < E && !(taken >> i & 1u) && (be == kNone || v[i] > bv)) {
          bv = v[i];
          be = lane + 32 * i;
        }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oe = __shfl_xor_sync(0xffffffffu, be, o);
        if (oe != kNone && (be == kNone || ov > bv || (ov == bv && oe < be))) {
          bv = ov;
          be = oe;
        }
      }
      if ((be & 31) == lane) taken |= 1u << (be >> 5);
      if (lane == 0) {
        idx[j] = be;
        w[j] = bv;
      }
      picked += bv;
    }
    if (lane == 0)
      for (int64_t j = 0; j < K; ++j) w[j] = round_bf16(norm ? w[j] / picked : w[j]);
  }
}

// stats (2, E): block e counts expert e's assignments and sums its probabilities.
__global__ void router_stats_kernel(float* stats, const float* probs, const int32_t* topk_idx, int64_t N, int64_t E,
                                    int64_t K) {
  const int64_t e = blockIdx.x;
  float count = 0.0f, prob = 0.0f;
  for (int64_t t = threadIdx.x; t < N; t += blockDim.x) {
    for (int64_t j = 0; j < K; ++j) count += topk_idx[t * K + j] == e ? 1.0f : 0.0f;
    prob += probs[t * E + e];
  }
  count = block_sum(count);
  prob = block_sum(prob);
  if (threadIdx.x == 0) {
    stats[e] = count;
    stats[E + e] = prob;
  }
}

// A warp per token, lane l for experts l, l + 32, ...: dp_e = aux_grad_e plus, for a chosen e,
// d w_j / d p_j's term (through w_j = p_j / S when renormalised); dlogits_e = p_e (dp_e - s)
// with s = sum_e p_e dp_e.
__global__ void router_backward_kernel(__nv_bfloat16* dlogits, const float* dtopk_w, const float* probs,
                                       const int32_t* topk_idx, const float* topk_w, const float* aux_grad, int64_t N,
                                       int64_t E, int64_t K, bool norm) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; t < N; t += warps) {
    const float* p = probs + t * E;
    const int32_t* idx = topk_idx + t * K;
    const float *dw = dtopk_w + t * K, *w = topk_w + t * K;
    float picked = 0.0f, dot_w = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      picked += p[idx[j]];
      dot_w += dw[j] * w[j];
    }
    float s = 0.0f;
    if (aux_grad) {
      for (int64_t e = lane; e < E; e += 32) s += p[e] * aux_grad[e];
      s = warp_sum(s);
    }
    for (int64_t j = 0; j < K; ++j) s += p[idx[j]] * (norm ? (dw[j] - dot_w) / picked : dw[j]);
    for (int64_t e = lane; e < E; e += 32) {
      float dp = aux_grad ? aux_grad[e] : 0.0f;
      for (int64_t j = 0; j < K; ++j)
        if (idx[j] == e) dp += norm ? (dw[j] - dot_w) / picked : dw[j];
      dlogits[t * E + e] = __float2bfloat16_rn(p[e] * (dp - s));
    }
  }
}

__global__ void aux_loss_kernel(float* loss_sum, float* aux_grad, const float* stats, int64_t Ls, int64_t E,
                                int64_t tokens, float coef, float loss_weight) {
  const float rows = static_cast<float>(Ls) * static_cast<float>(tokens);
  float aux = 0.0f;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
    float count = 0.0f, prob = 0.0f;
    for (int64_t l = 0; l < Ls; ++l) {
      count += stats[l * 2 * E + e];
      prob += stats[(l * 2 + 1) * E + e];
    }
    aux += (count / rows) * (prob / rows);
    aux_grad[e] = coef * static_cast<float>(E) * count / (rows * rows);
  }
  aux = block_sum(aux);
  if (threadIdx.x == 0) loss_sum[0] += coef * aux * static_cast<float>(E) * loss_weight;
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v[i] = static_cast<int32_t>(i);
}

// offsets[e] = the first sorted row whose expert is e or later (n for none); rows[order[r]] = r.
__global__ void offsets_rows_kernel(int32_t* offsets, int32_t* rows, const int32_t* keys, const int32_t* order,
                                    int64_t n, int64_t E) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r <= n;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t prev = r == 0 ? -1 : keys[r - 1], cur = r == n ? E : keys[r];
    for (int64_t e = prev + 1; e <= cur && e <= E; ++e) offsets[e] = static_cast<int32_t>(r);
    if (r < n) rows[order[r]] = static_cast<int32_t>(r);
  }
}

__global__ void gather_kernel(__nv_bfloat16* xs, const __nv_bfloat16* x, const int32_t* order, int64_t C, int top_k) {
  const int64_t r = blockIdx.x, t = order[r] / top_k;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) xs[r * C + c] = x[t * C + c];
}

__global__ void gather_backward_kernel(__nv_bfloat16* dx, const __nv_bfloat16* dxs, const int32_t* rows, int64_t C,
                                       int64_t K, bool accumulate) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = accumulate ? __bfloat162float(dx[t * C + c]) : 0.0f;
    for (int64_t j = 0; j < K; ++j) s += __bfloat162float(dxs[static_cast<int64_t>(rows[t * K + j]) * C + c]);
    dx[t * C + c] = __float2bfloat16_rn(s);
  }
}

__global__ void combine_forward_kernel(__nv_bfloat16* out, const __nv_bfloat16* ys, const int32_t* rows,
                                       const float* topk_w, int64_t C, int64_t K) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float s = 0.0f;
    for (int64_t j = 0; j < K; ++j)
      s += topk_w[t * K + j] * __bfloat162float(ys[static_cast<int64_t>(rows[t * K + j]) * C + c]);
    out[t * C + c] = __float2bfloat16_rn(s);
  }
}

__global__ void combine_backward_kernel(__nv_bfloat16* dys, float* dtopk_w, const __nv_bfloat16* dout,
                                        const __nv_bfloat16* ys, const int32_t* rows, const float* topk_w, int64_t C,
                                        int64_t K) {
  const int64_t t = blockIdx.x;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t r = rows[t * K + j];
    const float w = topk_w[t * K + j];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float d = __bfloat162float(dout[t * C + c]);
      dys[r * C + c] = __float2bfloat16_rn(w * d);
      dot += d * __bfloat162float(ys[r * C + c]);
    }
    dot = block_sum(dot);
    if (threadIdx.x == 0) dtopk_w[t * K + j] = dot;
  }
}

int sort_bits(int64_t E) {
  int bits = 1;
  while ((int64_t{1} << bits) < E) ++bits;
  return bits;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t cub_sort_bytes(int64_t n, int64_t E) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, sort_bits(E)));
  return bytes;
}

}  // namespace

void moe_router_forward(float* probs, int32_t* topk_idx, float* topk_w, float* stats, const __nv_bfloat16* logits,
                        int64_t N, int64_t E, int64_t K, bool norm, cudaStream_t stream) {
  const unsigned blocks = grid_stride_blocks(32 * N, kThreads);
  if (E <= 32)
    router_forward_kernel<1><<<blocks, kThreads, 0, stream>>>(probs, topk_idx, topk_w, logits, N, E, K, norm);
  else if (E <= 64)
    router_forward_kernel<2><<<blocks, kThreads, 0, stream>>>(probs, topk_idx, topk_w, logits, N, E, K, norm);
  else if (E <= 128)
    router_forward_kernel<4><<<blocks, kThreads, 0, stream>>>(probs, topk_idx, topk_w, logits, N, E, K, norm);
  else if (E <= 256)
    router_forward_kernel<8><<<blocks, kThreads, 0, stream>>>(probs, topk_idx, topk_w, logits, N, E, K, norm);
  else
    router_forward_kernel<kMaxRouterExperts / 32><<<blocks, kThreads, 0, stream>>>(probs, topk_idx, topk_w, logits, N,
                                                                                   E, K, norm);
  CUDA_CHECK_LAUNCH();
  if (!stats) return;
  router_stats_kernel<<<static_cast<unsigned>(E), kThreads, 0, stream>>>(stats, probs, topk_idx, N, E, K);
  CUDA_CHECK_LAUNCH();
}

void moe_router_backward(__nv_bfloat16* dlogits, const float* dtopk_w, const float* probs, const int32_t* topk_idx,
                         const float* topk_w, const float* aux_grad, int64_t N, int64_t E, int64_t K, bool norm,
                         cudaStream_t stream) {
  router_backward_kernel<<<grid_stride_blocks(32 * N, kThreads), kThreads, 0, stream>>>(
      dlogits, dtopk_w, probs, topk_idx, topk_w, aux_grad, N, E, K, norm);
  CUDA_CHECK_LAUNCH();
}

void moe_aux_loss(float* loss_sum, float* aux_grad, const float* stats, int64_t Ls, int64_t E, int64_t tokens,
                  float coef, float loss_weight, cudaStream_t stream) {
  aux_loss_kernel<<<1, kThreads, 0, stream>>>(loss_sum, aux_grad, stats, Ls, E, tokens, coef, loss_weight);
  CUDA_CHECK_LAUNCH();
}

size_t moe_sort_scratch_bytes(int64_t n, int64_t E) {
  return 2 * align256(static_cast<size_t>(n) * sizeof(int32_t)) + cub_sort_bytes(n, E);
}

void moe_sort(int32_t* order, int32_t* rows, int32_t* offsets, const int32_t* topk_idx, int64_t n, int64_t E,
              void* scratch, cudaStream_t stream) {
  const size_t part = align256(static_cast<size_t>(n) * sizeof(int32_t));
  int32_t* keys = static_cast<int32_t*>(scratch);
  int32_t* iota = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + part);
  void* temp = static_cast<char*>(scratch) + 2 * part;
  size_t temp_bytes = cub_sort_bytes(n, E);
  iota_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(iota, n);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, topk_idx, keys, iota, order, static_cast<int>(n), 0,
                                             sort_bits(E), stream));
  offsets_rows_kernel<<<grid_stride_blocks(n + 1, kThreads), kThreads, 0, stream>>>(offsets, rows, keys, order, n, E);
  CUDA_CHECK_LAUNCH();
}

void moe_gather(__nv_bfloat16* xs, const __nv_bfloat16* x, const int32_t* order, int64_t R, int64_t C, int top_k,
                cudaStream_t stream) {
  gather_kernel<<<static_cast<unsigned>(R), 128, 0, stream>>>(xs, x, order, C, top_k);
  CUDA_CHECK_LAUNCH();
}

void moe_gather_backward(__nv_bfloat16* dx, const __nv_bfloat16* dxs, const int32_t* rows, int64_t N, int64_t C,
                         int64_t K, bool accumulate, cudaStream_t stream) {
  gather_backward_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(dx, dxs, rows, C, K, accumulate);
  CUDA_CHECK_LAUNCH();
}

void moe_combine_forward(__nv_bfloat16* out, const __nv_bfloat16* ys, const int32_t* rows, const float* topk_w,
                         int64_t N, int64_t C, int64_t K, cudaStream_t stream) {
  combine_forward_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(out, ys, rows, topk_w, C, K);
  CUDA_CHECK_LAUNCH();
}

void moe_combine_backward(__nv_bfloat16* dys, float* dtopk_w, const __nv_bfloat16* dout, const __nv_bfloat16* ys,
                          const int32_t* rows, const float* topk_w, int64_t N, int64_t C, int64_t K,
                          cudaStream_t stream) {
  combine_backward_kernel<<<static_cast<unsigned>(N), 128, 0, stream>>>(dys, dtopk_w, dout, ys, rows, topk_w, C, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
