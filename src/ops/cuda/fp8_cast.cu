// FP8 amax, scales and casts (fp8_cast.h).
// Tensorwise, aligned (rows and k multiples of 8, the source 16-byte aligned: every operand of
// the model's GEMMs): two passes, both moving 8 bf16 a thread per 16-byte load. The amax of the
// whole tensor (each block's maximum joined by an atomic max of the float's bits); then the
// cast, whose threads each derive the scale from that amax (the first writes the scale and its
// inverse), writing 8 FP8 bytes a thread, or, transposed, through a 64 x 64 shared-memory tile
// of FP8 bytes read and written along rows.
// Otherwise (rowwise, or a shape off the 8-element grid) three passes: the amax of each row of
// the bf16 source (one block a row) or of each column (a thread a column over 64 rows, so every
// row read is coalesced, the blocks of a column joined by an atomic max); the scales (one thread each, or one block
// reducing every amax for a tensorwise scale); the cast, element by element or through a 32 x 32 shared-memory tile
// that writes the transpose coalesced.
// Maxima do not depend on order and each byte is one element's cast, so both give the same bits, deterministic.
// A tensorwise amax given by the caller (AmaxSlot known) skips the amax pass; one taken is also
// written to the slot.
// __NV_SATFINITE is the recipe's saturation: beyond +-max clamps, NaN stays.
#include <cuda_fp8.h>

#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/fp8_cast.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

constexpr int kTile = 32;

__global__ void amax_rows_kernel(float* amax, const __nv_bfloat16* src, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float m = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, fabsf(__bfloat162float(src[r * cols + c])));
    m = block_max(m);
    if (threadIdx.x == 0) amax[r] = m;
  }
}

// Block (x, y): columns x * 256 .. +255 over rows y * kColRows .. +kColRows; the blocks of a
// column meet in an atomic max of the float's bits (non-negative floats order as their bits),
// exact and independent of the order (amax starts at 0).
constexpr int64_t kColRows = 64;

__global__ void amax_cols_kernel(float* amax, const __nv_bfloat16* src, int64_t rows, int64_t cols) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = blockIdx.y * kColRows, r1 = r0 + kColRows < rows ? r0 + kColRows : rows;
  float m = 0.0f;
  for (int64_t r = r0; r < r1; ++r) m = fmaxf(m, fabsf(__bfloat162float(src[r * cols + c])));
  atomicMax(reinterpret_cast<unsigned*>(amax) + c, __float_as_uint(m));
}

// fp8_max / max(amax, 1e-12) in double, to float (ops/fp8_recipe.h's fp8_scale).
__device__ float scale_of(float amax, float fp8_max, bool pow2) {
  const float s = static_cast<float>(static_cast<double>(fp8_max) / fmax(static_cast<double>(amax), 1e-12));
  return pow2 ? __uint_as_float(__float_as_uint(s) & 0xff800000u) : s;
}

__global__ void row_scales_kernel(float* scale, float* inv, const float* amax, int64_t n, float fp8_max) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    scale[i] = scale_of(amax[i], fp8_max, true);
    inv[i] = __frcp_rn(scale[i]);
  }
}

// The tensor's scale from n amaxes (their max also into *whole, unless null).
__global__ void tensor_scale_kernel(float* scale, float* inv, float* whole, const float* amax, int64_t n,
                                    float fp8_max) {
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, amax[i]);
  m = block_max(m);
  if (threadIdx.x == 0) {
    scale[0] = scale_of(m, fp8_max, false);
    inv[0] = __frcp_rn(scale[0]);
    if (whole) *whole = m;
  }
}

constexpr float kE4M3Max = 448.0f;

__device__ __nv_fp8_storage_t to_fp8(float x, float scale) {
  return __nv_cvt_float_to_fp8(__fmul_rn(x, scale), __NV_SATFINITE, __NV_E4M3);
}

// dst (rows, k) from src (rows, k); scale per row when rowwise.
__global__ void cast_kernel(uint8_t* dst, const __nv_bfloat16* src, const float* scale, int64_t rows, int64_t k,
                            bool rowwise) {
  const int64_t n = rows * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = to_fp8(__bfloat162float(src[i]), scale[rowwise ? i / k : 0]);
}

