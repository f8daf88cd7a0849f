// Per-head RMSNorm of q and k (Qwen3) followed by rotate-half RoPE, on packed qkv
// (rows = B*T, H + 2*KV heads, head_dim); v heads are copied unchanged (ops.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/reduce.h"

namespace anvil::cuda {

struct QkRopeShape {
  int64_t rows = 0;  // B*T
  int64_t seq = 0;   // T: the position of row r is r % T, or positions[r]
  const int32_t* positions = nullptr;  // (rows) I32 on the device, or null (packed documents, ops.h)
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// q_w, k_w (head_dim) bf16, or both null (no norm: rstd untouched). cos, sin (T, hd/2) F32.
// rstd (rows, H + KV) F32.
void qk_norm_rope_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* in, const __nv_bfloat16* q_w,
                          const __nv_bfloat16* k_w, const float* cos, const float* sin, const QkRopeShape& s,
                          float eps, cudaStream_t stream);

size_t qk_norm_rope_backward_scratch_bytes(const QkRopeShape& s);
// din written; dq_w, dk_w (head_dim) F32 +=, or = when not accumulate_dw (bf16: =); ignored
// when q_w is null.
void qk_norm_rope_backward(__nv_bfloat16* din, GradOut dq_w, GradOut dk_w, const __nv_bfloat16* dout,
                           const __nv_bfloat16* in, const __nv_bfloat16* q_w, const __nv_bfloat16* k_w,
                           const float* rstd, const float* cos, const float* sin, const QkRopeShape& s,
                           bool accumulate_dw, void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
