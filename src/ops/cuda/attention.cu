// Causal GQA flash attention, forward and backward, on mma.sync m16n8k16 (bf16 in, fp32
// accumulate; sm_80 and later), in the FlashAttention-2 scheme.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): lane = 4 g + t.
//   A (16 x 16, row-major): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16 x 8, k x n):      b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16 x 8):             c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// so the C fragments of two adjacent n-tiles are, packed to bf16, the A fragment of the
// next product (P . V without a trip through shared memory).
//
// Forward: a block of 4 warps owns 64 queries of one (batch, head), each warp 16 rows; it
// streams 64-key tiles of K and V up to the diagonal and keeps an online softmax (max and
// sum per row, in the exp2 domain). lse is saved for backward.
// Backward, deterministic (no atomics), in four kernels:
//   dsum = rowsum(dout * out) per query;
//   dK, dV per q head: a block owns 64 keys of one (batch, q head), loops over the 32-query
//     tiles at or after its keys and computes S^T, P^T, dV += P^T dO, dP^T = V dO^T,
//     dS^T = P^T (dP^T - dsum), dK += dS^T Q, into fp32 partials (B, T, H, 2, hd); one block
//     per q head (not per kv head) halves the longest chain of tiles under GQA;
//   the partials of the q heads of each kv group are summed in head order into dqkv;
//   dQ: a block owns 64 queries of one (batch, head), loops over 32-key tiles up to the
//     diagonal, recomputes P and dS and accumulates dQ += dS K.
// The recomputation in the dQ kernel costs 3 of the 7 matrix products of backward, the
// price of writing every gradient exactly once.
// Packed documents (positions, ops.h): query q attends to keys first(q) .. q, first(q) =
// q - positions[q]. Documents start in order, so the keys of a tile of queries start at its
// first query's first key, and the queries that attend to a tile of keys end where the next
// document after the tile's last key begins (a binary search): the loops run over those
// tiles only, so attention costs what the documents' own attention costs.
// Tiles stream through two shared-memory stages with cp.async: the next tile loads while
// the current one is used.
// Fragments come from shared memory through ldmatrix (four 8x8 matrices per instruction;
// .trans for operands stored k-major). Shared rows are padded by 8 bf16 (16 bytes), so the
// eight 16-byte row reads of each 8x8 matrix fall in distinct banks.
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = 128;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t ld_pair(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix: four 8x8 bf16 matrices from shared memory; lanes 8i..8i+7 give the row
// addresses of matrix i, and lane 4g+t receives row g, columns 2t..2t+1 of each matrix
// (with .trans: row 2t..2t+1, column g), which is the mma fragment layout.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// A fragment of rows [0, 16) and columns [0, 16) of a row-major shared tile (row stride ld).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int ld, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4(a, tile + ((i & 1) * 8 + r) * ld + (i >> 1) * 8);
}

// B fragments of two n-tiles (n 0..15, k 0..15) of a shared tile stored [n][k]:
// b[0], b[1] for n 0..7 and b[2], b[3] for n 8..15.
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const bf16* tile, int ld, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4(b, tile + ((i >> 1) * 8 + r) * ld + (i & 1) * 8);
}

// The same from a shared tile stored [k][n] (transposed on the fly).
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const bf16* tile, int ld, int lane) {
  const int i = lane >> 3, r = lane & 7;
  ldsm_x4_trans(b, tile + ((i & 1) * 8 + r) * ld + (i >> 1) * 8);
}

