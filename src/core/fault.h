// Fault injection: the one named place where anvil fails on purpose, for the tests of its
// reliability (crash safety, full disks, hung ranks). Production code asks fault_armed()
// at the few points listed here and nowhere else; nothing else reads ANVIL_FAULT.
//
// ANVIL_FAULT=<name>:<step>[,<name>:<step>...] arms faults on the last rank of the run
// (the only rank of a single process), except die_before_rename (rank 0, which renames):
//   die_in_save:N     the process exits (code 86) halfway through writing its checkpoint
//                     shard at the save of step N (a crash mid-save; with asynchronous
//                     saves, in the background writer)
//   no_space_in_save:N that shard's write fails with ENOSPC halfway (a full disk)
//   die_in_staging:N  the process exits halfway through copying its state to the host
//                     snapshot of an asynchronous save of step N
//   die_before_rename:N rank 0 exits once meta.json of step N is synced, before the
//                     folder's rename that completes the checkpoint
//   hold_save:N       the background writer of the save of step N waits, before its first
//                     byte, until the file <ckpt-dir>/.tmp-step-N.release exists (a slow
//                     disk, made an event: training goes on meanwhile)
//   hang_at_step:N    the rank stops answering before step N (a hung rank): it sleeps
//                     until a signal, so its peers' collectives time out
//   gpu_hang_at_step:N the rank's GPU stops before its first collective of step N (the NCCL
//                     comm blocks its compute stream), so that collective hangs inside NCCL
// A malformed value is an error naming the variable.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

enum class Fault {
  kNone, kDieInSave, kNoSpaceInSave, kDieInStaging, kDieBeforeRename, kHoldSave, kHangAtStep, kGpuHangAtStep
};

// True when ANVIL_FAULT arms `fault` at `step` and `rank` is the one it acts on (above).
bool fault_armed(Fault fault, int64_t step, int rank, int world);
const char* fault_name(Fault fault);  // "die_in_save", ...
// The end of a process at an armed fault: logs what and where, exits with code 86.
[[noreturn]] void die_at_fault(Fault fault, const std::string& where);

}  // namespace anvil
