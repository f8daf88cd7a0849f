// Output projection fused with cross-entropy, CUDA backend (ops.h): the logits exist one
// chunk of rows at a time, never for the whole micro-batch (ops/cross_entropy_chunks.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/gemm.h"

namespace anvil::cuda {

struct CrossEntropyArgs {
  float* loss_sum;                // (1) +=
  __nv_bfloat16* dh;              // (n, cols) written: d(loss_sum * loss_scale)/dh; null: loss only
  float* dw;                      // (vocab, cols) += (= when not accumulate_dw); null with dh
  const __nv_bfloat16* h;         // (n, cols)
  const __nv_bfloat16* w;         // (vocab, cols)
  const int32_t* targets;         // (n); outside [0, vocab) (PyTorch's -100): ignored
  float* logits;                  // (n, vocab) written when not null
  const float* row_weights;       // (n): each row's loss and gradient scaled by its weight; null: 1
  float* row_losses;              // (n): each row's unweighted loss written when not null
  int64_t n, vocab, cols;
  float loss_scale;
  bool accumulate_dw;
};

// scratch: cross_entropy_chunks(n, vocab).bytes
void cross_entropy_forward_backward(const CrossEntropyArgs& a, void* scratch, Gemm& gemm, cudaStream_t stream);

}  // namespace anvil::cuda
