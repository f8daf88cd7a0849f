#include <algorithm>

#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/decode_attention.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

constexpr int kChunk = 64;     // cached positions per block
constexpr int kThreads = 128;  // 4 warps
constexpr int kMaxGroup = 16;  // q heads per kv head
constexpr size_t kScratchBudget = size_t{64} << 20;

int64_t chunks_of(const DecodeAttentionShape& s) { return ceil_div(s.positions, kChunk); }

// Rows per launch: the partials of a launch fit the scratch budget.
int64_t rows_per_launch(const DecodeAttentionShape& s) {
  const int64_t per_row = static_cast<int64_t>(s.n_heads) * chunks_of(s) * (s.head_dim + 2) * 4;
  const int64_t rows = static_cast<int64_t>(kScratchBudget) / per_row;
  return std::max<int64_t>(1, std::min<int64_t>({rows, s.rows, 65535}));
}

// Each row's k and v into its slot at its position.
__global__ void kv_write_kernel(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* qkv,
                                const int32_t* slots, const int32_t* positions, int H, int KV, int hd, int64_t P) {
  const int64_t r = blockIdx.x;
  const int64_t slot = slots[r], pos = positions[r], heads = H + 2 * KV;
  for (int i = threadIdx.x; i < KV * hd; i += blockDim.x) {
    const int g = i / hd, d = i % hd;
    const int64_t dst = ((slot * KV + g) * P + pos) * hd + d;
    k_cache[dst] = qkv[(r * heads + H + g) * hd + d];
    v_cache[dst] = qkv[(r * heads + H + KV + g) * hd + d];
  }
}

// One (chunk, kv head, row): scores of the group's q heads against the chunk's keys, their
// max and sum of exponentials, and the unnormalised sum of the values.
__global__ void __launch_bounds__(kThreads)
    decode_partial_kernel(float* part_o, float* part_ml, const __nv_bfloat16* qkv, const __nv_bfloat16* k_cache,
                          const __nv_bfloat16* v_cache, const int32_t* slots, const int32_t* positions, int H, int KV,
                          int hd, int64_t P, int64_t chunks, float scale) {
  extern __shared__ float smem[];
  const int G = H / KV, g = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t c = blockIdx.x, r = blockIdx.z;
  const int64_t n = static_cast<int64_t>(positions[r]) + 1, start = c * kChunk;
  if (start >= n) return;  // beyond this row's causal reach: the merge skips the chunk
  const int cnt = static_cast<int>(min(static_cast<int64_t>(kChunk), n - start));
  const int64_t heads = H + 2 * KV;
  float* q = smem;           // (G, hd), scaled
  float* p = smem + G * hd;  // (G, kChunk)
  for (int i = tid; i < G * hd; i += kThreads)
    q[i] = __bfloat162float(qkv[(r * heads + g * G + i / hd) * hd + i % hd]) * scale;
  __syncthreads();
  const int64_t base = (static_cast<int64_t>(slots[r]) * KV + g) * P + start;  // first cached row
  for (int i = tid; i < G * kChunk; i += kThreads) {
    const int h = i / kChunk, j = i % kChunk;
    float s = -INFINITY;
    if (j < cnt) {
      const __nv_bfloat16* k = k_cache + (base + j) * hd;
      const float* qh = q + h * hd;
      s = 0.0f;
      for (int d = 0; d < hd; d += 8) {
        float kv[8];
        load_bf16<8>(k + d, kv);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += qh[d + e] * kv[e];
      }
    }
    p[h * kChunk + j] = s;
  }
  __syncthreads();
  for (int h = warp; h < G; h += kThreads / 32) {
    float* ph = p + h * kChunk;
    const float mx = warp_max(fmaxf(ph[lane], ph[lane + 32]));
    const float e0 = lane < cnt ? expf(ph[lane] - mx) : 0.0f;
    const float e1 = lane + 32 < cnt ? expf(ph[lane + 32] - mx) : 0.0f;
    ph[lane] = e0;
    ph[lane + 32] = e1;
    const float sum = warp_sum(e0 + e1);
    if (lane == 0) {
      float* ml = part_ml + ((r * H + g * G + h) * chunks + c) * 2;
      ml[0] = mx;
      ml[1] = sum;
    }
  }
  __syncthreads();
  for (int i = tid; i < G * hd; i += kThreads) {
    const int h = i / hd, d = i % hd;
    const float* ph = p + h * kChunk;
    const __nv_bfloat16* v = v_cache + base * hd + d;
    float acc = 0.0f;
#pragma unroll 8
    for (int j = 0; j < cnt; ++j) acc += ph[j] * __bfloat162float(v[static_cast<int64_t>(j) * hd]);
    part_o[((r * H + g * G + h) * chunks + c) * hd + d] = acc;
  }
}

