#include "cli/launch.h"

#include <cstdlib>

#include "comm/device.h"
#include "core/env.h"
#include "core/error.h"
#include "run/launcher.h"

namespace anvil {

int parse_nproc(const std::string& command, const std::string& spec, bool on_gpu) {
  if (spec == "gpu") {
    ANVIL_ENSURE(on_gpu, kUsage, "anvil ", command, ": --nproc-per-node gpu needs --device cuda; give a number of CPU ranks");
    const int n = gpu_count();
    ANVIL_ENSURE(n > 0, kNoDevice, "anvil ", command, ": no GPU is visible (no driver, no GPU, or CUDA_VISIBLE_DEVICES "
                 "empty); use --device cpu --nproc-per-node N for CPU ranks");
    return n;
  }
  char* end = nullptr;
  const long n = std::strtol(spec.c_str(), &end, 10);
  ANVIL_ENSURE(!spec.empty() && end && *end == '\0' && n >= 1 && n <= 4096, kUsage, "anvil ", command,
               ": --nproc-per-node expects gpu or a positive number, got '", spec, "'");
  return static_cast<int>(n);
}

bool launch_if_requested(const std::string& command, const std::string& spec, bool on_gpu, int argc, char** argv) {
  if (spec.empty() || env_rank() >= 0) return false;
  const int n = parse_nproc(command, spec, on_gpu);
  if (n <= 1) return false;
  LaunchOptions lo;
  lo.nproc = n;
  lo.argv = {self_executable(), command};
  for (int i = 0; i < argc; ++i) lo.argv.push_back(argv[i]);
  launch_workers(lo);
  return true;
}

}  // namespace anvil
