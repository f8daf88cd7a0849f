// The temporary device memory one attention call may take, for the memory plan (plan/memory_plan.h).
//
// The CUDA backend's attention takes its temporaries from the backend's shared scratch
// buffer: the mma.sync kernel's backward its row sums and fp32 dK/dV partials, cuDNN's fused
// attention its workspace. cuDNN's deterministic backward on Hopper keeps dP of every
// (query, key) pair in bf16 instead of accumulating dQ with atomics, B x H x T x T x 2
// bytes (T padded to 128): it grows as T^2, 64 GiB for Qwen3-8B at 32,768 tokens. Up to
// kCudnnDpBound of dP the bound is the larger of the two paths' needs and cuDNN runs; beyond
// it the backward runs cuDNN's non-deterministic algorithm (fp32 dQ accumulated by atomics)
// or the kernel (ANVIL_ATTENTION, ops/cuda/attention_cudnn.h), whose scratch grows as T, and
// the bound is the larger of theirs (the forward, cuDNN's or the kernel's, needs far less).
// The backend refuses a cuDNN plan whose workspace is larger than this bound and runs its
// kernel instead, so the plan is never exceeded.
#pragma once

#include <cstdint>

namespace anvil {

// 4 GiB, about 3% of an H200: every sequence up to 8,192 tokens of a model of up to 32 heads
// (Qwen3-8B) keeps cuDNN's faster backward, and at 16,384 tokens, where dP would take 16 GiB,
// the kernel's partials take 512 MiB.
constexpr int64_t kCudnnDpBound = int64_t{4} << 30;

// The bytes of cuDNN's deterministic dP, and whether it is within kCudnnDpBound.
int64_t cudnn_dp_bytes(int64_t batch, int64_t seq, int64_t n_heads);
bool cudnn_backward_within_bound(int64_t batch, int64_t seq, int64_t n_heads);

int64_t attention_scratch_bytes(int64_t batch, int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim);

}  // namespace anvil
