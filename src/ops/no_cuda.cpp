// The CUDA entry points of a build without a CUDA toolkit: they say so.
#include "core/error.h"
#include "ops/ops.h"

namespace anvil {

std::unique_ptr<Ops> make_cuda_ops(int) {
  raise(ErrorKind::kNoDevice, "this build of anvil has no CUDA backend (built without a CUDA toolkit); "
        "use --device cpu or rebuild where nvcc is installed");
}

bool cuda_available() { return false; }

}  // namespace anvil
