// CUDA runtime services of comm/ (see comm/device.h): GPU count, device buffers, and the
// copy timings behind `anvil bench` on one GPU and `anvil bench p2p`.
#include <cuda_runtime.h>

#include "comm/device.h"
#include "core/cuda/check.h"
#include "core/error.h"

namespace anvil {

namespace {

// Makes `device` current for the scope, and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

void check_device(int device, const char* what) {
  const int n = gpu_count();
  ANVIL_ENSURE(device >= 0 && device < n, kNoDevice, what, ": GPU ", device, " is not visible (", n,
               " GPU(s); LOCAL_RANK and CUDA_VISIBLE_DEVICES decide which)");
}

// Times `iters` calls of copy() on `stream` with events, after `warmup` untimed ones.
template <class F>
double time_copies(cudaStream_t stream, int iters, int warmup, F copy) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) copy();
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) copy();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) * 1e-3 / iters;
}

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: not an error here, the answer is 0
    return 0;
  }
  return n;
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  check_device(device, "GPU memory");
  if (bytes == 0) return;
  DeviceScope scope(device);
  const cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    raise(ErrorKind::kOutOfMemory, "cannot allocate ", bytes, " bytes on GPU ", device, " (choose a smaller -e)");
  }
  CUDA_CHECK(e);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(device_, o.device_);
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaFree(ptr_);
  if (previous >= 0) cudaSetDevice(previous);
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  ANVIL_ASSERT(bytes <= bytes_);
  DeviceScope scope(device_);
  CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());  // the DMA of a pageable copy may outlive cudaMemcpy
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  ANVIL_ASSERT(bytes <= bytes_);
  DeviceScope scope(device_);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
}

double device_copy_seconds(int device, size_t bytes, int iters, int warmup) {
  DeviceBuffer src(device, bytes), dst(device, bytes);
  DeviceScope scope(device);
  Stream stream;
  return time_copies(stream.get(), iters, warmup, [&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  });
}

bool p2p_can_access(int src, int dst) {
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, src, dst) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return can != 0;
}

double p2p_copy_seconds(int src, int dst, size_t bytes, int iters, int warmup, bool peer_access) {
  check_device(src, "p2p copy");
  check_device(dst, "p2p copy");
  DeviceBuffer a(src, bytes), b(dst, bytes);
  // Peer access is a property of the pair of contexts: set it both ways, as asked.
  for (auto [from, to] : {std::pair{src, dst}, std::pair{dst, src}}) {
    DeviceScope scope(from);
    const cudaError_t e = peer_access ? cudaDeviceEnablePeerAccess(to, 0) : cudaDeviceDisablePeerAccess(to);
    if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessNotEnabled) cudaGetLastError();
    else CUDA_CHECK(e);
  }
  DeviceScope scope(src);
  Stream stream;
  return time_copies(stream.get(), iters, warmup, [&] {
    CUDA_CHECK(cudaMemcpyPeerAsync(b.data(), dst, a.data(), src, bytes, stream.get()));
  });
}

}  // namespace anvil
