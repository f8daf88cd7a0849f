// TCP sockets for the rendezvous and the CPU collectives: IPv4, blocking calls with a
// deadline, and a move-only owner of each file descriptor.
//
// Everything that can wait takes a Deadline, so no call blocks past the comm timeout.
// Functions that meet a closed peer or an elapsed deadline return an IoStatus instead of
// throwing: only the caller knows which collective, rank and step to name in the error.
// SIGPIPE is never raised (send uses MSG_NOSIGNAL); a dead peer shows up as kClosed.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace anvil::net {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline after(double seconds);
  bool expired() const { return Clock::now() >= at_; }
  int remaining_ms() const;  // for poll(): at least 0, at most 1 hour
  double seconds_total() const { return total_s_; }

 private:
  Clock::time_point at_{};
  double total_s_ = 0;
};

// The file descriptor of one socket; closed on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void set_nonblocking();

 private:
  int fd_ = -1;
};

enum class IoStatus { kOk, kTimeout, kClosed, kError };

// The IPv4 address that host (a name or "10.0.0.3") resolves to here, as "10.0.0.3"; empty
// when it does not resolve.
std::string resolve_ipv4(const std::string& host);
// Whether an IPv4 address ("127.0.0.1") is a loopback one (127.0.0.0/8): only this machine
// reaches it.
bool is_loopback(const std::string& ipv4);

// Listens at host:port, host an IPv4 address of this machine ("0.0.0.0": all of them; port 0:
// any free port). Throws kComm naming `what` when the address cannot be bound. *bound_port
// receives the port actually bound.
Socket listen_tcp(const std::string& host, int port, int backlog, int* bound_port, const std::string& what);
// Connects to host:port, retrying while nobody listens yet, until the deadline. Throws
// kComm (unresolvable host) or kTimeout naming `what`.
Socket connect_tcp(const std::string& host, int port, const Deadline& deadline, const std::string& what);
// Accepts one connection; an invalid Socket when the deadline passes first.
Socket accept_tcp(const Socket& listener, const Deadline& deadline);
// A connection already waiting on a non-blocking listener, made non-blocking; an invalid
// Socket when none is.
Socket accept_waiting(const Socket& listener);

IoStatus send_all(const Socket& s, const void* data, size_t bytes, const Deadline& deadline);
IoStatus recv_all(const Socket& s, void* data, size_t bytes, const Deadline& deadline);
// Reads what has arrived, at most `bytes`, without waiting: kOk with *got bytes (0 when
// nothing has), kClosed at the end of the stream, kError.
IoStatus recv_waiting(const Socket& s, void* data, size_t bytes, size_t* got);

// The IPv4 address of this end of a connected socket ("10.0.0.3"): the interface through
// which peers reach this machine.
std::string local_address(const Socket& s);
// The far end of a connected socket, "10.0.0.5:41234", for messages about who connected.
std::string peer_address(const Socket& s);
// A TCP port that was free a moment ago (bind to port 0, read it, close).
int free_tcp_port();

}  // namespace anvil::net
