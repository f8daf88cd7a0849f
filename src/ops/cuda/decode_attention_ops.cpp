// The dispatch of attention against a KV cache (CudaOps, cuda_ops.h) to the kernels of
// decode_attention.cu.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/decode_attention.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;

void CudaOps::attention_cached_impl(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, Tensor slots,
                                    Tensor positions, int n_heads, int n_kv_heads) {
  cuda::DecodeAttentionShape s;
  s.rows = slots.numel();
  s.slots = k_cache.dim(0);
  s.positions = k_cache.dim(2);
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = static_cast<int>(k_cache.dim(3));
  cuda::attention_cached(p<nv_bf16>(out), p<nv_bf16>(qkv), p<nv_bf16>(k_cache), p<nv_bf16>(v_cache),
                         p<int32_t>(slots), p<int32_t>(positions), s, scratch(cuda::decode_attention_scratch_bytes(s)),
                         queue());
}

}  // namespace anvil
