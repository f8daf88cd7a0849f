// SwiGLU of the CUDA backend: out (N, I) = silu(gate) * up, with gate_up (N, 2I) packed as
// gate then up per row (ops.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace anvil::cuda {

// out (N, I) = silu(gate) * up of gate_up (N, 2I); amax, unless null, = the largest |element|
// of out as stored (for the FP8 linear that reads it).
void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int64_t rows, int64_t inter,
                    cudaStream_t stream, float* amax = nullptr);
// dgate_up (N, 2I) written from dout (N, I); act (N, I), when not null, receives
// swiglu_forward's out (the same bits) from the same read of gate_up.
void swiglu_backward(__nv_bfloat16* dgate_up, __nv_bfloat16* act, const __nv_bfloat16* dout,
                     const __nv_bfloat16* gate_up, int64_t rows, int64_t inter, cudaStream_t stream);

}  // namespace anvil::cuda
