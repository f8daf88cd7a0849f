// Environment settings, each declared once, in one place (as NCCL_PARAM does).
//
// ANVIL_ENV_INT(name, "VAR", default) defines int64_t env_<name>() that reads VAR once
// and caches it; a malformed value is an error naming the variable.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

int64_t env_int(const char* var, int64_t fallback);        // uncached read
std::string env_str(const char* var, const std::string& fallback);

#define ANVIL_ENV_INT(name, var, fallback)            \
  inline int64_t env_##name() {                      \
    static const int64_t v = ::anvil::env_int(var, fallback); \
    return v;                                        \
  }

// The settings anvil reads. Launchers (torchrun, srun, mpirun) set the first five.
ANVIL_ENV_INT(rank, "RANK", -1)
ANVIL_ENV_INT(world_size, "WORLD_SIZE", -1)
ANVIL_ENV_INT(local_rank, "LOCAL_RANK", -1)
ANVIL_ENV_INT(master_port, "MASTER_PORT", -1)
ANVIL_ENV_INT(comm_timeout_s, "ANVIL_COMM_TIMEOUT_S", 600)
// 1: the NCCL comm's stream at the GPU's highest priority, level with the compute stream
// (which runs there so that it goes ahead of the optimizer's side queue); 0: the lowest.
ANVIL_ENV_INT(nccl_high_priority, "ANVIL_NCCL_HIGH_PRIORITY", 0)
// 1: GPU ranks reduce through host memory and the CPU comm's TCP mesh instead of NCCL, so
// that several ranks can share one GPU (comm/comm.h, HostStager): slow, for tests of the
// multi-rank GPU paths on a machine with fewer GPUs than ranks. 0: NCCL.
ANVIL_ENV_INT(gpu_comm_host, "ANVIL_GPU_COMM_HOST", 0)
// ANVIL_FAULT (tests of reliability) is read by core/fault.h alone.
// Linear layers of at most 8 rows (decode steps) through the GEMV kernel (0: cuBLASLt), for
// timing comparisons.
ANVIL_ENV_INT(gemv, "ANVIL_GEMV", 1)
inline std::string env_master_addr() { return env_str("MASTER_ADDR", ""); }

}  // namespace anvil