// dst (rows, k) = the transpose of src (k, rows); scale per dst row when rowwise. Block
// (32, 8) moves one 32 x 32 tile: reads along src's rows, writes along dst's rows.
__global__ void cast_transpose_kernel(uint8_t* dst, const __nv_bfloat16* src, const float* scale, int64_t rows,
                                      int64_t k, bool rowwise) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kTile, k0 = static_cast<int64_t>(blockIdx.y) * kTile;
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t kk = k0 + j, r = r0 + threadIdx.x;
    tile[j][threadIdx.x] = kk < k && r < rows ? __bfloat162float(src[kk * rows + r]) : 0.0f;
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
    const int64_t r = r0 + j, kk = k0 + threadIdx.x;
    if (r < rows && kk < k) dst[r * k + kk] = to_fp8(tile[threadIdx.x][j], scale[rowwise ? r : 0]);
  }
}

// ---- tensorwise, 8 elements a thread

constexpr int kVec = 8;
constexpr int kVecTile = 64;  // the transposing cast's tile: 64 x 64 elements, 256 threads

// *amax (zeroed first) = the largest |element| of src's n8 * 8 elements.
__global__ void amax_tensor_kernel(float* amax, const __nv_bfloat16* src, int64_t n8) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[kVec];
    load_bf16<kVec>(src + i * kVec, v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) m = fmaxf(m, fabsf(v[j]));
  }
  block_amax_to(amax, m);
}

// The tensor's scale from its amax (tensor_scale_kernel's, bit for bit); the grid's first
// thread also stores it and its inverse for the GEMM.
__device__ float tensor_scale(const float* amax, float* scale, float* inv) {
  const float s = scale_of(*amax, kE4M3Max, false);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *scale = s;
    *inv = __frcp_rn(s);
  }
  return s;
}

// 8 elements' FP8 bytes, the first in the lowest byte.
__device__ uint2 to_fp8x8(const float (&v)[kVec], float scale) {
  uint2 r{0u, 0u};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    r.x |= static_cast<unsigned>(to_fp8(v[j], scale)) << (8 * j);
    r.y |= static_cast<unsigned>(to_fp8(v[j + 4], scale)) << (8 * j);
  }
  return r;
}

__global__ void cast_tensor_kernel(uint2* dst, const __nv_bfloat16* src, const float* amax, float* scale, float* inv,
                                   int64_t n8) {
  const float s = tensor_scale(amax, scale, inv);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v[kVec];
    load_bf16<kVec>(src + i * kVec, v);
    dst[i] = to_fp8x8(v, s);
  }
}

// dst (rows, k) = the transpose of src (k, rows), rows and k multiples of 8, and, unless null,
// straight (k, rows) = src cast as it lies. Block (x, y): dst rows x * 64 .. +63, columns
// y * 64 .. +63. Each thread casts 8 consecutive source elements into the tile
// (tile[source row][source column]) and straight, then gathers 8 of a tile column into one
// 8-byte store; rows of 66 bytes spread a warp's gathers over the banks.
__global__ void cast_transpose_tensor_kernel(uint8_t* dst, uint8_t* straight, const __nv_bfloat16* src,
                                             const float* amax, float* scale, float* inv, int64_t rows, int64_t k) {
  __shared__ uint8_t tile[kVecTile][kVecTile + 2];
  const float s = tensor_scale(amax, scale, inv);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kVecTile, k0 = static_cast<int64_t>(blockIdx.y) * kVecTile;
  const int lane = (threadIdx.x % 8) * kVec, first = threadIdx.x / 8, step = blockDim.x / 8;
  for (int j = first; j < kVecTile; j += step) {
    const int64_t kk = k0 + j, r = r0 + lane;
    if (kk >= k || r >= rows) continue;
    float v[kVec];
    load_bf16<kVec>(src + kk * rows + r, v);
    const uint2 bytes = to_fp8x8(v, s);
    if (straight) *reinterpret_cast<uint2*>(straight + kk * rows + r) = bytes;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      tile[j][lane + i] = static_cast<uint8_t>(bytes.x >> (8 * i));
      tile[j][lane + 4 + i] = static_cast<uint8_t>(bytes.y >> (8 * i));
    }
  }
  __syncthreads();
  for (int j = first; j < kVecTile; j += step) {
    const int64_t r = r0 + j, kk = k0 + lane;
    if (r >= rows || kk >= k) continue;
    uint2 out{0u, 0u};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out.x |= static_cast<unsigned>(tile[lane + i][j]) << (8 * i);
      out.y |= static_cast<unsigned>(tile[lane + 4 + i][j]) << (8 * i);
    }
    *reinterpret_cast<uint2*>(dst + r * k + kk) = out;
  }
}

