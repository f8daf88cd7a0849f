// Output projection fused with cross-entropy, CUDA backend (ops.h): the logits exist one
// chunk of rows at a time, never for the whole micro-batch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/gemm.h"

namespace anvil::cuda {

// The fp32 logits of one chunk take at most this many bytes (at least one row).
// Each chunk's dw GEMM reads and writes all of dw (V x C fp32), so fewer, larger chunks
// cost less: 512 MiB is 3 chunks for 2048 tokens at V = 151936.
constexpr size_t kCrossEntropyChunkBytes = size_t{512} << 20;

int64_t cross_entropy_chunk_rows(int64_t n, int64_t vocab);
size_t cross_entropy_scratch_bytes(int64_t n, int64_t vocab);

struct CrossEntropyArgs {
  float* loss_sum;                // (1) +=
  __nv_bfloat16* dh;              // (n, cols) written: d(loss_sum * loss_scale)/dh; null: loss only
  float* dw;                      // (vocab, cols) +=; null with dh
  const __nv_bfloat16* h;         // (n, cols)
  const __nv_bfloat16* w;         // (vocab, cols)
  const int32_t* targets;         // (n); outside [0, vocab) (PyTorch's -100): ignored
  float* logits;                  // (n, vocab) written when not null
  int64_t n, vocab, cols;
  float loss_scale;
};

void cross_entropy_forward_backward(const CrossEntropyArgs& a, void* scratch, Gemm& gemm, cudaStream_t stream);

}  // namespace anvil::cuda