// The A fragment (16 x 16) formed by the C fragments of n-tiles 2j and 2j+1.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// acc (16 x N, N / 8 C fragments) += c (16 x K, the C fragments of a product, as the A
// operand) . B (K x N), B a shared tile stored [k][n] with row stride LD.
template <int K, int N, int LD>
__device__ __forceinline__ void mma_c_kn(float (&acc)[N / 8][4], const float (&c)[K / 8][4], const bf16* b,
                                         int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    c_to_a(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bb[4];
      load_b_kn(bb, b + kk * 16 * LD + np * 16, LD, lane);
      mma(acc[2 * np], a, bb[0], bb[1]);
      mma(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

// acc (16 x N) += A (16 x K) . B^T, A and B shared tiles stored [m][k] and [n][k] (row stride LD).
template <int K, int N, int LD>
__device__ __forceinline__ void mma_nk(float (&acc)[N / 8][4], const bf16* a_tile, const bf16* b, int lane) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    load_a(a, a_tile + kk * 16, LD, lane);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bb[4];
      load_b_nk(bb, b + np * 16 * LD + kk * 16, LD, lane);
      mma(acc[2 * np], a, bb[0], bb[1]);
      mma(acc[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero_frags(float (&acc)[N][4]) {
#pragma unroll
  for (int nt = 0; nt < N; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
}

// 16 bytes global -> shared without passing through registers (cp.async, sm_80+); with
// in == false nothing is read and the destination is zero-filled.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(in ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most one committed group is still in flight (the one just issued).
__device__ __forceinline__ void cp_async_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::); }

// The first key of query q's document: q - positions[q] (pos: the sequence's positions), or 0
// without positions and for rows past T.
__device__ __forceinline__ int doc_first(const int32_t* pos, int q, int T) {
  return pos != nullptr && q < T ? q - __ldg(pos + q) : 0;
}

// One past the last query that attends to a key below key_end (> 0): the queries whose
// document starts below key_end are a prefix of those at or after it.
__device__ __forceinline__ int queries_end(const int32_t* pos, int key_end, int T) {
  if (pos == nullptr) return T;
  int lo = key_end, hi = T;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (doc_first(pos, mid, T) < key_end) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Starts copying rows [row0, row0 + NROWS) of one head (row stride `stride` elements) into a
// shared tile [NROWS][LD]; rows at or past `limit` become zero (never garbage: 0 * NaN would
// poison P.V).
template <int HD, int LD, int NROWS>
__device__ __forceinline__ void load_tile_async(bf16* dst, const bf16* src, int64_t stride, int row0, int limit) {
  constexpr int kVecs = HD / 8;
  for (int i = threadIdx.x; i < NROWS * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * 8;
    const bool in = row0 + r < limit;
    cp_async16(dst + r * LD + c, in ? src + static_cast<int64_t>(row0 + r) * stride + c : src, in);
  }
}

}  // namespace

// Stage j & 1 of a two-stage buffer of key tiles (2 x (K, V) x [BK][LD]): K and V of kv head
// kvh for keys [j * BK, + BK) of the sequence seq (rows of `stride` elements), started.
template <int HD, int LD, int BK>
__device__ __forceinline__ void load_kv_stage(bf16* kv_buf, int j, const bf16* seq, int64_t stride, int H, int KV,
                                              int kvh, int T) {
  bf16* dst = kv_buf + (j & 1) * 2 * BK * LD;
  load_tile_async<HD, LD, BK>(dst, seq + (H + kvh) * HD, stride, j * BK, T);
  load_tile_async<HD, LD, BK>(dst + BK * LD, seq + (H + KV + kvh) * HD, stride, j * BK, T);
}

template <int HD>
static __global__ void __launch_bounds__(kThreads) attn_fwd_kernel(bf16* out, float* lse, const bf16* qkv,
                                                                   const int32_t* positions, int T, int H, int KV,
                                                                   float scale_log2) {
  constexpr int BQ = 64, BK = 64, LD = HD + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* const kv_buf = reinterpret_cast<bf16*>(smem_raw);  // 2 stages x (K, V) x [BK][LD]
  const int qtile = gridDim.x - 1 - blockIdx.x;  // the longest rows first
  const int b = blockIdx.y / H, h = blockIdx.y % H, kvh = h / (H / KV);
  const int64_t stride = static_cast<int64_t>(H + 2 * KV) * HD;
  const bf16* seq = qkv + static_cast<int64_t>(b) * T * stride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = qtile * BQ + warp * 16;
  const int32_t* pos = positions ? positions + static_cast<int64_t>(b) * T : nullptr;
  const int warp_first = doc_first(pos, q0, T);
  const int row_first[2] = {doc_first(pos, q0 + g, T), doc_first(pos, q0 + g + 8, T)};

  uint32_t qf[HD / 16][4];
  {
    const int r0 = q0 + g, r1 = q0 + g + 8;
    const bf16* p0 = seq + static_cast<int64_t>(r0) * stride + h * HD;
    const bf16* p1 = seq + static_cast<int64_t>(r1) * stride + h * HD;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      qf[kk][0] = r0 < T ? ld_pair(p0 + kk * 16 + 2 * t) : 0u;
      qf[kk][1] = r1 < T ? ld_pair(p1 + kk * 16 + 2 * t) : 0u;
      qf[kk][2] = r0 < T ? ld_pair(p0 + kk * 16 + 2 * t + 8) : 0u;
      qf[kk][3] = r1 < T ? ld_pair(p1 + kk * 16 + 2 * t + 8) : 0u;
    }
  }
  float o[HD / 8][4];
  zero_frags(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int n_tiles = (min(T, (qtile + 1) * BQ) + BK - 1) / BK;
  const int j_first = doc_first(pos, qtile * BQ, T) / BK;
  const auto issue = [&](int j) { load_kv_stage<HD, LD, BK>(kv_buf, j, seq, stride, H, KV, kvh, T); };
  issue(j_first);
  cp_async_commit();
  for (int j = j_first; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue(j + 1);  // the next tile streams in while this one is used
    cp_async_commit();
    cp_async_wait_prev();
    __syncthreads();
    const int k0 = j * BK;
    const bf16* ks = kv_buf + (j & 1) * 2 * BK * LD;
    const bf16* vs = ks + BK * LD;
    // Else every key of the tile is after every query of the warp, or before their documents.
    if (k0 <= q0 + 15 && k0 + BK > warp_first) {
      float s[BK / 8][4];
      zero_frags(s);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
        for (int np = 0; np < BK / 16; ++np) {
          uint32_t bb[4];
          load_b_nk(bb, ks + np * 16 * LD + kk * 16, LD, lane);
          mma(s[2 * np], qf[kk], bb[0], bb[1]);
          mma(s[2 * np + 1], qf[kk], bb[2], bb[3]);
        }

#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = q0 + g + 8 * r;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int key = k0 + nt * 8 + 2 * t + c;
            const float v = key <= q && key >= row_first[r] ? s[nt][2 * r + c] * scale_log2 : -INFINITY;
            s[nt][2 * r + c] = v;
            mx = fmaxf(mx, v);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // Without documents every row of a tile that is not skipped has a key at or before it,
        // so m_new is finite; a row whose document starts after the tile has none yet (m_new
        // -inf), and its scale and probabilities must be 0, not NaN.
        const float m_new = fmaxf(m[r], mx), m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = exp2f(m[r] - m_use);
        m[r] = m_new;
        l[r] *= alpha;
#pragma unroll
        for (int nt = 0; nt < HD / 8; ++nt) {
          o[nt][2 * r] *= alpha;
          o[nt][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p = exp2f(s[nt][2 * r + c] - m_use);
            s[nt][2 * r + c] = p;
            l[r] += p;
          }
      }

      mma_c_kn<BK, HD, LD>(o, s, vs, lane);
    }
    __syncthreads();  // the stage is refilled by the issue of iteration j + 1
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int q = q0 + g + 8 * r;
    if (q >= T) continue;
    const float inv = 1.0f / l[r];
    bf16* dst = out + ((static_cast<int64_t>(b) * T + q) * H + h) * HD;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt)
      *reinterpret_cast<uint32_t*>(dst + nt * 8 + 2 * t) = pack_bf16(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
    if (t == 0) lse[(static_cast<int64_t>(b) * H + h) * T + q] = (m[r] + log2f(l[r])) * kLn2;
  }
}

// dsum (B, H, T) = rowsum(dout * out): one warp per (b, t, h).
static __global__ void attn_bwd_dsum_kernel(float* dsum, const bf16* dout, const bf16* out, int64_t units, int T, int H,
                                            int hd) {
  const int64_t u = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (u >= units) return;
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int i = lane; i < hd; i += 32) s += __bfloat162float(dout[u * hd + i]) * __bfloat162float(out[u * hd + i]);
  s = warp_sum(s);
  const int h = static_cast<int>(u % H);
  const int64_t bt = u / H, b = bt / T, q = bt % T;
  if (lane == 0) dsum[(b * H + h) * T + q] = s;
}

// dK, dV of one q head for one 64-key tile: written as fp32 partials (B, T, H, 2, hd),
// summed over the q heads of each kv group by attn_bwd_kv_reduce_kernel.
template <int HD>
static __global__ void __launch_bounds__(kThreads)
    attn_bwd_dkv_kernel(float* partial, const bf16* qkv, const bf16* dout, const float* lse, const float* dsum,
                        const int32_t* positions, int T, int H, int KV, float scale_log2, float scale) {
  constexpr int BK = 64, BQ = 32, LD = HD + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);
  bf16* vs = ks + BK * LD;
  bf16* qdo = vs + BK * LD;  // 2 stages x (Q, dO) x [BQ][LD]
  float* stats = reinterpret_cast<float*>(qdo + 2 * 2 * BQ * LD);  // 2 stages x (lse, dsum) x [BQ]
  int* firsts = reinterpret_cast<int*>(stats + 2 * 2 * BQ);         // 2 stages x [BQ]: doc_first

  const int b = blockIdx.y / H, h = blockIdx.y % H, kvh = h / (H / KV);
  const int64_t stride = static_cast<int64_t>(H + 2 * KV) * HD;
  const bf16* seq = qkv + static_cast<int64_t>(b) * T * stride;
  const bf16* dseq = dout + static_cast<int64_t>(b) * T * H * HD;
  const float* lse_h = lse + (static_cast<int64_t>(b) * H + h) * T;
  const float* dsum_h = dsum + (static_cast<int64_t>(b) * H + h) * T;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k_begin = blockIdx.x * BK, key0 = k_begin + warp * 16;
  const int32_t* pos = positions ? positions + static_cast<int64_t>(b) * T : nullptr;

  // Stage j holds the query tile [k_begin + j*BQ, +BQ): Q, dO, lse (log2 units; +inf past T
  // so that P is exactly 0 there), dsum and each query's first key.
  const int n_tiles = (queries_end(pos, min(T, k_begin + BK), T) - k_begin + BQ - 1) / BQ;
  const auto issue = [&](int j) {
    const int qb = k_begin + j * BQ;
    bf16* q_dst = qdo + (j & 1) * 2 * BQ * LD;
    load_tile_async<HD, LD, BQ>(q_dst, seq + h * HD, stride, qb, T);
    load_tile_async<HD, LD, BQ>(q_dst + BQ * LD, dseq + h * HD, static_cast<int64_t>(H) * HD, qb, T);
    if (threadIdx.x < BQ) {
      const int q = qb + threadIdx.x;
      float* st = stats + (j & 1) * 2 * BQ;
      st[threadIdx.x] = q < T ? lse_h[q] * kLog2e : INFINITY;
      st[BQ + threadIdx.x] = q < T ? dsum_h[q] : 0.0f;
      firsts[(j & 1) * BQ + threadIdx.x] = doc_first(pos, q, T);
    }
  };
  load_tile_async<HD, LD, BK>(ks, seq + (H + kvh) * HD, stride, k_begin, T);
  load_tile_async<HD, LD, BK>(vs, seq + (H + KV + kvh) * HD, stride, k_begin, T);
  issue(0);
  cp_async_commit();

  float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) dk[nt][i] = dv[nt][i] = 0.0f;

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue(j + 1);
    cp_async_commit();
    cp_async_wait_prev();
    __syncthreads();
    const int qb = k_begin + j * BQ;
    const bf16* qs = qdo + (j & 1) * 2 * BQ * LD;
    const bf16* dos = qs + BQ * LD;
    const float* lse_s = stats + (j & 1) * 2 * BQ;
    const float* d_s = lse_s + BQ;
    const int* first_s = firsts + (j & 1) * BQ;
    // Else every query of the tile is before every key of the warp, or in a later document.
    if (qb + BQ - 1 >= key0 && first_s[0] <= key0 + 15) {
      float st[BQ / 8][4];  // S^T, then P^T: rows = the warp's 16 keys, columns = 32 queries
      zero_frags(st);
      mma_nk<HD, BQ, LD>(st, ks + warp * 16 * LD, qs, lane);
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = key0 + g + (i >= 2 ? 8 : 0), ql = nt * 8 + 2 * t + (i & 1);
          st[nt][i] = key <= qb + ql && key >= first_s[ql] ? exp2f(st[nt][i] * scale_log2 - lse_s[ql]) : 0.0f;
        }

      mma_c_kn<BQ, HD, LD>(dv, st, dos, lane);  // dV += P^T dO

      float ds[BQ / 8][4];  // dP^T = V dO^T, then dS^T
      zero_frags(ds);
      mma_nk<HD, BQ, LD>(ds, vs + warp * 16 * LD, dos, lane);
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) ds[nt][i] = st[nt][i] * (ds[nt][i] - d_s[nt * 8 + 2 * t + (i & 1)]);

      mma_c_kn<BQ, HD, LD>(dk, ds, qs, lane);  // dK += dS^T Q
    }
    __syncthreads();  // the stage is refilled by the issue of iteration j + 1
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + g + 8 * r;
    if (key >= T) continue;
    float* dst = partial + ((static_cast<int64_t>(b) * T + key) * H + h) * 2 * HD;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      *reinterpret_cast<float2*>(dst + nt * 8 + 2 * t) = make_float2(dk[nt][2 * r] * scale, dk[nt][2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dst + HD + nt * 8 + 2 * t) = make_float2(dv[nt][2 * r], dv[nt][2 * r + 1]);
    }
  }
}

