#include "ops/cuda/param_upload.h"

#include <algorithm>

#include "core/cuda/check.h"

namespace anvil::cuda {

namespace {

// Within the 4 KiB of kernel parameters every CUDA version accepts.
struct Chunk {
  static constexpr int kValues = 1000;
  int32_t n;
  int32_t values[kValues];
};

__global__ void write_chunk(int32_t* dst, const Chunk chunk) {
  for (int i = static_cast<int>(threadIdx.x); i < chunk.n; i += static_cast<int>(blockDim.x)) dst[i] = chunk.values[i];
}

}  // namespace

void upload_by_parameters(int32_t* dst, const std::vector<int32_t>& values, cudaStream_t stream) {
  for (size_t at = 0; at < values.size(); at += Chunk::kValues) {
    Chunk chunk;
    chunk.n = static_cast<int32_t>(std::min(values.size() - at, static_cast<size_t>(Chunk::kValues)));
    std::copy_n(values.begin() + static_cast<int64_t>(at), chunk.n, chunk.values);
    write_chunk<<<1, 256, 0, stream>>>(dst + at, chunk);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace anvil::cuda
