// CUDA_CHECK and CUBLAS_CHECK (NCCL_CHECK: nccl_check.h): report the statement, file:line, rank
// and device through the one generic anvil::check_failed (core/check.h).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/check.h"

namespace anvil {
inline int cuda_current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  return d;
}
}  // namespace anvil

#define ANVIL_LIB_CHECK(kind, lib, stmt, ok, errstr)                                        \
  do {                                                                                      \
    auto anvil_status_ = (stmt);                                                            \
    if (anvil_status_ != (ok))                                                              \
      ::anvil::check_failed(::anvil::ErrorKind::kind, lib, #stmt, errstr(anvil_status_),    \
                            __FILE__, __LINE__, ::anvil::cuda_current_device());            \
  } while (0)

#define CUDA_CHECK(stmt) ANVIL_LIB_CHECK(kDevice, "CUDA", stmt, cudaSuccess, cudaGetErrorString)
#define CUBLAS_CHECK(stmt) \
  ANVIL_LIB_CHECK(kDevice, "cuBLAS", stmt, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
// After a kernel launch: the launch error, if any.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
