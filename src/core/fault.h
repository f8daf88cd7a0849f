// Fault injection: the one named place where anvil fails on purpose, for the tests of its
// reliability (crash safety, full disks, hung ranks). Production code asks fault_armed()
// at the few points listed here and nowhere else; nothing else reads ANVIL_FAULT.
//
// ANVIL_FAULT=<name>:<step>[,<name>:<step>...] arms faults on the last rank of the run
// (the only rank of a single process):
//   die_in_save:N     the process exits (code 86) halfway through writing its checkpoint
//                     shard at the save of step N (a crash mid-save)
//   no_space_in_save:N that shard's write fails with ENOSPC halfway (a full disk)
//   hang_at_step:N    the rank stops answering before step N (a hung rank): it sleeps
//                     until a signal, so its peers' collectives time out
//   gpu_hang_at_step:N the rank's GPU stops before its first collective of step N (the NCCL
//                     comm blocks its compute stream), so that collective hangs inside NCCL
// A malformed value is an error naming the variable.
#pragma once

#include <cstdint>

namespace anvil {

enum class Fault { kNone, kDieInSave, kNoSpaceInSave, kHangAtStep, kGpuHangAtStep };

// True when ANVIL_FAULT arms `fault` at `step` and `rank` is the last of `world`.
bool fault_armed(Fault fault, int64_t step, int rank, int world);
const char* fault_name(Fault fault);  // "die_in_save", ...

}  // namespace anvil