bool aligned8(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 8 == 0; }

// The tensorwise quantization in two passes (the top of the file), or one where the slot
// knows the amax (else the amax goes to the slot, when there is one); false when the shape or
// the pointers are off the 8-element grid.
bool quantize_tensor_fast(uint8_t* dst, uint8_t* straight, float* amax, float* scale, float* inv,
                          const __nv_bfloat16* src, int64_t rows, int64_t k, bool transposed, AmaxSlot slot,
                          cudaStream_t stream) {
  if (rows % kVec != 0 || k % kVec != 0 || !aligned16(src) || !aligned8(dst) || !aligned8(straight)) return false;
  const int64_t n8 = rows * k / kVec;
  const unsigned blocks = grid_stride_blocks(n8, 256);
  if (slot.at) amax = slot.at;
  if (!slot.known) {
    CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    amax_tensor_kernel<<<blocks < 2048 ? blocks : 2048, 256, 0, stream>>>(amax, src, n8);
    CUDA_CHECK_LAUNCH();
  }
  if (transposed) {
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kVecTile)), static_cast<unsigned>(ceil_div(k, kVecTile)));
    cast_transpose_tensor_kernel<<<grid, 256, 0, stream>>>(dst, straight, src, amax, scale, inv, rows, k);
  } else {
    cast_tensor_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<uint2*>(dst), src, amax, scale, inv, n8);
  }
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

const float* quantize_fp8(uint8_t* dst, float* stats, const __nv_bfloat16* src, int64_t rows, int64_t k,
                          bool transposed, bool rowwise, cudaStream_t stream, uint8_t* straight, AmaxSlot slot) {
  const int64_t n = rows > k ? rows : k;
  float *amax = stats, *scale = stats + n, *inv = stats + 2 * n;
  ANVIL_ENSURE(!straight || (transposed && !rowwise), kInternal, "quantize_fp8: a straight copy needs a transposed "
               "tensorwise operand");
  ANVIL_ENSURE(!slot.at || !rowwise, kInternal, "quantize_fp8: an amax slot with the rowwise recipe");
  if (rows == 0 || k == 0) return inv;
  if (!rowwise && quantize_tensor_fast(dst, straight, amax, scale, inv, src, rows, k, transposed, slot, stream))
    return inv;
  if (straight) quantize_fp8(straight, stats, src, k, rows, false, false, stream, nullptr, slot);
  // The amax of each operand row (rowwise) or of each source row (tensorwise: reduced next).
  const int64_t src_rows = transposed ? k : rows, src_cols = transposed ? rows : k;
  if (slot.known) {
    tensor_scale_kernel<<<1, 1024, 0, stream>>>(scale, inv, nullptr, slot.at, 1, kE4M3Max);
  } else if (rowwise && transposed) {
    CUDA_CHECK(cudaMemsetAsync(amax, 0, static_cast<size_t>(src_cols) * sizeof(float), stream));
    const dim3 grid(static_cast<unsigned>(ceil_div(src_cols, 256)),
                    static_cast<unsigned>(ceil_div(src_rows, kColRows)));
    amax_cols_kernel<<<grid, 256, 0, stream>>>(amax, src, src_rows, src_cols);
  } else {
    amax_rows_kernel<<<static_cast<unsigned>(src_rows < 65535 ? src_rows : 65535), 256, 0, stream>>>(
        amax, src, src_rows, src_cols);
  }
  CUDA_CHECK_LAUNCH();
  if (rowwise)
    row_scales_kernel<<<grid_stride_blocks(rows, 256), 256, 0, stream>>>(scale, inv, amax, rows, kE4M3Max);
  else if (!slot.known)
    tensor_scale_kernel<<<1, 1024, 0, stream>>>(scale, inv, slot.at, amax, src_rows, kE4M3Max);
  CUDA_CHECK_LAUNCH();
  if (transposed) {
    const dim3 grid(static_cast<unsigned>(ceil_div(rows, kTile)), static_cast<unsigned>(ceil_div(k, kTile)));
    cast_transpose_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(dst, src, scale, rows, k, rowwise);
  } else {
    cast_kernel<<<grid_stride_blocks(rows * k, 256), 256, 0, stream>>>(dst, src, scale, rows, k, rowwise);
  }
  CUDA_CHECK_LAUNCH();
  return inv;
}

}  // namespace anvil::cuda
