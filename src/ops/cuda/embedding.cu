// Embedding forward (a row gather) and a deterministic backward.
//
// The backward must add every dout row of a token id into that id's row of dtable. Float
// atomics would make the sum order (and the bits) depend on timing, so instead the first
// occurrence of each id owns the id: its block finds that no earlier position holds the
// id, then walks all later positions in order, sums the matching dout rows in shared
// memory (every thread owns fixed columns, so the order of additions is the position
// order) and adds the sum to dtable once. Blocks of repeated positions exit after the
// scan. The scans cost O(N^2) id reads from L2 in total, small next to the row traffic
// for the token counts of a micro-batch (N up to tens of thousands).
#include "core/cuda/check.h"
#include "core/error.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/kernel_util.cuh"

namespace anvil::cuda {

constexpr int kThreads = 256;

template <int VEC>
static __global__ void embedding_fwd_kernel(__nv_bfloat16* out, const int32_t* ids, const __nv_bfloat16* table,
                                            int64_t vocab, int cols) {
  const int64_t n = blockIdx.x;
  const int64_t id = ids[n];
  const bool valid = id >= 0 && id < vocab;
  for (int c = threadIdx.x * VEC; c < cols; c += blockDim.x * VEC) {
    float v[VEC];
    if (valid) {
      load_bf16<VEC>(table + id * cols + c, v);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[i] = 0.0f;
    }
    store_bf16<VEC>(out + n * cols + c, v);
  }
}

static __global__ void embedding_bwd_kernel(float* dtable, const int32_t* ids, const __nv_bfloat16* dout,
                                            int64_t n_tokens, int64_t vocab, int cols) {
  extern __shared__ float acc[];  // (cols)
  __shared__ int earlier;
  __shared__ int matches[kThreads];
  __shared__ int warp_count[kThreads / 32];
  __shared__ int n_matches;
  const int64_t n = blockIdx.x;
  const int32_t id = ids[n];
  if (id < 0 || id >= vocab) return;
  if (threadIdx.x == 0) earlier = 0;
  __syncthreads();
  for (int64_t m = threadIdx.x; m < n; m += blockDim.x)
    if (ids[m] == id) earlier = 1;
  __syncthreads();
  if (earlier) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc[c] = 0.0f;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t base = n; base < n_tokens; base += blockDim.x) {
    const int64_t m = base + threadIdx.x;
    const bool hit = m < n_tokens && ids[m] == id;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
      int total = 0;
      for (int w = 0; w < kThreads / 32; ++w) {
        const int c = warp_count[w];
        warp_count[w] = total;
        total += c;
      }
      n_matches = total;
    }
    __syncthreads();
    if (hit) matches[warp_count[warp] + __popc(ballot & ((1u << lane) - 1u))] = static_cast<int>(m - base);
    __syncthreads();
    for (int k = 0; k < n_matches; ++k) {
      const __nv_bfloat16* row = dout + (base + matches[k]) * cols;
      for (int c = threadIdx.x; c < cols; c += blockDim.x) acc[c] += __bfloat162float(row[c]);
    }
    __syncthreads();
  }
  float* dst = dtable + static_cast<int64_t>(id) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] += acc[c];
}

void embedding_forward(__nv_bfloat16* out, const int32_t* ids, const __nv_bfloat16* table, int64_t n,
                       int64_t vocab, int64_t cols, cudaStream_t stream) {
  if (n == 0) return;
  const int c = static_cast<int>(cols);
  if (cols % 8 == 0 && aligned16(out) && aligned16(table))
    embedding_fwd_kernel<8><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(out, ids, table, vocab, c);
  else
    embedding_fwd_kernel<1><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(out, ids, table, vocab, c);
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dtable, const int32_t* ids, const __nv_bfloat16* dout, int64_t n, int64_t vocab,
                        int64_t cols, bool accumulate, cudaStream_t stream) {
  if (!accumulate)
    CUDA_CHECK(cudaMemsetAsync(dtable, 0, static_cast<size_t>(vocab * cols) * sizeof(float), stream));
  if (n == 0) return;
  ANVIL_ENSURE(cols <= kMaxSharedRow, kUnsupported, "embedding_backward: ", cols,
               " columns; the CUDA kernel handles up to ", kMaxSharedRow);
  embedding_bwd_kernel<<<static_cast<unsigned>(n), kThreads, static_cast<size_t>(cols) * sizeof(float), stream>>>(
      dtable, ids, dout, n, vocab, static_cast<int>(cols));
  CUDA_CHECK_LAUNCH();
}

}  // namespace anvil::cuda
