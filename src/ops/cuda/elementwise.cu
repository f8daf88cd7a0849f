// Elementwise kernels: residual add and dtype conversion.
//
// Memory-bound: each element is read and written once. When every pointer is 16-byte
// aligned and n is a multiple of 8, each thread moves 8 bf16 (or 2 x 4 floats) per access;
// otherwise a scalar path handles any size and alignment (views of odd row slices).
#include "core/cuda/check.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {
constexpr int kThreads = 256;

}  // namespace

template <int VEC>
static __global__ void add_bf16_kernel(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b,
                                       int64_t units) {
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x[VEC], y[VEC];
    load_bf16<VEC>(a + u * VEC, x);
    load_bf16<VEC>(b + u * VEC, y);
#pragma unroll
    for (int i = 0; i < VEC; ++i) x[i] += y[i];
    store_bf16<VEC>(out + u * VEC, x);
  }
}

static __global__ void add_f32_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

template <int VEC>
static __global__ void f32_to_bf16_kernel(__nv_bfloat16* out, const float* in, int64_t units) {
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x[VEC];
    if constexpr (VEC == 8) {
      const float4 lo = reinterpret_cast<const float4*>(in)[2 * u];
      const float4 hi = reinterpret_cast<const float4*>(in)[2 * u + 1];
      x[0] = lo.x; x[1] = lo.y; x[2] = lo.z; x[3] = lo.w;
      x[4] = hi.x; x[5] = hi.y; x[6] = hi.z; x[7] = hi.w;
    } else {
      x[0] = in[u];
    }
    store_bf16<VEC>(out + u * VEC, x);
  }
}

template <int VEC>
static __global__ void bf16_to_f32_kernel(float* out, const __nv_bfloat16* in, int64_t units) {
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x[VEC];
    load_bf16<VEC>(in + u * VEC, x);
    if constexpr (VEC == 8) {
      reinterpret_cast<float4*>(out)[2 * u] = make_float4(x[0], x[1], x[2], x[3]);
      reinterpret_cast<float4*>(out)[2 * u + 1] = make_float4(x[4], x[5], x[6], x[7]);
    } else {
      out[u] = x[0];
    }
  }
}

void add_bf16(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int64_t n,
              cudaStream_t stream) {
  if (n == 0) return;
  if (n % 8 == 0 && aligned16(out) && aligned16(a) && aligned16(b))
    add_bf16_kernel<8><<<grid_stride_blocks(n / 8, kThreads), kThreads, 0, stream>>>(out, a, b, n / 8);
  else
    add_bf16_kernel<1><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void add_f32(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_f32_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void convert_f32_to_bf16(__nv_bfloat16* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % 8 == 0 && aligned16(out) && aligned16(in))
    f32_to_bf16_kernel<8><<<grid_stride_blocks(n / 8, kThreads), kThreads, 0, stream>>>(out, in, n / 8);
  else
    f32_to_bf16_kernel<1><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}

void convert_bf16_to_f32(float* out, const __nv_bfloat16* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % 8 == 0 && aligned16(out) && aligned16(in))
    bf16_to_f32_kernel<8><<<grid_stride_blocks(n / 8, kThreads), kThreads, 0, stream>>>(out, in, n / 8);
  else
    bf16_to_f32_kernel<1><<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, in, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
