// The HostStager of comm/comm.h on a CUDA GPU: copies between device and host memory on
// the compute stream, each waited for, so the CPU comm reads what compute wrote
// and its result is on the device when the collective returns.
#include <cuda_runtime.h>

#include "comm/comm.h"
#include "comm/device.h"
#include "core/cuda/check.h"
#include "core/error.h"

namespace anvil {
namespace {

class CudaHostStager final : public HostStager {
 public:
  explicit CudaHostStager(int gpu) : gpu_(gpu) { CUDA_CHECK(cudaSetDevice(gpu_)); }

  int gpu() const override { return gpu_; }
  void set_compute_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }

  void to_host(void* host, const void* device, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void to_device(void* device, const void* host, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int gpu_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<HostStager> make_host_stager(int local_rank) {
  const int gpus = gpu_count();
  ANVIL_ENSURE(gpus > 0, kNoDevice, "host-staged GPU comm: no GPU is visible (no driver or no GPU)");
  return std::make_unique<CudaHostStager>(local_rank % gpus);
}

}  // namespace anvil
