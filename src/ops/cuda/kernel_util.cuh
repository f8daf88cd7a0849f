// Device helpers shared by the CUDA op kernels: bf16 vector loads, warp and block sums, a
// tensor's amax joined across blocks, and the launch-shape constants that keep reductions
// deterministic.
//
// Every reduction in ops/cuda runs in a fixed order that depends only on the problem shape
// (never on timing or on the GPU model): partial sums go to a workspace with one row per
// block of a grid of fixed size, and a second pass adds the rows in order. So the same
// inputs give the same bits on every run, which resumption and parity rely on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// Blocks of the first pass of every two-pass reduction (a constant, not the SM count, so
// that results are identical across GPU models; 2 per SM of an H100/H200).
constexpr int kPartialBlocks = 264;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `units`: enough to fill any GPU, never more than the
// work needs.
inline unsigned grid_stride_blocks(int64_t units, int threads) {
  const int64_t blocks = ceil_div(units, threads);
  return static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16));
}

// True when every pointer is 16-byte aligned: 8 bf16 or 4 floats move as one vector.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The longest row of floats one block keeps in shared memory: 48 KB, the default limit.
constexpr int64_t kMaxSharedRow = 12288;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's sum (kMax false) or max (true), returned to every thread. blockDim.x is a
// multiple of 32, at most 1024. Safe to call repeatedly (the trailing barrier protects the
// scratch).
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? part[lane] : kMax ? -INFINITY : 0.0f;
  r = kMax ? warp_max(r) : warp_sum(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

// max(m, the largest |v[i]| rounded to bf16, as store_bf16 stores it).
template <int VEC>
__device__ __forceinline__ float amax_bf16(float m, const float (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) m = fmaxf(m, fabsf(__bfloat162float(__float2bfloat16_rn(v[i]))));
  return m;
}

// *amax = max(*amax, the block's largest m), every thread of the block calling with its m >= 0:
// an atomic max of the float's bits (non-negative floats order as their bits), exact and
// independent of the order of the blocks (*amax zeroed before the kernel).
__device__ __forceinline__ void block_amax_to(float* amax, float m) {
  m = block_max(m);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(amax), __float_as_uint(m));
}

// VEC consecutive bf16 as floats: one 16-byte load for VEC == 8, scalar loads for VEC == 1.
template <int VEC>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* p, float (&v)[VEC]) {
  if constexpr (VEC == 8) {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = __bfloat162float(p[i]);
  }
}

template <int VEC>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* p, const float (&v)[VEC]) {
  if constexpr (VEC == 8) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = __float2bfloat16_rn(v[i]);
  }
}

}  // namespace anvil::cuda
