#include "ops/attention_scratch.h"

#include <algorithm>

namespace anvil {

int64_t cudnn_dp_bytes(int64_t batch, int64_t seq, int64_t n_heads) {
  const int64_t t128 = (seq + 127) / 128 * 128;
  return batch * n_heads * t128 * t128 * 2;
}

bool cudnn_backward_within_bound(int64_t batch, int64_t seq, int64_t n_heads) {
  return cudnn_dp_bytes(batch, seq, n_heads) <= kCudnnDpBound;
}

int64_t attention_scratch_bytes(int64_t batch, int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  (void)n_kv_heads;  // dK and dV are formed per query head in both paths
  const int64_t rows = batch * n_heads * seq;  // one per (sequence, q head, query)
  // The kernel (ops/cuda/attention.cu): row sums (padded to 256 bytes) + (B, T, H, 2, hd) fp32.
  const int64_t kernel = (rows * 4 + 255) / 256 * 256 + rows * 2 * head_dim * 4;
  // cuDNN's non-deterministic backward (ANVIL_ATTENTION=cudnn-nondeterministic): fp32
  // accumulators of 2 x hd per row, the row sums, and the engine's own (cuDNN 9.14 on an H200
  // asked rows x (8 hd + 4) + 256 bytes at sequence 32,768); 8 MiB covers the last.
  const int64_t nondeterministic = rows * 2 * head_dim * 4 + rows * 4 + (int64_t{8} << 20);
  if (!cudnn_backward_within_bound(batch, seq, n_heads)) return std::max(kernel, nondeterministic);
  // cuDNN: dP (bf16, T padded to 128 both ways), an fp32 dQ accumulator (its
  // non-deterministic algorithm), the row sums dO . O, and 8 MiB for the engine's own.
  const int64_t cudnn = cudnn_dp_bytes(batch, seq, n_heads) + rows * head_dim * 4 + rows * 4 + (int64_t{8} << 20);
  return std::max(kernel, cudnn);
}

}  // namespace anvil
