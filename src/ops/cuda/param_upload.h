// Small host arrays written to the device through kernel parameters: asynchronous on the
// stream with no pinned staging buffer to keep alive and no synchronization (a copy from
// pageable memory would wait for the GPU). For per-call index arrays of a few KiB, such as
// cuDNN's ragged offsets (attention_cudnn.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace anvil::cuda {

// dst[0, values.size()) = values, in launches of up to 1,000 values each.
void upload_by_parameters(int32_t* dst, const std::vector<int32_t>& values, cudaStream_t stream);

}  // namespace anvil::cuda
