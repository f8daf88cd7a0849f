// qk-norm + RoPE forward and backward: one warp per (row, head); each lane moves pairs of
// bf16 (head_dim a multiple of 4, so both halves of a head hold whole pairs).
//
// Forward, for a q or k head x (hd values), h = hd/2, position p (row r % T, or positions[r]):
//   n = x * rstd * w (when normed), out[i] = n[i] cos[p,i] - n[i+h] sin[p,i],
//   out[i+h] = n[i+h] cos[p,i] + n[i] sin[p,i]  (rotate-half, as Hugging Face).
// Backward applies the transposed rotation to dout to get dn, then the RMSNorm backward of
// that head: dx = rstd * (dn * w - x * rstd^2 * sum(dn * w * x) / hd), dw += dn * x * rstd.
// dq_w and dk_w are deterministic: each warp keeps its own partial row in shared memory,
// a block adds its warps in order, reduce_partials adds the blocks in a fixed order (+=, or
// = where the caller overwrites).
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/kernel_util.cuh"
#include "ops/cuda/qk_norm_rope.h"
#include "ops/cuda/reduce.h"

namespace anvil::cuda {

namespace {
constexpr int kWarps = 8;      // forward: one (row, head) per warp
constexpr int kBwdWarps = 16;  // backward: warps per block of the fixed grid (kPartialBlocks)
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ float2 ld2(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ void st2(__nv_bfloat16* p, float2 v) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v.x, v.y);
}
}  // namespace

static __global__ void qk_rope_fwd_kernel(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* in,
                                          const __nv_bfloat16* q_w, const __nv_bfloat16* k_w, const float* cos,
                                          const float* sin, const int32_t* positions, int64_t rows, int64_t seq,
                                          int n_heads, int n_kv_heads, int hd, float eps) {
  const int lane = threadIdx.x & 31;
  const int heads = n_heads + 2 * n_kv_heads, normed = n_heads + n_kv_heads, half = hd / 2;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (unit >= rows * heads) return;
  const int64_t r = unit / heads;
  const int head = static_cast<int>(unit % heads);
  const __nv_bfloat16* x = in + unit * hd;
  __nv_bfloat16* o = out + unit * hd;
  if (head >= normed) {
    for (int i = 2 * lane; i < hd; i += 64) st2(o + i, ld2(x + i));
    return;
  }
  const __nv_bfloat16* w = head < n_heads ? q_w : k_w;
  float rs = 1.0f;
  if (w) {
    float ss = 0.0f;
    for (int i = 2 * lane; i < hd; i += 64) {
      const float2 v = ld2(x + i);
      ss += v.x * v.x + v.y * v.y;
    }
    rs = rsqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
    if (lane == 0) rstd[r * normed + head] = rs;
  }
  const int64_t p = positions ? positions[r] : r % seq;
  for (int i = 2 * lane; i < half; i += 64) {
    float2 x1 = ld2(x + i), x2 = ld2(x + i + half);
    x1.x *= rs; x1.y *= rs; x2.x *= rs; x2.y *= rs;
    if (w) {
      const float2 w1 = ld2(w + i), w2 = ld2(w + i + half);
      x1.x *= w1.x; x1.y *= w1.y; x2.x *= w2.x; x2.y *= w2.y;
    }
    const float2 c = *reinterpret_cast<const float2*>(cos + p * half + i);
    const float2 s = *reinterpret_cast<const float2*>(sin + p * half + i);
    st2(o + i, make_float2(x1.x * c.x - x2.x * s.x, x1.y * c.y - x2.y * s.y));
    st2(o + i + half, make_float2(x2.x * c.x + x1.x * s.x, x2.y * c.y + x1.y * s.y));
  }
}

