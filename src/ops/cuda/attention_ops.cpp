// Attention's dispatch (CudaOps, cuda_ops.h): cuDNN's fused attention (attention_cudnn.h)
// where ANVIL_ATTENTION and the shape allow, else the kernels of attention.cu. Packed
// documents whose lengths are given run on cuDNN's ragged path in the groups of
// ops/attention_ragged.h; given positions alone, or a layout cuDNN cannot run within the
// memory plan, they run on the kernels.
#include <vector>

#include "ops/attention_ragged.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cuda_ops.h"

namespace anvil {

using cuda::nv_bf16;
using cuda::p;
using cuda::present;

namespace {

// The kernels' shape of qkv (B, T, H+2KV, hd), which the front has checked.
cuda::AttentionShape attn_shape(const Tensor& qkv, int n_heads, int n_kv_heads) {
  cuda::AttentionShape s;
  s.batch = qkv.dim(0);
  s.seq = qkv.dim(1);
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.head_dim = static_cast<int>(qkv.dim(3));
  return s;
}

// The cuDNN calls of packed documents, or none (positions alone, or no layout within the bound).
std::vector<RaggedGroup> groups_of(const Documents& documents, const cuda::AttentionShape& s) {
  if (documents.lengths.empty()) return {};
  return ragged_groups(documents.lengths, s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
}

}  // namespace

void CudaOps::attention_forward_impl(Tensor out, Tensor lse, Tensor qkv, int n_heads, int n_kv_heads,
                                     const Documents& documents) {
  const cuda::AttentionShape s = attn_shape(qkv, n_heads, n_kv_heads);
  const int32_t* pos = present(documents.positions) ? p<int32_t>(documents.positions) : nullptr;
  if (cuda::CudnnAttention* dnn = cudnn_attention(s, false)) {
    if (!pos) {
      const int64_t ws = dnn->forward_workspace(s);
      if (ws >= 0 && dnn->forward(p<nv_bf16>(out), p<float>(lse), p<nv_bf16>(qkv), s, scratch(static_cast<size_t>(ws))))
        return;
    } else if (const std::vector<RaggedGroup> groups = groups_of(documents, s); !groups.empty()) {
      const int64_t ws = dnn->ragged_workspace(s, groups, false);
      if (ws >= 0 && dnn->forward_ragged(p<nv_bf16>(out), p<float>(lse), p<nv_bf16>(qkv), s, groups,
                                         scratch(static_cast<size_t>(ws))))
        return;
    }
  }
  cuda::attention_forward(p<nv_bf16>(out), p<float>(lse), p<nv_bf16>(qkv), pos, s, queue());
}

void CudaOps::attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_heads,
                                      int n_kv_heads, const Documents& documents) {
  const cuda::AttentionShape s = attn_shape(qkv, n_heads, n_kv_heads);
  const int32_t* pos = present(documents.positions) ? p<int32_t>(documents.positions) : nullptr;
  if (cuda::CudnnAttention* dnn = cudnn_attention(s, true)) {
    if (!pos) {
      const int64_t ws = dnn->backward_workspace(s);
      if (ws >= 0 && dnn->backward(p<nv_bf16>(dqkv), p<nv_bf16>(dout), p<nv_bf16>(qkv), p<nv_bf16>(out),
                                   p<float>(lse), s, scratch(static_cast<size_t>(ws))))
        return;
    } else if (const std::vector<RaggedGroup> groups = groups_of(documents, s); !groups.empty()) {
      const int64_t ws = dnn->ragged_workspace(s, groups, true);
      if (ws >= 0 && dnn->backward_ragged(p<nv_bf16>(dqkv), p<nv_bf16>(dout), p<nv_bf16>(qkv), p<nv_bf16>(out),
                                          p<float>(lse), s, groups, scratch(static_cast<size_t>(ws))))
        return;
    }
  }
  cuda::attention_backward(p<nv_bf16>(dqkv), p<nv_bf16>(dout), p<nv_bf16>(qkv), p<nv_bf16>(out), p<float>(lse), pos,
                           s, scratch(cuda::attention_backward_scratch_bytes(s)), queue());
}

}  // namespace anvil
