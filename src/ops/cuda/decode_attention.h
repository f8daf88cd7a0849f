// Attention of new rows against a KV cache (ops.h attention_cached): the inference path.
//
// Decode is one query row per sequence against all its cached positions, so the work is
// split along the keys (flash-decoding): a block takes one row, one kv head (all the q heads
// of its GQA group share the K and V reads) and a chunk of 64 positions, and writes the
// chunk's unnormalised output with its max and sum; a second kernel merges the chunks.
// Prefill rows go through the same kernels (a row attends to its positions 0..pos), in
// launches of as many rows as the scratch budget allows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

struct DecodeAttentionShape {
  int64_t rows = 0;       // R
  int64_t slots = 0;      // S
  int64_t positions = 0;  // P: the cache's positions per slot
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim a multiple of 8, at most 256
};

// Scratch for the chunk partials of the rows of one launch (capped; decode needs little).
size_t decode_attention_scratch_bytes(const DecodeAttentionShape& s);
// qkv (R, H + 2KV, hd) bf16; k_cache, v_cache (S, KV, P, hd) bf16; slots, positions (R) I32;
// out (R, H, hd) bf16.
void attention_cached(__nv_bfloat16* out, const __nv_bfloat16* qkv, __nv_bfloat16* k_cache,
                      __nv_bfloat16* v_cache, const int32_t* slots, const int32_t* positions,
                      const DecodeAttentionShape& s, void* scratch, cudaStream_t stream);

}  // namespace anvil::cuda