// PAIRS: pairs of elements per lane in each half of a head (head_dim <= 128 * PAIRS).
template <int PAIRS>
static __global__ void qk_rope_bwd_kernel(__nv_bfloat16* din, float* partials, const __nv_bfloat16* dout,
                                          const __nv_bfloat16* in, const __nv_bfloat16* q_w,
                                          const __nv_bfloat16* k_w, const float* rstd, const float* cos,
                                          const float* sin, const int32_t* positions, int64_t rows, int64_t seq,
                                          int n_heads, int n_kv_heads, int hd) {
  extern __shared__ float acc[];  // (kBwdWarps, 2, hd): each warp's dq_w then dk_w partials
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int heads = n_heads + 2 * n_kv_heads, normed = n_heads + n_kv_heads, half = hd / 2;
  const bool norm = q_w != nullptr;
  for (int i = threadIdx.x; i < kBwdWarps * 2 * hd; i += blockDim.x) acc[i] = 0.0f;
  __syncthreads();
  const int64_t units = rows * heads;
  for (int64_t unit = static_cast<int64_t>(blockIdx.x) * kBwdWarps + warp; unit < units;
       unit += static_cast<int64_t>(gridDim.x) * kBwdWarps) {
    const int64_t r = unit / heads;
    const int head = static_cast<int>(unit % heads);
    const __nv_bfloat16* d = dout + unit * hd;
    __nv_bfloat16* dx = din + unit * hd;
    if (head >= normed) {
      for (int i = 2 * lane; i < hd; i += 64) st2(dx + i, ld2(d + i));
      continue;
    }
    const int64_t p = positions ? positions[r] : r % seq;
    if (!norm) {
      for (int i = 2 * lane; i < half; i += 64) {
        const float2 d1 = ld2(d + i), d2 = ld2(d + i + half);
        const float2 c = *reinterpret_cast<const float2*>(cos + p * half + i);
        const float2 s = *reinterpret_cast<const float2*>(sin + p * half + i);
        st2(dx + i, make_float2(d1.x * c.x + d2.x * s.x, d1.y * c.y + d2.y * s.y));
        st2(dx + i + half, make_float2(d2.x * c.x - d1.x * s.x, d2.y * c.y - d1.y * s.y));
      }
      continue;
    }
    const __nv_bfloat16* x = in + unit * hd;
    const __nv_bfloat16* w = head < n_heads ? q_w : k_w;
    float* wacc = acc + (warp * 2 + (head < n_heads ? 0 : 1)) * hd;
    const float rs = rstd[r * normed + head];
    // Each lane keeps its pairs (i, i+1) and (i+half, i+half+1) of dn, x and w, for
    // i = 2 * lane + 64 k, in registers between the dot product and the write.
    float dn[PAIRS][4], xv[PAIRS][4], wv[PAIRS][4];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < PAIRS; ++k) {
      const int i = 2 * lane + 64 * k;
      if (i >= half) break;
      const float2 d1 = ld2(d + i), d2 = ld2(d + i + half);
      const float2 c = *reinterpret_cast<const float2*>(cos + p * half + i);
      const float2 s = *reinterpret_cast<const float2*>(sin + p * half + i);
      dn[k][0] = d1.x * c.x + d2.x * s.x;
      dn[k][1] = d1.y * c.y + d2.y * s.y;
      dn[k][2] = d2.x * c.x - d1.x * s.x;
      dn[k][3] = d2.y * c.y - d1.y * s.y;
      const float2 x1 = ld2(x + i), x2 = ld2(x + i + half), w1 = ld2(w + i), w2 = ld2(w + i + half);
      xv[k][0] = x1.x; xv[k][1] = x1.y; xv[k][2] = x2.x; xv[k][3] = x2.y;
      wv[k][0] = w1.x; wv[k][1] = w1.y; wv[k][2] = w2.x; wv[k][3] = w2.y;
#pragma unroll
      for (int e = 0; e < 4; ++e) dot += dn[k][e] * wv[k][e] * xv[k][e];
    }
    const float coef = warp_sum(dot) * rs * rs / static_cast<float>(hd);
#pragma unroll
    for (int k = 0; k < PAIRS; ++k) {
      const int i = 2 * lane + 64 * k;
      if (i >= half) break;
      float o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[e] = rs * (dn[k][e] * wv[k][e] - xv[k][e] * coef);
      st2(dx + i, make_float2(o[0], o[1]));
      st2(dx + i + half, make_float2(o[2], o[3]));
      wacc[i] += dn[k][0] * xv[k][0] * rs;
      wacc[i + 1] += dn[k][1] * xv[k][1] * rs;
      wacc[i + half] += dn[k][2] * xv[k][2] * rs;
      wacc[i + half + 1] += dn[k][3] * xv[k][3] * rs;
    }
  }
  if (!norm) return;
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * hd; i += blockDim.x) {
    float s = 0.0f;
    for (int w = 0; w < kBwdWarps; ++w) s += acc[w * 2 * hd + i];
    partials[blockIdx.x * 2 * static_cast<int64_t>(hd) + i] = s;
  }
}