// dk, dv of each kv head = the sum over the q heads of its group, in head order.
static __global__ void attn_bwd_kv_reduce_kernel(bf16* dqkv, const float* partial, int64_t units, int H, int KV,
                                                 int hd) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= units) return;
  const int d = static_cast<int>(i % hd);
  int64_t rest = i / hd;
  const int c = static_cast<int>(rest % 2);  // 0: dk, 1: dv
  rest /= 2;
  const int kvh = static_cast<int>(rest % KV);
  const int64_t bt = rest / KV;
  const int group = H / KV;
  float s = 0.0f;
  for (int hq = 0; hq < group; ++hq) s += partial[((bt * H + kvh * group + hq) * 2 + c) * hd + d];
  dqkv[(bt * (H + 2 * KV) + H + c * KV + kvh) * hd + d] = __float2bfloat16_rn(s);
}

template <int HD>
static __global__ void __launch_bounds__(kThreads)
    attn_bwd_dq_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* dsum,
                       const int32_t* positions, int T, int H, int KV, float scale_log2, float scale) {
  constexpr int BQ = 64, BK = 32, LD = HD + 8;
  __shared__ __align__(16) bf16 kv_buf[2 * 2 * BK * LD];  // 2 stages x (K, V) x [BK][LD]
  const int qtile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, kvh = h / (H / KV);
  const int64_t stride = static_cast<int64_t>(H + 2 * KV) * HD;
  const bf16* seq = qkv + static_cast<int64_t>(b) * T * stride;
  const bf16* dseq = dout + static_cast<int64_t>(b) * T * H * HD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int q0 = qtile * BQ + warp * 16;
  const int32_t* pos = positions ? positions + static_cast<int64_t>(b) * T : nullptr;
  const int warp_first = doc_first(pos, q0, T);
  const int row_first[2] = {doc_first(pos, q0 + g, T), doc_first(pos, q0 + g + 8, T)};

  const int n_tiles = (min(T, (qtile + 1) * BQ) + BK - 1) / BK;
  const int j_first = doc_first(pos, qtile * BQ, T) / BK;
  const auto issue = [&](int j) { load_kv_stage<HD, LD, BK>(kv_buf, j, seq, stride, H, KV, kvh, T); };
  issue(j_first);
  cp_async_commit();

  uint32_t qf[HD / 16][4], df[HD / 16][4];
  float lse2[2], dd[2];
  {
    const int r0 = q0 + g, r1 = q0 + g + 8;
    const bf16* p0 = seq + static_cast<int64_t>(r0) * stride + h * HD;
    const bf16* p1 = seq + static_cast<int64_t>(r1) * stride + h * HD;
    const bf16* e0 = dseq + (static_cast<int64_t>(r0) * H + h) * HD;
    const bf16* e1 = dseq + (static_cast<int64_t>(r1) * H + h) * HD;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      qf[kk][0] = r0 < T ? ld_pair(p0 + kk * 16 + 2 * t) : 0u;
      qf[kk][1] = r1 < T ? ld_pair(p1 + kk * 16 + 2 * t) : 0u;
      qf[kk][2] = r0 < T ? ld_pair(p0 + kk * 16 + 2 * t + 8) : 0u;
      qf[kk][3] = r1 < T ? ld_pair(p1 + kk * 16 + 2 * t + 8) : 0u;
      df[kk][0] = r0 < T ? ld_pair(e0 + kk * 16 + 2 * t) : 0u;
      df[kk][1] = r1 < T ? ld_pair(e1 + kk * 16 + 2 * t) : 0u;
      df[kk][2] = r0 < T ? ld_pair(e0 + kk * 16 + 2 * t + 8) : 0u;
      df[kk][3] = r1 < T ? ld_pair(e1 + kk * 16 + 2 * t + 8) : 0u;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = q0 + g + 8 * r;
      const int64_t idx = (static_cast<int64_t>(b) * H + h) * T + q;
      lse2[r] = q < T ? lse[idx] * kLog2e : INFINITY;
      dd[r] = q < T ? dsum[idx] : 0.0f;
    }
  }
  float dq[HD / 8][4];
  zero_frags(dq);

  for (int j = j_first; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) issue(j + 1);
    cp_async_commit();
    cp_async_wait_prev();
    __syncthreads();
    const int k0 = j * BK;
    const bf16* ks = kv_buf + (j & 1) * 2 * BK * LD;
    const bf16* vs = ks + BK * LD;
    if (k0 <= q0 + 15 && k0 + BK > warp_first) {
      float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nt][i] = dp[nt][i] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk)
