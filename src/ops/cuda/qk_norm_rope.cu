// qk-norm + RoPE forward and backward: one warp per (row, head).
//
// Forward, for a q or k head x (hd values), h = hd/2, position p:
//   n = x * rstd * w (when normed), out[i] = n[i] cos[p,i] - n[i+h] sin[p,i],
//   out[i+h] = n[i+h] cos[p,i] + n[i] sin[p,i]  (rotate-half, as Hugging Face).
// Backward applies the transposed rotation to dout to get dn, then the RMSNorm backward of
// that head: dx = rstd * (dn * w - x * rstd^2 * sum(dn * w * x) / hd), dw += dn * x * rstd.
// dq_w and dk_w are deterministic: each warp keeps its own partial row in shared memory,
// a block adds its warps in order, reduce_partials_add adds the blocks in order.
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/qk_norm_rope.h"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

namespace {
constexpr int kWarps = 8;
constexpr int kMaxHeadDim = 512;
}  // namespace

static __global__ void qk_rope_fwd_kernel(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* in,
                                          const __nv_bfloat16* q_w, const __nv_bfloat16* k_w, const float* cos,
                                          const float* sin, int64_t rows, int64_t seq, int n_heads,
                                          int n_kv_heads, int hd, float eps) {
  const int lane = threadIdx.x & 31;
  const int heads = n_heads + 2 * n_kv_heads, normed = n_heads + n_kv_heads, half = hd / 2;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (unit >= rows * heads) return;
  const int64_t r = unit / heads;
  const int head = static_cast<int>(unit % heads);
  const __nv_bfloat16* x = in + unit * hd;
  __nv_bfloat16* o = out + unit * hd;
  if (head >= normed) {
    for (int i = lane; i < hd; i += 32) o[i] = x[i];
    return;
  }
  const __nv_bfloat16* w = head < n_heads ? q_w : k_w;
  float rs = 1.0f;
  if (w) {
    float ss = 0.0f;
    for (int i = lane; i < hd; i += 32) {
      const float v = __bfloat162float(x[i]);
      ss += v * v;
    }
    rs = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
    if (lane == 0) rstd[r * normed + head] = rs;
  }
  const int64_t p = r % seq;
  for (int i = lane; i < half; i += 32) {
    float x1 = __bfloat162float(x[i]) * rs, x2 = __bfloat162float(x[i + half]) * rs;
    if (w) {
      x1 *= __bfloat162float(w[i]);
      x2 *= __bfloat162float(w[i + half]);
    }
    const float c = cos[p * half + i], s = sin[p * half + i];
    o[i] = __float2bfloat16_rn(x1 * c - x2 * s);
    o[i + half] = __float2bfloat16_rn(x2 * c + x1 * s);
  }
}

static __global__ void qk_rope_bwd_kernel(__nv_bfloat16* din, float* partials, const __nv_bfloat16* dout,
                                          const __nv_bfloat16* in, const __nv_bfloat16* q_w,
                                          const __nv_bfloat16* k_w, const float* rstd, const float* cos,
                                          const float* sin, int64_t rows, int64_t seq, int n_heads,
                                          int n_kv_heads, int hd) {
  extern __shared__ float acc[];  // (kWarps, 2, hd): each warp's dq_w then dk_w partials
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int heads = n_heads + 2 * n_kv_heads, normed = n_heads + n_kv_heads, half = hd / 2;
  const bool norm = q_w != nullptr;
  for (int i = threadIdx.x; i < kWarps * 2 * hd; i += blockDim.x) acc[i] = 0.0f;
  __syncthreads();
  const int64_t units = rows * heads;
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + warp; unit < units;
       unit += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t r = unit / heads;
    const int head = static_cast<int>(unit % heads);
    const __nv_bfloat16* d = dout + unit * hd;
    __nv_bfloat16* dx = din + unit * hd;
    if (head >= normed) {
      for (int i = lane; i < hd; i += 32) dx[i] = d[i];
      continue;
    }
    const int64_t p = r % seq;
    if (!norm) {
      for (int i = lane; i < half; i += 32) {
        const float d1 = __bfloat162float(d[i]), d2 = __bfloat162float(d[i + half]);
        const float c = cos[p * half + i], s = sin[p * half + i];
        dx[i] = __float2bfloat16_rn(d1 * c + d2 * s);
        dx[i + half] = __float2bfloat16_rn(d2 * c - d1 * s);
      }
      continue;
    }
    const __nv_bfloat16* x = in + unit * hd;
    const __nv_bfloat16* w = head < n_heads ? q_w : k_w;
    float* wacc = acc + (warp * 2 + (head < n_heads ? 0 : 1)) * hd;
    const float rs = rstd[r * normed + head];
    float dot = 0.0f;
    for (int i = lane; i < half; i += 32) {
      const float d1 = __bfloat162float(d[i]), d2 = __bfloat162float(d[i + half]);
      const float c = cos[p * half + i], s = sin[p * half + i];
      const float n1 = d1 * c + d2 * s, n2 = d2 * c - d1 * s;
      dot += n1 * __bfloat162float(w[i]) * __bfloat162float(x[i]) +
             n2 * __bfloat162float(w[i + half]) * __bfloat162float(x[i + half]);
    }
    const float coef = warp_sum(dot) * rs * rs / static_cast<float>(hd);
    for (int i = lane; i < half; i += 32) {
      const float d1 = __bfloat162float(d[i]), d2 = __bfloat162float(d[i + half]);
      const float c = cos[p * half + i], s = sin[p * half + i];
      const float n1 = d1 * c + d2 * s, n2 = d2 * c - d1 * s;
      const float x1 = __bfloat162float(x[i]), x2 = __bfloat162float(x[i + half]);
      dx[i] = __float2bfloat16_rn(rs * (n1 * __bfloat162float(w[i]) - x1 * coef));
      dx[i + half] = __float2bfloat16_rn(rs * (n2 * __bfloat162float(w[i + half]) - x2 * coef));
      wacc[i] += n1 * x1 * rs;
      wacc[i + half] += n2 * x2 * rs;
    }
  }
  if (!norm) return;
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * hd; i += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += acc[w * 2 * hd + i];
    partials[blockIdx.x * 2 * static_cast<int64_t>(hd) + i] = s;
  }
}

