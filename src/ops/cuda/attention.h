// Causal GQA attention of the CUDA backend (ops.h): a flash-attention kernel of our own on
// the bf16 tensor cores (mma.sync m16n8k16, sm_80 and later), scale 1/sqrt(head_dim), over
// whole sequences or the documents packed in them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim 16, 32, 64 or 128
};

// qkv (B, T, H + 2KV, hd); out (B, T, H, hd); lse (B, H, T) F32 (natural log).
// positions (B*T), or null: each token's position in its document, ops.h (block-diagonal causal).
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const int32_t* positions,
                       const AttentionShape& s, cudaStream_t stream);

size_t attention_backward_scratch_bytes(const AttentionShape& s);
// dqkv (B, T, H + 2KV, hd) written.
void attention_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                        const __nv_bfloat16* out, const float* lse, const int32_t* positions, const AttentionShape& s,
                        void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
