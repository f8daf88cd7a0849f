// The launch flags of the subcommands that run one process per rank (train, bench):
// --nproc-per-node, and for several machines --nnodes, --node-rank, --master-addr,
// --master-port (one launcher per machine, as torchrun's).
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

class Args;

struct LaunchFlags {
  std::string nproc;  // "gpu" or a count; empty: this process does the work itself
  int64_t nnodes = 1, node_rank = 0, master_port = 0;
  std::string master_addr = "127.0.0.1";
  void declare(Args& args);  // adds the five flags
};

// "gpu" (one rank per visible GPU; needs on_gpu) or a positive number; throws kUsage or
// kNoDevice with a message naming the command.
int parse_nproc(const std::string& command, const std::string& spec, bool on_gpu);

// When the flags ask for more than one rank in all and this process is not already a
// worker (no RANK, no Slurm task), runs `anvil <command> <args>` once per local rank through
// the launcher and returns true when they all succeeded (a failure throws, naming the
// rank). Returns false when this process should do the work itself.
bool launch_if_requested(const std::string& command, const LaunchFlags& flags, bool on_gpu, int argc, char** argv);

}  // namespace anvil