// One (q head, row): the chunks merged in order (deterministic), normalised.
__global__ void decode_merge_kernel(__nv_bfloat16* out, const float* part_o, const float* part_ml,
                                    const int32_t* positions, int H, int hd, int64_t chunks) {
  const int h = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int64_t used = (static_cast<int64_t>(positions[r]) + kChunk) / kChunk;
  const float* ml = part_ml + (r * H + h) * chunks * 2;
  float m = -INFINITY;
  for (int64_t c = 0; c < used; ++c) m = fmaxf(m, ml[2 * c]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float l = 0.0f, acc = 0.0f;
    for (int64_t c = 0; c < used; ++c) {
      const float w = expf(ml[2 * c] - m);
      l += ml[2 * c + 1] * w;
      acc += part_o[((r * H + h) * chunks + c) * hd + d] * w;
    }
    out[(r * H + h) * hd + d] = __float2bfloat16_rn(acc / l);
  }
}

}  // namespace

size_t decode_attention_scratch_bytes(const DecodeAttentionShape& s) {
  return static_cast<size_t>(rows_per_launch(s) * s.n_heads * chunks_of(s) * (s.head_dim + 2)) * sizeof(float);
}

void attention_cached(__nv_bfloat16* out, const __nv_bfloat16* qkv, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                      const int32_t* slots, const int32_t* positions, const DecodeAttentionShape& s, void* scratch,
                      cudaStream_t stream) {
  if (s.rows == 0) return;
  const int H = s.n_heads, KV = s.n_kv_heads, hd = s.head_dim;
  ANVIL_ENSURE(KV > 0 && H % KV == 0 && H / KV <= kMaxGroup, kUnsupported, "attention_cached: ", H, " q heads over ",
               KV, " kv heads (the kernel takes up to ", kMaxGroup, " q heads per kv head)");
  ANVIL_ENSURE(hd % 8 == 0 && hd <= 256, kUnsupported, "attention_cached: head_dim ", hd,
               " (the kernel takes multiples of 8 up to 256)");
  ANVIL_ENSURE(aligned16(k_cache) && aligned16(v_cache), kInternal, "attention_cached: cache is not 16-byte aligned");
  kv_write_kernel<<<static_cast<unsigned>(s.rows), kThreads, 0, stream>>>(k_cache, v_cache, qkv, slots, positions, H,
                                                                          KV, hd, s.positions);
  CUDA_CHECK_LAUNCH();
  const int64_t chunks = chunks_of(s), step = rows_per_launch(s);
  const int G = H / KV;
  const size_t smem = static_cast<size_t>(G * hd + G * kChunk) * sizeof(float);
  float* part_o = static_cast<float*>(scratch);
  float* part_ml = part_o + step * H * chunks * hd;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const int64_t qkv_row = static_cast<int64_t>(H + 2 * KV) * hd;
  for (int64_t r0 = 0; r0 < s.rows; r0 += step) {
    const int64_t rows = std::min(step, s.rows - r0);
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(KV), static_cast<unsigned>(rows));
    decode_partial_kernel<<<grid, kThreads, smem, stream>>>(part_o, part_ml, qkv + r0 * qkv_row, k_cache, v_cache,
                                                            slots + r0, positions + r0, H, KV, hd, s.positions,
                                                            chunks, scale);
    CUDA_CHECK_LAUNCH();
    decode_merge_kernel<<<dim3(static_cast<unsigned>(H), static_cast<unsigned>(rows)), std::min(hd, 128), 0,
                          stream>>>(out + r0 * H * hd, part_o, part_ml, positions + r0, H, hd, chunks);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace anvil::cuda
