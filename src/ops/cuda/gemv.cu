#include "core/cuda/check.h"
#include "ops/cuda/gemv.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

constexpr int kWarps = 8;       // output columns per block
constexpr int kStep = 32 * 8;   // elements of K a warp covers per 16-byte load
constexpr int kUnroll = 4;      // loads in flight per lane

__device__ __forceinline__ void dot8(float& acc, const float (&w)[8], const __nv_bfloat16* x) {
  float xv[8];
  load_bf16<8>(x, xv);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc += w[e] * xv[e];
}

template <int M, bool F32OUT>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(void* y, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int n_cols,
                int k_len) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= n_cols) return;
  const __nv_bfloat16* wr = w + static_cast<int64_t>(n) * k_len;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  int k = lane * 8;
  for (; k + (kUnroll - 1) * kStep < k_len; k += kUnroll * kStep) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = __ldg(reinterpret_cast<const uint4*>(wr + k + u * kStep));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wv[8];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[u]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        wv[2 * i] = f.x;
        wv[2 * i + 1] = f.y;
      }
#pragma unroll
      for (int m = 0; m < M; ++m) dot8(acc[m], wv, x + static_cast<int64_t>(m) * k_len + k + u * kStep);
    }
  }
  for (; k < k_len; k += kStep) {
    float wv[8];
    load_bf16<8>(wr + k, wv);
#pragma unroll
    for (int m = 0; m < M; ++m) dot8(acc[m], wv, x + static_cast<int64_t>(m) * k_len + k);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = warp_sum(acc[m]);
  if (lane != 0) return;
  const float b = bias ? __bfloat162float(bias[n]) : 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int64_t at = static_cast<int64_t>(m) * n_cols + n;
    if constexpr (F32OUT) static_cast<float*>(y)[at] = acc[m] + b;
    else static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(acc[m] + b);
  }
}

template <int M>
void launch(void* y, bool y_f32, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int n,
            int k, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(ceil_div(n, kWarps));
  if (y_f32) gemv_kernel<M, true><<<blocks, kWarps * 32, 0, stream>>>(y, x, w, bias, n, k);
  else gemv_kernel<M, false><<<blocks, kWarps * 32, 0, stream>>>(y, x, w, bias, n, k);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool gemv_fits(int64_t m, int64_t k, const void* x, const void* w) {
  return m >= 1 && m <= kGemvMaxRows && k % 8 == 0 && k < (int64_t{1} << 30) && aligned16(x) && aligned16(w);
}

void gemv(void* y, bool y_f32, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream) {
  const int N = static_cast<int>(n), K = static_cast<int>(k);
  switch (m) {
    case 1: return launch<1>(y, y_f32, x, w, bias, N, K, stream);
    case 2: return launch<2>(y, y_f32, x, w, bias, N, K, stream);
    case 3: return launch<3>(y, y_f32, x, w, bias, N, K, stream);
    case 4: return launch<4>(y, y_f32, x, w, bias, N, K, stream);
    case 5: return launch<5>(y, y_f32, x, w, bias, N, K, stream);
    case 6: return launch<6>(y, y_f32, x, w, bias, N, K, stream);
    case 7: return launch<7>(y, y_f32, x, w, bias, N, K, stream);
    default: return launch<8>(y, y_f32, x, w, bias, N, K, stream);
  }
}

}  // namespace anvil::cuda
