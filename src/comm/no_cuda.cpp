// The GPU entry points of comm/ in a build without a CUDA toolkit: there is no GPU to use.
#include "comm/comm.h"
#include "comm/device.h"
#include "core/error.h"

namespace anvil {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  raise(ErrorKind::kNoDevice, what, ": this build of anvil has no CUDA backend (built without a CUDA toolkit); "
        "use --device cpu or rebuild where nvcc is installed");
}
}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const CommOptions&) { no_cuda("NCCL comm"); }
std::unique_ptr<HostStager> make_host_stager(int) { no_cuda("host-staged GPU comm"); }

int gpu_count() { return 0; }
DeviceBuffer::DeviceBuffer(int, size_t) { no_cuda("GPU memory"); }
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  return *this;
}
DeviceBuffer::~DeviceBuffer() = default;
void DeviceBuffer::upload(const void*, size_t) { no_cuda("GPU memory"); }
void DeviceBuffer::download(void*, size_t) const { no_cuda("GPU memory"); }
double device_copy_seconds(int, size_t, int, int) { no_cuda("device copy bandwidth"); }
double p2p_copy_seconds(int, int, size_t, int, int, bool) { no_cuda("peer-to-peer bandwidth"); }
bool p2p_can_access(int, int) { return false; }

}  // namespace anvil
