// The one generic check behind CUDA_CHECK, CUBLAS_CHECK, NCCL_CHECK (core/cuda/check.h).
//
// check_failed() builds "<lib> error: <what> in `<statement>` at file:line (rank R, device D)"
// and throws an Error of kind kDevice (kComm for NCCL). It lives here, free of any CUDA
// header, so that the message format is one function for every library.
#pragma once

#include <string>

#include "core/error.h"

namespace anvil {

[[noreturn]] void check_failed(ErrorKind kind, const char* lib, const char* statement,
                               const std::string& what, const char* file, int line, int device);

}  // namespace anvil
