// The parallel mode's names (parallel/mode.h), from one table.
#include "parallel/mode.h"

#include "core/enum_names.h"

namespace anvil {
namespace {

constexpr EnumName<ParallelMode> kModeNames[] = {
    {ParallelMode::kAuto, "auto"}, {ParallelMode::kDdp, "ddp"}, {ParallelMode::kFsdp, "fsdp"},
    {ParallelMode::kZero2, "zero2"}};

}  // namespace

ParallelMode parse_parallel_mode(const std::string& name) { return parse_enum(kModeNames, name, "mode"); }

const char* parallel_mode_name(ParallelMode mode) { return enum_name(kModeNames, mode); }

}  // namespace anvil
