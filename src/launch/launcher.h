// The launcher: one worker process per rank on this machine, as torchrun does.
//
// launch_workers() forks and execs argv once per rank with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and ANVIL_JOB_SECRET set, relays their output,
// and waits. The secret (comm/bootstrap.h) is a fresh random one for each launch.
// Several machines: one launcher per machine, each with nnodes and its node_rank and the
// same master address and port (node 0's); node k runs ranks k * nproc ... (k+1) * nproc - 1.
// Their workers share the user's ANVIL_JOB_SECRET instead, which must be set (refused with
// kInvalidInput before any worker starts) unless the master address is a loopback one.
// Then:
//  - Output. Rank 0's stdout passes through unchanged (it carries the run's results: a
//    table, --json), every other line gets a "[rN] " prefix unless the worker already
//    wrote one (core/log.h does), so interleaved lines always say whose they are.
//  - Failure. When a worker exits non-zero or is killed, the others are sent SIGTERM, then
//    SIGKILL after grace_s. Once every worker is reaped (within grace_s of that first exit),
//    the call throws an Error naming one rank, how it ended and its last output line: the
//    first killed by a signal the launcher did not send, else the first that exited non-zero
//    (launch/blame.h), so a rank killed from outside is named even when a peer failing on its
//    closed connection is reaped first. Workers run in their own process groups (their
//    children are stopped with them) and get SIGKILL if the launcher itself dies
//    (PR_SET_PDEATHSIG).
//  - Signals. SIGINT and SIGTERM sent to the launcher are forwarded to every worker; the
//    call then waits for them (no deadline: anvil train finishes its step and saves; a
//    second signal, forwarded too, stops them at once) and throws kInterrupted (SIGINT,
//    exit 130) or kTerminated (SIGTERM, exit 143).
// Nothing can hang here: every wait is bounded by the workers' own exits, grace_s, or the
// comm timeouts inside the workers.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace anvil {

struct LaunchOptions {
  int nproc = 1;  // workers on this machine
  int nnodes = 1, node_rank = 0;
  std::vector<std::string> argv;  // the worker's command line; argv[0] is the executable path
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port (one machine only)
  double grace_s = 5.0;
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every worker
  int out_fd = 1;  // where the relayed stdout and stderr lines go
  int err_fd = 2;
};

// Returns when every worker has exited with status 0; throws otherwise (see above). The
// error's kind is kNoDevice when the failed worker exited with code 3 (no GPU), kUsage when
// it exited with 2 (bad input), kComm otherwise: the launcher exits as the worker did. One
// launch at a time per process (it owns SIGCHLD, SIGINT and SIGTERM while it runs, and
// restores the previous handlers).
void launch_workers(const LaunchOptions& options);

// This executable's path (/proc/self/exe), to re-run anvil as its own workers.
std::string self_executable();

}  // namespace anvil
