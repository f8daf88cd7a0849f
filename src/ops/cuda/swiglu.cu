// SwiGLU forward and backward, computed in fp32 and rounded once to bf16.
//
// silu(g) = g * sigmoid(g); d/dg [silu(g) u] = u * sigmoid(g) * (1 + g * (1 - sigmoid(g))).
// Each thread handles VEC consecutive columns of one row (VEC = 8 when I is a multiple of 8
// and the buffers are 16-byte aligned: the gate and up halves of a row are then aligned too).
// Given an amax, the forward also takes the largest |element| of the bf16 output it stores.
#include "core/cuda/check.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/swiglu.h"

namespace anvil::cuda {

namespace {
constexpr int kThreads = 256;
}

// The forward's value, as one expression so that both kernels round it alike.
__device__ __forceinline__ float swiglu(float g, float up) { return g / (1.0f + __expf(-g)) * up; }

template <int VEC>
static __global__ void swiglu_fwd_kernel(__nv_bfloat16* out, float* amax, const __nv_bfloat16* gate_up, int64_t rows,
                                         int64_t inter) {
  float m = 0.0f;
  const int64_t per_row = inter / VEC, units = rows * per_row;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = u / per_row, c = (u % per_row) * VEC;
    float g[VEC], up[VEC];
    load_bf16<VEC>(gate_up + r * 2 * inter + c, g);
    load_bf16<VEC>(gate_up + r * 2 * inter + inter + c, up);
#pragma unroll
    for (int i = 0; i < VEC; ++i) g[i] = swiglu(g[i], up[i]);
    store_bf16<VEC>(out + r * inter + c, g);
    if (amax) m = amax_bf16(m, g);
  }
  if (amax) block_amax_to(amax, m);
}

template <int VEC>
static __global__ void swiglu_bwd_kernel(__nv_bfloat16* dgate_up, __nv_bfloat16* act, const __nv_bfloat16* dout,
                                         const __nv_bfloat16* gate_up, int64_t rows, int64_t inter) {
  const int64_t per_row = inter / VEC, units = rows * per_row;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = u / per_row, c = (u % per_row) * VEC;
    float g[VEC], up[VEC], d[VEC];
    load_bf16<VEC>(gate_up + r * 2 * inter + c, g);
    load_bf16<VEC>(gate_up + r * 2 * inter + inter + c, up);
    load_bf16<VEC>(dout + r * inter + c, d);
    if (act) {
      float a[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) a[i] = swiglu(g[i], up[i]);
      store_bf16<VEC>(act + r * inter + c, a);
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float sig = 1.0f / (1.0f + __expf(-g[i]));
      const float silu = g[i] * sig;
      const float dg = d[i] * up[i] * sig * (1.0f + g[i] * (1.0f - sig));
      up[i] = d[i] * silu;
      g[i] = dg;
    }
    store_bf16<VEC>(dgate_up + r * 2 * inter + c, g);
    store_bf16<VEC>(dgate_up + r * 2 * inter + inter + c, up);
  }
}


void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int64_t rows, int64_t inter,
                    cudaStream_t stream, float* amax) {
  if (amax) CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (rows * inter == 0) return;
  if (inter % 8 == 0 && aligned16(out) && aligned16(gate_up))
    swiglu_fwd_kernel<8><<<grid_stride_blocks(rows * inter / 8, kThreads), kThreads, 0, stream>>>(out, amax, gate_up,
                                                                                                   rows, inter);
  else
    swiglu_fwd_kernel<1><<<grid_stride_blocks(rows * inter, kThreads), kThreads, 0, stream>>>(out, amax, gate_up, rows,
                                                                                               inter);
  CUDA_CHECK_LAUNCH();
}

void swiglu_backward(__nv_bfloat16* dgate_up, __nv_bfloat16* act, const __nv_bfloat16* dout,
                     const __nv_bfloat16* gate_up, int64_t rows, int64_t inter, cudaStream_t stream) {
  if (rows * inter == 0) return;
  if (inter % 8 == 0 && aligned16(dgate_up) && aligned16(dout) && aligned16(gate_up) && (!act || aligned16(act)))
    swiglu_bwd_kernel<8><<<grid_stride_blocks(rows * inter / 8, kThreads), kThreads, 0, stream>>>(
        dgate_up, act, dout, gate_up, rows, inter);
  else
    swiglu_bwd_kernel<1><<<grid_stride_blocks(rows * inter, kThreads), kThreads, 0, stream>>>(
        dgate_up, act, dout, gate_up, rows, inter);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
