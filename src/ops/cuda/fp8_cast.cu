// FP8 amax, scales and casts (fp8_cast.h). Three passes per operand: the amax of each row of
// the bf16 source (one block a row) or of each column (a thread a column over 64 rows, so every
// row read is coalesced, the blocks of a column joined by an atomic max); the scales (one thread each, or one block
// reducing every amax for a tensorwise scale); the cast, element by element or through a 32 x 32 shared-memory tile
// that writes the transpose coalesced. Maxima do not depend on order, so the result is exact and deterministic.
// __NV_SATFINITE is the recipe's saturation: beyond +-max clamps, NaN stays.
#include <cuda_fp8.h>

#include "core/cuda/check.h"
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

__global__ void tensor_scale_kernel(float* scale, float* inv, const float* amax, int64_t n, float fp8_max) {
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, amax[i]);
  m = block_max(m);
  if (threadIdx.x == 0) {
    scale[0] = scale_of(m, fp8_max, false);
    inv[0] = __frcp_rn(scale[0]);
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

}  // namespace

const float* quantize_fp8(uint8_t* dst, float* stats, const __nv_bfloat16* src, int64_t rows, int64_t k,
                          bool transposed, bool rowwise, cudaStream_t stream) {
  const int64_t n = rows > k ? rows : k;
  float *amax = stats, *scale = stats + n, *inv = stats + 2 * n;
  if (rows == 0 || k == 0) return inv;
  // The amax of each operand row (rowwise) or of each source row (tensorwise: reduced next).
  const int64_t src_rows = transposed ? k : rows, src_cols = transposed ? rows : k;
  if (rowwise && transposed) {
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
  else
    tensor_scale_kernel<<<1, 1024, 0, stream>>>(scale, inv, amax, src_rows, kE4M3Max);
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
