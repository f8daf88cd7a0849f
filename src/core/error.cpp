// Error kinds, their exit codes and names, and Status (see error.h).
#include "core/error.h"

namespace anvil {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return "usage";
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kIo: return "i/o";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kOutOfMemory: return "out of memory";
    case ErrorKind::kNoDevice: return "no device";
    case ErrorKind::kDevice: return "device";
    case ErrorKind::kComm: return "communication";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kNumerics: return "numerics";
    case ErrorKind::kInternal: return "internal";
    case ErrorKind::kInterrupted: return "interrupted";
    case ErrorKind::kTerminated: return "terminated";
  }
  return "unknown";
}

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
    case ErrorKind::kInvalidInput:
    case ErrorKind::kNotFound:
    case ErrorKind::kUnsupported: return 2;  // bad input: the command line, a file or a model given
    case ErrorKind::kNoDevice: return 3;
    case ErrorKind::kInterrupted: return 130;  // 128 + SIGINT, as a shell reports it
    case ErrorKind::kTerminated: return 143;   // 128 + SIGTERM
    default: return 1;
  }
}

}  // namespace anvil
