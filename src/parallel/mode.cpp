// The parallel mode's names (parallel/mode.h), from one table.
#include "parallel/mode.h"

#include <utility>

#include "core/error.h"

namespace anvil {
namespace {

constexpr std::pair<ParallelMode, const char*> kModeNames[] = {
    {ParallelMode::kAuto, "auto"}, {ParallelMode::kDdp, "ddp"}, {ParallelMode::kFsdp, "fsdp"}};

}  // namespace

ParallelMode parse_parallel_mode(const std::string& name) {
  for (const auto& [mode, mode_name] : kModeNames)
    if (name == mode_name) return mode;
  raise(ErrorKind::kUsage, "unknown mode '", name, "' (auto, ddp or fsdp)");
}

const char* parallel_mode_name(ParallelMode mode) {
  for (const auto& [m, mode_name] : kModeNames)
    if (m == mode) return mode_name;
  return "?";
}

}  // namespace anvil
