// The parallel mode: how the units are laid over the ranks, and its CLI names.
//
// Replicated (ddp: every rank owns whole units), sharded (fsdp: rank r owns slice r of
// every unit) or ZeRO stage 2 (zero2: rank r owns slice r of every unit's masters, AdamW
// state and gradient, and holds the compute weights whole; FSDP's SHARD_GRAD_OP). kAuto is the CLI's choice, resolved before anything runs (train/resolve.h: of
// the modes the memory plan fits, the one the step model predicts faster). make_param_store (parallel/param_store.h)
// builds the store of a resolved mode.
#pragma once

#include <string>

namespace anvil {

enum class ParallelMode { kAuto, kDdp, kFsdp, kZero2 };
// "auto" | "ddp" | "fsdp" | "zero2" (a kUsage error otherwise), and back.
ParallelMode parse_parallel_mode(const std::string& name);
const char* parallel_mode_name(ParallelMode mode);
// The modes a run can take, from the most memory a rank holds to the least.
constexpr ParallelMode kRunModes[] = {ParallelMode::kDdp, ParallelMode::kZero2, ParallelMode::kFsdp};
// fsdp and zero2: across ranks, a rank owns one shard of every unit's masters, AdamW state
// and gradient.
inline bool shards_state(ParallelMode mode) { return mode == ParallelMode::kFsdp || mode == ParallelMode::kZero2; }

}  // namespace anvil
