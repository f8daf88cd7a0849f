// Linear layers of a few rows (decode: one row per sequence), bandwidth-bound: every weight
// is read once. cuBLASLt's kernels are built for larger M; here each warp owns one output
// column, streams its weight row with 16-byte loads (four in flight per lane) and keeps the
// M rows of x in L1. Sums are in a fixed order, as everywhere in ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

constexpr int64_t kGemvMaxRows = 8;

// Whether gemv() takes this shape: M <= kGemvMaxRows, K a multiple of 8, 16-byte aligned x, w.
bool gemv_fits(int64_t m, int64_t k, const void* x, const void* w);
// y (M, N) = x (M, K) . w (N, K)^T (+ bias (N)), fp32 sums; y bf16, or F32 when y_f32.
void gemv(void* y, bool y_f32, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream);

}  // namespace anvil::cuda
