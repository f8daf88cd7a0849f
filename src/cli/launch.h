// --nproc-per-node for the subcommands that run one process per rank (train, bench).
#pragma once

#include <string>

namespace anvil {

// "gpu" (one rank per visible GPU; needs on_gpu) or a positive number; throws kUsage or
// kNoDevice with a message naming the command.
int parse_nproc(const std::string& command, const std::string& spec, bool on_gpu);

// When spec asks for more than one rank and this process is not already a worker (RANK
// unset), runs `anvil <command> <args>` once per rank through the launcher and returns
// true when they all succeeded (a failure throws, naming the rank). Returns false when this
// process should do the work itself.
bool launch_if_requested(const std::string& command, const std::string& spec, bool on_gpu, int argc, char** argv);

}  // namespace anvil
