// The temporary device memory one attention call may take, for the memory plan (plan/memory_plan.h).
//
// The CUDA backend's attention takes its temporaries from the backend's shared scratch
// buffer: the mma.sync kernel's backward its row sums and fp32 dK/dV partials, cuDNN's fused
// attention its workspace. cuDNN's deterministic backward on Hopper keeps dP of every
// (query, key) pair in bf16 instead of accumulating dQ with atomics, B x H x T x T x 2
// bytes (T padded to 128). The backend refuses a cuDNN plan whose workspace is larger than
// this bound and runs its kernel instead, so the plan is never exceeded.
#pragma once

#include <cstdint>

namespace anvil {

int64_t attention_scratch_bytes(int64_t batch, int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim);

}  // namespace anvil
