// NCCL_CHECK: an NCCL call that must return ncclSuccess, reported like CUDA_CHECK (the
// statement, file:line, rank and device) through the one generic anvil::check_failed.
// Kept apart from check.h so that only the code that talks to NCCL includes nccl.h.
// Collectives on a non-blocking communicator go through NcclComm's own checks instead,
// which also name the collective, the step and the tag and handle ncclInProgress.
#pragma once

#include <nccl.h>

#include "core/cuda/check.h"

#define NCCL_CHECK(stmt) ANVIL_LIB_CHECK(kComm, "NCCL", stmt, ncclSuccess, ncclGetErrorString)
