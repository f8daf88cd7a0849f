// The parallel mode: how the units are laid over the ranks, and its CLI names.
//
// Replicated (ddp: every rank owns whole units) or sharded (fsdp: rank r owns slice r of
// every unit). kAuto is the CLI's choice, resolved before anything runs (train/resolve.h: of
// the modes the memory plan fits, the one the step model predicts faster). make_param_store (parallel/param_store.h)
// builds the store of a resolved mode.
#pragma once

#include <string>

namespace anvil {

enum class ParallelMode { kAuto, kDdp, kFsdp };
// "auto" | "ddp" | "fsdp" (a kUsage error otherwise), and back.
ParallelMode parse_parallel_mode(const std::string& name);
const char* parallel_mode_name(ParallelMode mode);

}  // namespace anvil
