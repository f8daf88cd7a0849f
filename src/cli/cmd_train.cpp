#include "cli/commands.h"
#include "core/error.h"
namespace anvil {
int cmd_train(int, char**) { raise(ErrorKind::kInternal, "train: being written"); }
int cmd_grad(int, char**) { raise(ErrorKind::kInternal, "grad: being written"); }
int cmd_init(int, char**) { raise(ErrorKind::kInternal, "init: being written"); }
}  // namespace anvil