#pragma unroll
        for (int np = 0; np < BK / 16; ++np) {
          uint32_t bb[4];
          load_b_nk(bb, ks + np * 16 * LD + kk * 16, LD, lane);
          mma(s[2 * np], qf[kk], bb[0], bb[1]);
          mma(s[2 * np + 1], qf[kk], bb[2], bb[3]);
          load_b_nk(bb, vs + np * 16 * LD + kk * 16, LD, lane);
          mma(dp[2 * np], df[kk], bb[0], bb[1]);
          mma(dp[2 * np + 1], df[kk], bb[2], bb[3]);
        }
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int q = q0 + g + (i >= 2 ? 8 : 0), key = k0 + nt * 8 + 2 * t + (i & 1);
          const float p = key <= q && key >= row_first[i >> 1] ? exp2f(s[nt][i] * scale_log2 - lse2[i >> 1]) : 0.0f;
          s[nt][i] = p * (dp[nt][i] - dd[i >> 1]);
        }
      mma_c_kn<BK, HD, LD>(dq, s, ks, lane);  // dQ += dS K
    }
    __syncthreads();  // the stage is refilled by the issue of iteration j + 1
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = q0 + g + 8 * r;
    if (q >= T) continue;
    bf16* dst = dqkv + (static_cast<int64_t>(b) * T + q) * stride + h * HD;
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt)
      *reinterpret_cast<uint32_t*>(dst + nt * 8 + 2 * t) = pack_bf16(dq[nt][2 * r] * scale, dq[nt][2 * r + 1] * scale);
  }
}

