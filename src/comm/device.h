// The few CUDA runtime services that comm/ and the bench need outside the NCCL comm:
// device memory for collective buffers, copy-bandwidth timing, GPU count.
//
// Implemented in comm/nccl/device.cpp (CUDA builds) and comm/no_cuda.cpp (elsewhere: no GPU,
// and every call but gpu_count() throws kNoDevice), so shared code calls them without
// #ifdef. Timings use CUDA events on a private stream.
#pragma once

#include <cstddef>
#include <vector>

namespace anvil {

int gpu_count();  // visible CUDA devices; 0 without a driver, a GPU or a CUDA build

// Device memory on one GPU; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept : device_(o.device_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);  // host -> the first `bytes`
  void download(void* host, size_t bytes) const;

 private:
  int device_ = -1;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Seconds per device-to-device copy of `bytes` within one GPU (cudaMemcpyAsync).
double device_copy_seconds(int device, size_t bytes, int iters, int warmup);
// Seconds per copy of `bytes` from GPU src to GPU dst, with peer access enabled (direct
// over NVLink or PCIe) or not (staged through the host by the driver).
double p2p_copy_seconds(int src, int dst, size_t bytes, int iters, int warmup, bool peer_access);
bool p2p_can_access(int src, int dst);

}  // namespace anvil
