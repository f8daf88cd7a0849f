// Fused AdamW: one pass reads param, grad, m, v and writes param, m, v (28 bytes per
// element; 26 with a bf16 gradient), in the order of operations of PyTorch's single-tensor AdamW:
//   param *= 1 - lr * wd;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g^2
//   param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// The bias corrections are computed once on the host in double precision. The same pass
// may write the bf16 compute copy of the new param (32 -> 30 bytes per element beside a
// separate convert) and zero the gradient it has read (instead of a memset pass). With split
// masters (one process: adamw_step_split) the param is read and written as its two 16-bit
// halves, the high one being the compute weight: 26 bytes per element with a bf16 gradient.
// Four elements per thread and iteration, as 16-byte loads and stores, where every buffer
// is aligned for it (the same arithmetic per element: the same bits as one at a time).
#include "core/cuda/check.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

constexpr int kThreads = 256;

struct AdamWConst {
  float step_size, decay;
};

// One element: p, m, v updated in place from the raw gradient g. Every rounding is explicit
// (no multiply-add left for the compiler to fuse or not), so the vector and the scalar
// loops, inlined apart, give the same bits.
__device__ __forceinline__ void update(float& p, float& m, float& v, float g, const AdamWArgs& a, AdamWConst k) {
  g = __fmul_rn(g, a.grad_scale);
  p = __fmul_rn(p, k.decay);
  m = __fmaf_rn(1.0f - a.beta1, __fsub_rn(g, m), m);
  v = __fmaf_rn(a.beta2, v, __fmul_rn(__fmul_rn(1.0f - a.beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), a.bias_correction2_sqrt), a.eps);
  p = __fmaf_rn(-k.step_size, __fdiv_rn(m, denom), p);
}

// Four gradient elements as one vector load (16 bytes of F32, 8 of BF16), widened.
// This thread's share of n elements in a grid-stride loop: quads first, first + stride, ...
// below n4 (none unless vec), then single elements from 4 * n4 + first on.
struct GridShare {
  int64_t first, stride, n4;
};
__device__ __forceinline__ GridShare grid_share(int64_t n, bool vec) {
  return {static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, static_cast<int64_t>(gridDim.x) * blockDim.x,
          vec ? n / 4 : 0};
}