static void check_shape(const AttentionShape& s, const void* qkv, const void* other) {
  ANVIL_ENSURE(s.head_dim == 16 || s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128, kUnsupported,
               "attention: head_dim ", s.head_dim, "; the CUDA kernels handle 16, 32, 64 and 128");
  ANVIL_ENSURE(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, kInvalidInput, "attention: ", s.n_heads,
               " query heads are not a multiple of ", s.n_kv_heads, " kv heads");
  ANVIL_ENSURE(s.seq <= (int64_t{1} << 30) && s.batch * s.n_heads <= 65535, kUnsupported,
               "attention: batch x heads ", s.batch * s.n_heads, " or sequence ", s.seq, " too large for one launch");
  ANVIL_ENSURE(aligned16(qkv) && aligned16(other), kInternal, "attention: qkv and dout must be 16-byte aligned");
}

template <int HD>
static void launch_fwd(bf16* out, float* lse, const bf16* qkv, const int32_t* positions, const AttentionShape& s,
                       cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(s.seq, 64)), static_cast<unsigned>(s.batch * s.n_heads));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HD));
  const size_t smem = static_cast<size_t>(2 * 2 * 64 * (HD + 8)) * sizeof(bf16);
  CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  attn_fwd_kernel<HD><<<grid, kThreads, smem, stream>>>(out, lse, qkv, positions, static_cast<int>(s.seq), s.n_heads,
                                                        s.n_kv_heads, scale_log2);
  CUDA_CHECK_LAUNCH();
}

