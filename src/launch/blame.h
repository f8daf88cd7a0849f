// Which worker a failed launch names. When one worker dies, its peers fail on its closed
// connection a moment later, and the launcher may reap one of them first (it exited with an
// error while the dead worker was still being torn down). So the choice waits for every exit
// of the launch and prefers the worker that was killed by a signal nobody in the launcher
// sent (SIGKILL from outside, SIGSEGV, SIGABRT, ...) over one that exited with an error.
#pragma once

#include <vector>

namespace anvil {

struct WorkerExit {
  int worker = 0;               // the worker's index in the launch
  int status = 0;               // as waitpid() gave it
  bool signal_is_ours = false;  // killed by a signal the launcher had sent (stopping it)
};

// Given the exits in the order they were reaped: the first one killed by a signal that is
// not ours, else the first one that exited non-zero; -1 when there is neither.
int worker_to_blame(const std::vector<WorkerExit>& exits);

}  // namespace anvil
