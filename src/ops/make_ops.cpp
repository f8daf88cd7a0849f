#include "core/error.h"
#include "ops/ops.h"

namespace anvil {

std::unique_ptr<Ops> make_ops(const std::string& device, int device_index) {
  if (device == "cpu") return make_cpu_ops();
  if (device == "cuda") return make_cuda_ops(device_index);
  raise(ErrorKind::kUsage, "unknown device '", device, "' (cpu or cuda)");
}

}  // namespace anvil
