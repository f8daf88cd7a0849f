// The fault-injection points and the ANVIL_FAULT parser (see fault.h).
#include "core/fault.h"

#include <cstdlib>
#include <map>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {
namespace {

constexpr Fault kFaults[] = {Fault::kDieInSave,       Fault::kNoSpaceInSave, Fault::kDieInStaging,
                             Fault::kDieBeforeRename, Fault::kHoldSave,      Fault::kHangAtStep,
                             Fault::kGpuHangAtStep};

std::map<Fault, int64_t> parse_faults(const std::string& spec) {
  std::map<Fault, int64_t> armed;
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    const size_t colon = item.find(':');
    bool ok = false;
    for (Fault f : kFaults)
      if (colon != std::string::npos && item.compare(0, colon, fault_name(f)) == 0) {
        char* stop = nullptr;
        const long long step = std::strtoll(item.c_str() + colon + 1, &stop, 10);
        ok = stop && *stop == '\0' && step >= 1 && colon + 1 < item.size();
        armed[f] = step;
      }
    ANVIL_ENSURE(ok, kUsage, "ANVIL_FAULT=", spec, ": '", item,
                 "' is not <fault>:<step> with fault die_in_save, no_space_in_save, die_in_staging, die_before_rename, "
                 "hold_save, hang_at_step or gpu_hang_at_step");
    at = end + 1;
  }
  return armed;
}

}  // namespace

const char* fault_name(Fault fault) {
  switch (fault) {
    case Fault::kNone: return "none";
    case Fault::kDieInSave: return "die_in_save";
    case Fault::kNoSpaceInSave: return "no_space_in_save";
    case Fault::kDieInStaging: return "die_in_staging";
    case Fault::kDieBeforeRename: return "die_before_rename";
    case Fault::kHoldSave: return "hold_save";
    case Fault::kHangAtStep: return "hang_at_step";
    case Fault::kGpuHangAtStep: return "gpu_hang_at_step";
  }
  return "?";
}

bool fault_armed(Fault fault, int64_t step, int rank, int world) {
  static const std::map<Fault, int64_t> armed = parse_faults(env_str("ANVIL_FAULT", ""));
  if (armed.empty() || rank != (fault == Fault::kDieBeforeRename ? 0 : world - 1)) return false;
  const auto it = armed.find(fault);
  return it != armed.end() && it->second == step;
}

void die_at_fault(Fault fault, const std::string& where) {
  log_error("fault ", fault_name(fault), " (ANVIL_FAULT): exiting ", where);
  std::_Exit(86);
}

}  // namespace anvil
