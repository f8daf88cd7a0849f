// RMSNorm forward and backward (fp32 arithmetic, bf16 in and out).
//
// Forward: one block per row; the row is read twice (sum of squares, then the scaled
// write), the second time from L1/L2. Backward: with xhat = x * rstd and g = dout * w,
//   dx = rstd * (g - xhat * mean(g * xhat)) = rstd * g - x * rstd^3 * sum(g * x) / C
//   dw += sum over rows of dout * xhat.
// The dw sum is deterministic: a fixed grid of kPartialBlocks blocks, each summing its rows
// in order into a shared-memory row, then reduce_partials over the blocks in a fixed order.
// Each thread owns the same columns in every loop, so dx may alias dout.
// add_rmsnorm_forward is the residual add and the forward in one pass over the row: it
// stores the bf16 sum and normalises what it stored, with the forward's thread layout and
// order of sums, so its output is bit for bit add_bf16 then rmsnorm_forward (where the
// pointers do not allow the vector path, it runs those two). Given an amax, both forwards also
// take the largest |element| of the bf16 output they store (block_amax_to).
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/reduce.h"
#include "ops/cuda/rmsnorm.h"

namespace anvil::cuda {

namespace {
constexpr int kThreads = 256;
}  // namespace

// The end of both forwards, for row r whose threads hold the partial sums ss of its squares:
// rstd[r], out's row = xr * rstd * w, and the amax of what is stored (amax may be null).
template <int VEC>
static __device__ __forceinline__ void rmsnorm_row_out(__nv_bfloat16* out, float* rstd, float* amax,
                                                       const __nv_bfloat16* xr, const __nv_bfloat16* w, int64_t r,
                                                       int cols, float eps, float ss) {
  ss = block_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  float m = 0.0f;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC], wv[VEC];
    load_bf16<VEC>(xr + c, v);
    load_bf16<VEC>(w + c, wv);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = v[i] * rs * wv[i];
    store_bf16<VEC>(out + r * cols + c, v);
    if (amax) m = amax_bf16(m, v);
  }
  if (amax) block_amax_to(amax, m);
}

template <int VEC>
static __global__ void rmsnorm_fwd_kernel(__nv_bfloat16* out, float* rstd, float* amax, const __nv_bfloat16* x,
                                          const __nv_bfloat16* w, int cols, float eps) {
  const int64_t r = blockIdx.x;
  const __nv_bfloat16* xr = x + r * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC];
    load_bf16<VEC>(xr + c, v);
#pragma unroll
    for (int i = 0; i < VEC; ++i) ss += v[i] * v[i];
  }
  rmsnorm_row_out<VEC>(out, rstd, amax, xr, w, r, cols, eps, ss);
}

template <int VEC>
static __global__ void add_rmsnorm_fwd_kernel(__nv_bfloat16* sum, __nv_bfloat16* out, float* rstd, float* amax,
                                              const __nv_bfloat16* a, const __nv_bfloat16* b,
                                              const __nv_bfloat16* w, int cols, float eps) {
  const int64_t r = blockIdx.x;
  __nv_bfloat16* sr = sum + r * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC], y[VEC];
    load_bf16<VEC>(a + r * cols + c, v);
    load_bf16<VEC>(b + r * cols + c, y);
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] += y[i];
    store_bf16<VEC>(sr + c, v);
    load_bf16<VEC>(sr + c, v);  // the rounded sum, as rmsnorm_forward would read it
#pragma unroll
    for (int i = 0; i < VEC; ++i) ss += v[i] * v[i];
  }
  rmsnorm_row_out<VEC>(out, rstd, amax, sr, w, r, cols, eps, ss);
}