__device__ __forceinline__ float4 load4(const float* g, int64_t q) { return reinterpret_cast<const float4*>(g)[q]; }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* g, int64_t q) {
  const uint2 raw = reinterpret_cast<const uint2*>(g)[q];
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float load1(const float* g, int64_t i) { return g[i]; }
__device__ __forceinline__ float load1(const __nv_bfloat16* g, int64_t i) { return __bfloat162float(g[i]); }

template <class G, bool COPY, bool ZERO>
__global__ void adamw_kernel(float* param, G* grad, float* m, float* v, __nv_bfloat16* copy, int64_t n, bool vec,
                             AdamWArgs a) {
  const AdamWConst k{a.lr / a.bias_correction1, 1.0f - a.lr * a.weight_decay};
  const GridShare share = grid_share(n, vec);
  for (int64_t q = share.first; q < share.n4; q += share.stride) {
    const float4 g4 = load4(grad, q);
    const float4 p4 = reinterpret_cast<const float4*>(param)[q];
    const float4 m4 = reinterpret_cast<const float4*>(m)[q];
    const float4 v4 = reinterpret_cast<const float4*>(v)[q];
    float gs[4] = {g4.x, g4.y, g4.z, g4.w}, ps[4] = {p4.x, p4.y, p4.z, p4.w};
    float ms[4] = {m4.x, m4.y, m4.z, m4.w}, vs[4] = {v4.x, v4.y, v4.z, v4.w};
    __nv_bfloat16 cs[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      update(ps[j], ms[j], vs[j], gs[j], a, k);
      cs[j] = __float2bfloat16_rn(ps[j]);
    }
    reinterpret_cast<float4*>(param)[q] = make_float4(ps[0], ps[1], ps[2], ps[3]);
    reinterpret_cast<float4*>(m)[q] = make_float4(ms[0], ms[1], ms[2], ms[3]);
    reinterpret_cast<float4*>(v)[q] = make_float4(vs[0], vs[1], vs[2], vs[3]);
    if constexpr (COPY) {
      reinterpret_cast<__nv_bfloat162*>(copy)[2 * q] = __nv_bfloat162{cs[0], cs[1]};
      reinterpret_cast<__nv_bfloat162*>(copy)[2 * q + 1] = __nv_bfloat162{cs[2], cs[3]};
    }
    if constexpr (ZERO) reinterpret_cast<float4*>(grad)[q] = make_float4(0.f, 0.f, 0.f, 0.f);  // F32 only
  }
  for (int64_t i = 4 * share.n4 + share.first; i < n; i += share.stride) {  // the tail, or everything when unaligned
    float p = param[i], mi = m[i], vi = v[i];
    update(p, mi, vi, load1(grad, i), a, k);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if constexpr (COPY) copy[i] = __float2bfloat16_rn(p);
    if constexpr (ZERO) grad[i] = 0.0f;
  }
}

// Split masters (adamw.h): join the halves, update, split (core/bf16.h, on the device).
__device__ __forceinline__ float join(uint16_t hi, int16_t lo) {
  return __uint_as_float((static_cast<uint32_t>(hi) << 16) + static_cast<uint32_t>(static_cast<int32_t>(lo)));
}
__device__ __forceinline__ void split(float f, uint16_t& hi, int16_t& lo) {
  const uint32_t u = __float_as_uint(f), h = (u + 0x8000u) >> 16;
  hi = static_cast<uint16_t>(h);
  lo = static_cast<int16_t>(static_cast<int32_t>(u - (h << 16)));
}

template <class G>
__global__ void adamw_split_kernel(uint16_t* hi, int16_t* lo, const G* grad, float* m, float* v, int64_t n, bool vec,
                                   AdamWArgs a) {
  const AdamWConst k{a.lr / a.bias_correction1, 1.0f - a.lr * a.weight_decay};
  const GridShare share = grid_share(n, vec);
  for (int64_t q = share.first; q < share.n4; q += share.stride) {
    const float4 g4 = load4(grad, q);
    const uint2 h4 = reinterpret_cast<const uint2*>(hi)[q], l4 = reinterpret_cast<const uint2*>(lo)[q];
    const float4 m4 = reinterpret_cast<const float4*>(m)[q];
    const float4 v4 = reinterpret_cast<const float4*>(v)[q];
    uint16_t hs[4], ls[4];
    static_assert(sizeof h4 == sizeof hs && sizeof l4 == sizeof ls);
    memcpy(hs, &h4, sizeof hs);
    memcpy(ls, &l4, sizeof ls);
    float gs[4] = {g4.x, g4.y, g4.z, g4.w}, ms[4] = {m4.x, m4.y, m4.z, m4.w}, vs[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float p = join(hs[j], static_cast<int16_t>(ls[j]));
      update(p, ms[j], vs[j], gs[j], a, k);
      int16_t l;
      split(p, hs[j], l);
      ls[j] = static_cast<uint16_t>(l);
    }
    uint2 ho, lo4;
    memcpy(&ho, hs, sizeof ho);
    memcpy(&lo4, ls, sizeof lo4);
    reinterpret_cast<uint2*>(hi)[q] = ho;
    reinterpret_cast<uint2*>(lo)[q] = lo4;
    reinterpret_cast<float4*>(m)[q] = make_float4(ms[0], ms[1], ms[2], ms[3]);
    reinterpret_cast<float4*>(v)[q] = make_float4(vs[0], vs[1], vs[2], vs[3]);
  }
  for (int64_t i = 4 * share.n4 + share.first; i < n; i += share.stride) {  // the tail, or everything when unaligned
    float p = join(hi[i], lo[i]), mi = m[i], vi = v[i];
    update(p, mi, vi, load1(grad, i), a, k);
    split(p, hi[i], lo[i]);
    m[i] = mi;
    v[i] = vi;
  }
}

template <class G, bool COPY, bool ZERO>
void launch(float* param, G* grad, float* m, float* v, __nv_bfloat16* copy, int64_t n, bool vec,
            const AdamWArgs& a, cudaStream_t stream) {
  const unsigned blocks = grid_stride_blocks(vec ? ceil_div(n, 4) : n, kThreads);
  adamw_kernel<G, COPY, ZERO><<<blocks, kThreads, 0, stream>>>(param, grad, m, v, copy, n, vec, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_step(float* param, void* grad, bool grad_bf16, float* m, float* v, __nv_bfloat16* copy, bool zero_grad,
                int64_t n, const AdamWArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  ANVIL_ENSURE(!(grad_bf16 && zero_grad), kInternal, "adamw_step: a bf16 gradient is not zeroed in the update");
  const uintptr_t grad_align = grad_bf16 ? 7u : 15u;  // one vector: four elements
  const bool vec = aligned16(param) && (reinterpret_cast<uintptr_t>(grad) & grad_align) == 0 && aligned16(m) &&
                   aligned16(v) && (!copy || (reinterpret_cast<uintptr_t>(copy) & 7u) == 0);
  if (grad_bf16) {
    auto* g = static_cast<__nv_bfloat16*>(grad);
    if (copy)
      launch<__nv_bfloat16, true, false>(param, g, m, v, copy, n, vec, a, stream);
    else
      launch<__nv_bfloat16, false, false>(param, g, m, v, copy, n, vec, a, stream);
    return;
  }
  auto* g = static_cast<float*>(grad);
  if (copy && zero_grad)
    launch<float, true, true>(param, g, m, v, copy, n, vec, a, stream);
  else if (copy)
    launch<float, true, false>(param, g, m, v, copy, n, vec, a, stream);
  else if (zero_grad)
    launch<float, false, true>(param, g, m, v, copy, n, vec, a, stream);
  else
    launch<float, false, false>(param, g, m, v, copy, n, vec, a, stream);
}

void adamw_step_split(uint16_t* hi, int16_t* lo, const void* grad, bool grad_bf16, float* m, float* v, int64_t n,
                      const AdamWArgs& a, cudaStream_t stream) {
  if (n == 0) return;
  const uintptr_t grad_align = grad_bf16 ? 7u : 15u;
  const bool vec = (reinterpret_cast<uintptr_t>(hi) & 7u) == 0 && (reinterpret_cast<uintptr_t>(lo) & 7u) == 0 &&
                   (reinterpret_cast<uintptr_t>(grad) & grad_align) == 0 && aligned16(m) && aligned16(v);
  const unsigned blocks = grid_stride_blocks(vec ? ceil_div(n, 4) : n, kThreads);
  if (grad_bf16)
    adamw_split_kernel<<<blocks, kThreads, 0, stream>>>(hi, lo, static_cast<const __nv_bfloat16*>(grad), m, v, n, vec,
                                                        a);
  else
    adamw_split_kernel<<<blocks, kThreads, 0, stream>>>(hi, lo, static_cast<const float*>(grad), m, v, n, vec, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
