#include "cli/launch.h"

#include <cstdlib>

#include "cli/args.h"
#include "comm/comm.h"
#include "comm/device.h"
#include "core/env.h"
#include "core/error.h"
#include "launch/launcher.h"

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

void LaunchFlags::declare(Args& a) {
  a.opt("--nproc-per-node", &nproc, "gpu|N",
        "launch this many ranks here (gpu: one per visible GPU); without it, a worker joins from RANK, WORLD_SIZE, "
        "LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun) or Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (srun)")
      .opt("--nnodes", &nnodes, "N",
           "machines, one launcher on each, all with the same ANVIL_JOB_SECRET (docs/multi-node.md)")
      .opt("--node-rank", &node_rank, "K", "this machine's index, 0 .. N-1")
      .opt("--master-addr", &master_addr, "HOST", "node 0's address, reachable from every machine")
      .opt("--master-port", &master_port, "PORT", "a free TCP port on node 0 [default: any free port, one machine only]");
}

bool launch_if_requested(const std::string& command, const LaunchFlags& f, bool on_gpu, int argc, char** argv) {
  if (comm_options_from_env().joined) return false;
  ANVIL_ENSURE(f.nnodes >= 1 && f.node_rank >= 0 && f.node_rank < f.nnodes, kUsage, "anvil ", command,
               ": --node-rank ", f.node_rank, " must be in [0, --nnodes ", f.nnodes, ")");
  ANVIL_ENSURE(f.master_port >= 0 && f.master_port < 65536, kUsage, "anvil ", command, ": --master-port ",
               f.master_port, " is not a TCP port");
  ANVIL_ENSURE(f.nnodes == 1 || (!f.nproc.empty() && f.master_port > 0), kUsage, "anvil ", command,
               ": --nnodes ", f.nnodes, " needs --nproc-per-node and --master-port (the same on every machine)");
  if (f.nproc.empty()) return false;
  const int n = parse_nproc(command, f.nproc, on_gpu);
  if (n * f.nnodes <= 1) return false;
  LaunchOptions lo;
  lo.nproc = n;
  lo.nnodes = static_cast<int>(f.nnodes);
  lo.node_rank = static_cast<int>(f.node_rank);
  lo.master_addr = f.master_addr;
  lo.master_port = static_cast<int>(f.master_port);
  lo.argv = {self_executable(), command};
  for (int i = 0; i < argc; ++i) lo.argv.push_back(argv[i]);
  launch_workers(lo);
  return true;
}

}  // namespace anvil