template <int VEC>
static __global__ void rmsnorm_bwd_kernel(__nv_bfloat16* dx, float* partials, const __nv_bfloat16* dout,
                                          const __nv_bfloat16* x, const __nv_bfloat16* w, const float* rstd,
                                          int64_t rows, int cols, bool accumulate) {
  extern __shared__ float dw_acc[];  // (cols)
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dw_acc[c] = 0.0f;
  __syncthreads();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float rs = rstd[r];
    const __nv_bfloat16* dr = dout + r * cols;
    const __nv_bfloat16* xr = x + r * cols;
    float dot = 0.0f;
    for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
      float d[VEC], xv[VEC], wv[VEC];
      load_bf16<VEC>(dr + c, d);
      load_bf16<VEC>(xr + c, xv);
      load_bf16<VEC>(w + c, wv);
#pragma unroll
      for (int i = 0; i < VEC; ++i) dot += d[i] * wv[i] * xv[i];
    }
    dot = block_sum(dot);
    const float coef = dot * rs * rs / static_cast<float>(cols);
    for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
      float d[VEC], xv[VEC], wv[VEC], o[VEC];
      load_bf16<VEC>(dr + c, d);
      load_bf16<VEC>(xr + c, xv);
      load_bf16<VEC>(w + c, wv);
      if (accumulate) {
        load_bf16<VEC>(dx + r * cols + c, o);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) o[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        o[i] += rs * (d[i] * wv[i] - xv[i] * coef);
        dw_acc[c + i] += d[i] * xv[i] * rs;
      }
      store_bf16<VEC>(dx + r * cols + c, o);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) partials[blockIdx.x * static_cast<int64_t>(cols) + c] = dw_acc[c];
}

void rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     int64_t rows, int64_t cols, float eps, cudaStream_t stream, float* amax) {
  if (amax) CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (rows == 0) return;
  const int c = static_cast<int>(cols);
  if (cols % 8 == 0 && aligned16(out) && aligned16(x) && aligned16(w))
    rmsnorm_fwd_kernel<8><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, rstd, amax, x, w, c, eps);
  else
    rmsnorm_fwd_kernel<1><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, rstd, amax, x, w, c, eps);
  CUDA_CHECK_LAUNCH();
}

void add_rmsnorm_forward(__nv_bfloat16* sum, __nv_bfloat16* out, float* rstd, const __nv_bfloat16* a,
                         const __nv_bfloat16* b, const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                         cudaStream_t stream, float* amax) {
  if (cols % 8 != 0 || !aligned16(sum) || !aligned16(out) || !aligned16(a) || !aligned16(b) || !aligned16(w)) {
    if (rows > 0) add_bf16(sum, a, b, rows * cols, stream);
    rmsnorm_forward(out, rstd, sum, w, rows, cols, eps, stream, amax);
    return;
  }
  if (amax) CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (rows == 0) return;
  add_rmsnorm_fwd_kernel<8><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(sum, out, rstd, amax, a, b, w,
                                                                                  static_cast<int>(cols), eps);
  CUDA_CHECK_LAUNCH();
}

static int bwd_blocks(int64_t rows) { return static_cast<int>(rows < kPartialBlocks ? rows : kPartialBlocks); }

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(bwd_blocks(rows)) * static_cast<size_t>(cols) * sizeof(float);
}

void rmsnorm_backward(__nv_bfloat16* dx, GradOut dw, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                      const __nv_bfloat16* w, const float* rstd, int64_t rows, int64_t cols,
                      bool accumulate, bool accumulate_dw, void* scratch, cudaStream_t stream) {
  if (rows == 0) {
    if (!accumulate_dw) CUDA_CHECK(cudaMemsetAsync(dw.ptr, 0, dw.bytes(cols), stream));
    return;
  }
  ANVIL_ENSURE(cols <= kMaxSharedRow, kUnsupported, "rmsnorm_backward: ", cols,
               " columns; the CUDA kernel handles up to ", kMaxSharedRow);
  const int blocks = bwd_blocks(rows), c = static_cast<int>(cols);
  const size_t smem = static_cast<size_t>(cols) * sizeof(float);
  float* partials = static_cast<float*>(scratch);
  if (cols % 8 == 0 && aligned16(dx) && aligned16(dout) && aligned16(x) && aligned16(w))
    rmsnorm_bwd_kernel<8><<<blocks, kThreads, smem, stream>>>(dx, partials, dout, x, w, rstd, rows, c, accumulate);
  else
    rmsnorm_bwd_kernel<1><<<blocks, kThreads, smem, stream>>>(dx, partials, dout, x, w, rstd, rows, c, accumulate);
  CUDA_CHECK_LAUNCH();
  reduce_partials(dw, partials, blocks, cols, cols, accumulate_dw, stream);
}

}  // namespace anvil::cuda