static void check_shape(const QkRopeShape& s) {
  ANVIL_ENSURE(s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDim, kUnsupported, "qk_norm_rope: head_dim ",
               s.head_dim, " (the CUDA kernel needs an even head_dim of at most ", kMaxHeadDim, ")");
  ANVIL_ENSURE(s.seq > 0 && s.rows % s.seq == 0, kInvalidInput, "qk_norm_rope: ", s.rows,
               " rows are not a whole number of sequences of ", s.seq);
}

void qk_norm_rope_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* in, const __nv_bfloat16* q_w,
                          const __nv_bfloat16* k_w, const float* cos, const float* sin, const QkRopeShape& s,
                          float eps, cudaStream_t stream) {
  check_shape(s);
  const int64_t units = s.rows * (s.n_heads + 2 * s.n_kv_heads);
  if (units == 0) return;
  qk_rope_fwd_kernel<<<static_cast<unsigned>(ceil_div(units, kWarps)), kWarps * 32, 0, stream>>>(
      out, rstd, in, q_w, k_w, cos, sin, s.rows, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, eps);
  CUDA_CHECK_LAUNCH();
}

static int bwd_blocks(const QkRopeShape& s) {
  const int64_t blocks = ceil_div(s.rows * (s.n_heads + 2 * s.n_kv_heads), kWarps);
  return static_cast<int>(blocks < kPartialBlocks ? blocks : kPartialBlocks);
}

size_t qk_norm_rope_backward_scratch_bytes(const QkRopeShape& s) {
  return static_cast<size_t>(bwd_blocks(s)) * 2 * static_cast<size_t>(s.head_dim) * sizeof(float);
}

void qk_norm_rope_backward(__nv_bfloat16* din, float* dq_w, float* dk_w, const __nv_bfloat16* dout,
                           const __nv_bfloat16* in, const __nv_bfloat16* q_w, const __nv_bfloat16* k_w,
                           const float* rstd, const float* cos, const float* sin, const QkRopeShape& s,
                           void* scratch, cudaStream_t stream) {
  check_shape(s);
  if (s.rows == 0) return;
  const int blocks = bwd_blocks(s);
  float* partials = static_cast<float*>(scratch);
  const size_t smem = static_cast<size_t>(kWarps) * 2 * static_cast<size_t>(s.head_dim) * sizeof(float);
  qk_rope_bwd_kernel<<<blocks, kWarps * 32, smem, stream>>>(din, partials, dout, in, q_w, k_w, rstd, cos, sin,
                                                            s.rows, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
  CUDA_CHECK_LAUNCH();
  if (q_w) {
    reduce_partials_add(dq_w, partials, blocks, s.head_dim, 2 * s.head_dim, stream);
    reduce_partials_add(dk_w, partials + s.head_dim, blocks, s.head_dim, 2 * s.head_dim, stream);
  }
}

}  // namespace anvil::cuda
