// The launcher's blame rule (see blame.h): a foreign signal beats an error exit, and among
// either the earliest reaped wins.
#include "launch/blame.h"

#include <sys/wait.h>

namespace anvil {

int worker_to_blame(const std::vector<WorkerExit>& exits) {
  int first_error = -1;
  for (const WorkerExit& e : exits) {
    if (WIFSIGNALED(e.status) && !e.signal_is_ours) return e.worker;
    const bool error = WIFEXITED(e.status) && WEXITSTATUS(e.status) != 0;
    if (error && first_error < 0) first_error = e.worker;
  }
  return first_error;
}

}  // namespace anvil
