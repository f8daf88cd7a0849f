// check_failed: the message and the throw behind the CUDA, cuBLAS and NCCL checks (see check.h).
#include "core/check.h"

#include "core/log.h"

namespace anvil {

void check_failed(ErrorKind kind, const char* lib, const char* statement, const std::string& what,
                  const char* file, int line, int device) {
  raise(kind, lib, " error: ", what, " in `", statement, "` at ", file, ":", line, " (rank ",
        log_rank() < 0 ? 0 : log_rank(), ", device ", device, ")");
}

}  // namespace anvil
