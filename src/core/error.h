// Typed errors and Status.
//
// Library code never calls exit(): it throws anvil::Error (or returns a Status where the
// caller is expected to act on a failure, e.g. checkpoint validation). The CLI turns an
// Error into one actionable line, "anvil <command>: <what> (<how to fix>)", and an exit
// code chosen by its kind (exit_code()): 2 for bad input (usage, invalid input, not found,
// unsupported), 3 for a missing device, 130/143 for a signal, 1 for any other failure.
// cat(...) builds messages without a formatting library, so the core builds anywhere.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace anvil {

enum class ErrorKind {
  kUsage,         // bad command line: exit code 2
  kInvalidInput,  // a file or value the user gave is malformed: exit code 2
  kNotFound,      // a file, tensor or model that should exist does not: exit code 2
  kIo,            // the operating system refused a read or write
  kUnsupported,   // a model, setting or construct anvil does not handle: exit code 2
  kOutOfMemory,   // the plan does not fit, or an allocation failed
  kNoDevice,      // no GPU or no driver where one is required: exit code 3
  kDevice,        // CUDA, cuBLAS, cuDNN failures
  kComm,          // collectives, rendezvous
  kTimeout,       // something did not finish in time
  kNumerics,      // NaN or inf in the loss or gradients
  kInternal,      // a broken invariant of anvil itself
  kInterrupted,   // stopped by SIGINT: exit code 130
  kTerminated,    // stopped by SIGTERM: exit code 143
};

const char* error_kind_name(ErrorKind kind);
int exit_code(ErrorKind kind);

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <class... Args>
[[noreturn]] void raise(ErrorKind kind, const Args&... args) {
  throw Error(kind, cat(args...));
}

// Status: success, or an error kind and message. Cheap to copy on the success path.
class Status {
 public:
  Status() = default;
  Status(ErrorKind kind, std::string message) : ok_(false), kind_(kind), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }
  static Status from(const Error& e) { return Status(e.kind(), e.what()); }

  bool ok() const { return ok_; }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  void throw_if_error() const {
    if (!ok_) throw Error(kind_, message_);
  }

 private:
  bool ok_ = true;
  ErrorKind kind_ = ErrorKind::kInternal;
  std::string message_;
};

}  // namespace anvil

// ANVIL_ENSURE(cond, kind, message parts...): throw a typed error when cond is false.
#define ANVIL_ENSURE(cond, kind, ...)                          \
  do {                                                         \
    if (!(cond)) ::anvil::raise(::anvil::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

// ANVIL_ASSERT: an invariant of anvil itself; the message names the file and line.
#define ANVIL_ASSERT(cond)                                                                    \
  do {                                                                                        \
    if (!(cond))                                                                              \
      ::anvil::raise(::anvil::ErrorKind::kInternal, "internal error: ", #cond, " failed at ", \
                     __FILE__, ":", __LINE__);                                                \
  } while (0)
