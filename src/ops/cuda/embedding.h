// Token embedding, CUDA backend: out (N, C) = table[ids]; dtable (V, C) F32 += scatter of dout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// An id outside [0, V) gives a zero row (and no gradient): the data layer validates ids.
void embedding_forward(__nv_bfloat16* out, const int32_t* ids, const __nv_bfloat16* table, int64_t n,
                       int64_t vocab, int64_t cols, cudaStream_t stream);
// accumulate false: dtable is zeroed first (rows no id names stay zero).
void embedding_backward(float* dtable, const int32_t* ids, const __nv_bfloat16* dout, int64_t n, int64_t vocab,
                        int64_t cols, bool accumulate, cudaStream_t stream);

}  // namespace anvil::cuda