void attention_forward(bf16* out, float* lse, const bf16* qkv, const int32_t* positions, const AttentionShape& s,
                       cudaStream_t stream) {
  check_shape(s, qkv, qkv);
  if (s.batch * s.seq == 0) return;
  switch (s.head_dim) {
    case 16: launch_fwd<16>(out, lse, qkv, positions, s, stream); break;
    case 32: launch_fwd<32>(out, lse, qkv, positions, s, stream); break;
    case 64: launch_fwd<64>(out, lse, qkv, positions, s, stream); break;
    default: launch_fwd<128>(out, lse, qkv, positions, s, stream); break;
  }
}

namespace {
size_t dsum_bytes(const AttentionShape& s) {
  return (static_cast<size_t>(s.batch * s.n_heads * s.seq) * sizeof(float) + 255) / 256 * 256;
}
}  // namespace

size_t attention_backward_scratch_bytes(const AttentionShape& s) {
  return dsum_bytes(s) + static_cast<size_t>(s.batch * s.seq * s.n_heads) * 2 * static_cast<size_t>(s.head_dim) *
                             sizeof(float);
}

template <int HD>
static void launch_bwd(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* dsum,
                       const int32_t* positions, float* partial, const AttentionShape& s, cudaStream_t stream) {
  constexpr int LD = HD + 8;
  const float scale = 1.0f / sqrtf(static_cast<float>(HD)), scale_log2 = scale * kLog2e;
  const int T = static_cast<int>(s.seq);
  const size_t smem = static_cast<size_t>((2 * 64 + 2 * 2 * 32) * LD) * sizeof(bf16) + 2 * 2 * 32 * sizeof(float) +
                      2 * 32 * sizeof(int);
  CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkv_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(ceil_div(s.seq, 64)), static_cast<unsigned>(s.batch * s.n_heads));
  attn_bwd_dkv_kernel<HD><<<grid, kThreads, smem, stream>>>(partial, qkv, dout, lse, dsum, positions, T, s.n_heads,
                                                            s.n_kv_heads, scale_log2, scale);
  CUDA_CHECK_LAUNCH();
  const int64_t units = s.batch * s.seq * s.n_kv_heads * 2 * HD;
  attn_bwd_kv_reduce_kernel<<<static_cast<unsigned>(ceil_div(units, 256)), 256, 0, stream>>>(
      dqkv, partial, units, s.n_heads, s.n_kv_heads, HD);
  CUDA_CHECK_LAUNCH();
  attn_bwd_dq_kernel<HD><<<grid, kThreads, 0, stream>>>(dqkv, qkv, dout, lse, dsum, positions, T, s.n_heads,
                                                        s.n_kv_heads, scale_log2, scale);
  CUDA_CHECK_LAUNCH();
}

void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const int32_t* positions, const AttentionShape& s, void* scratch, cudaStream_t stream) {
  check_shape(s, qkv, dout);
  if (s.batch * s.seq == 0) return;
  float* dsum = static_cast<float*>(scratch);
  float* partial = reinterpret_cast<float*>(static_cast<char*>(scratch) + dsum_bytes(s));
  const int64_t units = s.batch * s.seq * s.n_heads;
  attn_bwd_dsum_kernel<<<static_cast<unsigned>(ceil_div(units, 8)), 256, 0, stream>>>(
      dsum, dout, out, units, static_cast<int>(s.seq), s.n_heads, s.head_dim);
  CUDA_CHECK_LAUNCH();
  switch (s.head_dim) {
    case 16: launch_bwd<16>(dqkv, dout, qkv, lse, dsum, positions, partial, s, stream); break;
    case 32: launch_bwd<32>(dqkv, dout, qkv, lse, dsum, positions, partial, s, stream); break;
    case 64: launch_bwd<64>(dqkv, dout, qkv, lse, dsum, positions, partial, s, stream); break;
    default: launch_bwd<128>(dqkv, dout, qkv, lse, dsum, positions, partial, s, stream); break;
  }
}

}  // namespace anvil::cuda
