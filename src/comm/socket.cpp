// TCP helpers (see socket.h). Blocking-with-deadline I/O is poll() + non-blocking
// send/recv, so a deadline holds even when the peer stops reading mid-message.
#include "comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace anvil::net {

Deadline Deadline::after(double seconds) {
  Deadline d;
  d.total_s_ = seconds;
  d.at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return d;
}

int Deadline::remaining_ms() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 3600 * 1000));
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

void Socket::set_nonblocking() {
  int flags = ::fcntl(fd_, F_GETFL, 0);
  ANVIL_ENSURE(flags >= 0 && ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK) == 0, kComm,
               "cannot make a socket non-blocking: ", std::strerror(errno));
}

namespace {

void set_common_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool resolve_ipv4(const std::string& host, int port, sockaddr_in* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  *out = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  out->sin_port = htons(static_cast<uint16_t>(port));
  ::freeaddrinfo(res);
  return true;
}

}  // namespace

std::string resolve_ipv4(const std::string& host) {
  sockaddr_in addr{};
  if (!resolve_ipv4(host, 0, &addr)) return "";
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return buf;
}

bool is_loopback(const std::string& ipv4) {
  in_addr a{};
  return ::inet_pton(AF_INET, ipv4.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

Socket listen_tcp(const std::string& host, int port, int backlog, int* bound_port, const std::string& what) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ANVIL_ENSURE(::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1, kComm, what, ": cannot listen on '", host,
               "': not an IPv4 address");
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ANVIL_ENSURE(s.valid(), kComm, what, ": cannot create a socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    raise(ErrorKind::kComm, what, ": cannot listen on ", host, ":", port, ": ", std::strerror(err),
          err == EADDRNOTAVAIL ? " (not an address of this machine)"
          : err == EADDRINUSE && port ? " (another run still holding MASTER_PORT? choose another one)"
                                      : "");
  }
  ANVIL_ENSURE(::listen(s.fd(), backlog) == 0, kComm, what, ": listen failed: ", std::strerror(errno));
  socklen_t len = sizeof addr;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return s;
}

Socket connect_tcp(const std::string& host, int port, const Deadline& deadline, const std::string& what) {
  sockaddr_in addr{};
  ANVIL_ENSURE(resolve_ipv4(host, port, &addr), kComm, what, ": cannot resolve host '", host,
               "' (MASTER_ADDR)");
  std::string last_error = "no attempt";
  do {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ANVIL_ENSURE(s.valid(), kComm, what, ": cannot create a socket: ", std::strerror(errno));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      set_common_options(s.fd());
      return s;
    }
    last_error = std::strerror(errno);
    // Nobody listens yet (the peer starts later): retry until the deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!deadline.expired());
  raise(ErrorKind::kTimeout, what, ": could not connect to ", host, ":", port, " within ",
        deadline.seconds_total(), " s (", last_error, "); is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
}

Socket accept_tcp(const Socket& listener, const Deadline& deadline) {
  for (;;) {
    pollfd p{listener.fd(), POLLIN, 0};
    int r = ::poll(&p, 1, deadline.remaining_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Socket();
    Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (s.valid()) {
      set_common_options(s.fd());
      return s;
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) return Socket();
  }
}

Socket accept_waiting(const Socket& listener) {
  for (;;) {
    Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (s.valid()) {
      set_common_options(s.fd());
      return s;
    }
    // A connection reset before it was accepted is skipped; anything else ends the batch.
    if (errno != EINTR && errno != ECONNABORTED) return Socket();
  }
}

namespace {

// One direction of a blocking transfer with a deadline. The socket may be blocking or not:
// MSG_DONTWAIT makes each call return at once, poll() does the waiting.
template <bool kSend>
IoStatus transfer_all(const Socket& s, char* p, size_t bytes, const Deadline& deadline) {
  while (bytes > 0) {
    ssize_t n = kSend ? ::send(s.fd(), p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT)
                      : ::recv(s.fd(), p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !kSend) return IoStatus::kClosed;
    if (n < 0 && errno == EPIPE) return IoStatus::kClosed;
    if (n < 0 && errno == ECONNRESET) return IoStatus::kClosed;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return IoStatus::kError;
    pollfd pf{s.fd(), static_cast<short>(kSend ? POLLOUT : POLLIN), 0};
    int r = ::poll(&pf, 1, deadline.remaining_ms());
    if (r == 0 && deadline.expired()) return IoStatus::kTimeout;
  }
  return IoStatus::kOk;
}

}  // namespace

IoStatus send_all(const Socket& s, const void* data, size_t bytes, const Deadline& deadline) {
  return transfer_all<true>(s, static_cast<char*>(const_cast<void*>(data)), bytes, deadline);
}

IoStatus recv_all(const Socket& s, void* data, size_t bytes, const Deadline& deadline) {
  return transfer_all<false>(s, static_cast<char*>(data), bytes, deadline);
}

IoStatus recv_waiting(const Socket& s, void* data, size_t bytes, size_t* got) {
  *got = 0;
  for (;;) {
    const ssize_t n = ::recv(s.fd(), data, bytes, MSG_DONTWAIT);
    if (n > 0) *got = static_cast<size_t>(n);
    if (n > 0 || bytes == 0) return IoStatus::kOk;
    if (n == 0 || errno == ECONNRESET) return IoStatus::kClosed;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus::kOk;
    if (errno != EINTR) return IoStatus::kError;
  }
}

std::string local_address(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "127.0.0.1";
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return buf;
}

std::string peer_address(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "(unknown address)";
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof buf);
  return cat(buf, ":", ntohs(addr.sin_port));
}

int free_tcp_port() {
  int port = 0;
  // Free on every address, so free on whichever one the caller then listens on.
  Socket s = listen_tcp("0.0.0.0", 0, 1, &port, "picking a free port");
  return port;
}

}  // namespace anvil::net