static void check_shape(const QkRopeShape& s) {
  ANVIL_ENSURE(s.head_dim % 4 == 0 && s.head_dim <= kMaxHeadDim, kUnsupported, "qk_norm_rope: head_dim ",
               s.head_dim, " (the CUDA kernel needs a multiple of 4, at most ", kMaxHeadDim, ")");
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
      out, rstd, in, q_w, k_w, cos, sin, s.positions, s.rows, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, eps);
  CUDA_CHECK_LAUNCH();
}

static int bwd_blocks(const QkRopeShape& s) {
  const int64_t blocks = ceil_div(s.rows * (s.n_heads + 2 * s.n_kv_heads), kBwdWarps);
  return static_cast<int>(blocks < kPartialBlocks ? blocks : kPartialBlocks);
}

size_t qk_norm_rope_backward_scratch_bytes(const QkRopeShape& s) {
  return static_cast<size_t>(bwd_blocks(s)) * 2 * static_cast<size_t>(s.head_dim) * sizeof(float);
}

void qk_norm_rope_backward(__nv_bfloat16* din, GradOut dq_w, GradOut dk_w, const __nv_bfloat16* dout,
                           const __nv_bfloat16* in, const __nv_bfloat16* q_w, const __nv_bfloat16* k_w,
                           const float* rstd, const float* cos, const float* sin, const QkRopeShape& s,
                           bool accumulate_dw, void* scratch, cudaStream_t stream) {
  check_shape(s);
  if (s.rows == 0) {
    if (q_w && !accumulate_dw) {
      CUDA_CHECK(cudaMemsetAsync(dq_w.ptr, 0, dq_w.bytes(s.head_dim), stream));
      CUDA_CHECK(cudaMemsetAsync(dk_w.ptr, 0, dk_w.bytes(s.head_dim), stream));
    }
    return;
  }
  const int blocks = bwd_blocks(s);
  float* partials = static_cast<float*>(scratch);
  const size_t smem = static_cast<size_t>(kBwdWarps) * 2 * static_cast<size_t>(s.head_dim) * sizeof(float);
  auto kernel = s.head_dim <= 128 ? qk_rope_bwd_kernel<1> : qk_rope_bwd_kernel<kMaxHeadDim / 128>;
  kernel<<<blocks, kBwdWarps * 32, smem, stream>>>(din, partials, dout, in, q_w, k_w, rstd, cos, sin, s.positions,
                                                   s.rows, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
  CUDA_CHECK_LAUNCH();
  if (q_w) {
    reduce_partials(dq_w, partials, blocks, s.head_dim, 2 * s.head_dim, accumulate_dw, stream);
    reduce_partials(dk_w, partials + s.head_dim, blocks, s.head_dim, 2 * s.head_dim, accumulate_dw, stream);
  }
}

}  // namespace anvil::cuda
