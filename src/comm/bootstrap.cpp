// The rendezvous star (see bootstrap.h). Wire format: a RendezvousHello from each rank to
// rank 0 and rank 0's RendezvousAnswer, then length-prefixed blobs (uint64 length, bytes).
#include "comm/bootstrap.h"

#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {

namespace {

constexpr uint64_t kMaxBlob = 1ull << 30;
constexpr size_t kMaxNewcomers = 64;  // connections heard at once before they have said hello
static_assert(sizeof(RendezvousHello) == 8 + 12 + kMaxSecretBytes && sizeof(RendezvousAnswer) == 16,
              "the rendezvous messages have no padding");

RendezvousHello hello_of(const BootstrapOptions& o) {
  RendezvousHello h{};
  std::memcpy(h.magic, kRendezvousMagic, sizeof h.magic);
  h.rank = o.rank;
  h.world = o.world;
  h.secret_bytes = static_cast<uint32_t>(o.secret.size());
  std::memcpy(h.secret, o.secret.data(), o.secret.size());
  return h;
}

// Every byte is compared whatever the first difference, so the time taken tells nothing
// about how much of a guess was right.
bool same_secret(const RendezvousHello& h, const std::string& secret) {
  char mine[kMaxSecretBytes] = {};
  std::memcpy(mine, secret.data(), secret.size());
  unsigned diff = h.secret_bytes ^ static_cast<uint32_t>(secret.size());
  for (size_t i = 0; i < kMaxSecretBytes; ++i) diff |= static_cast<unsigned char>(h.secret[i] ^ mine[i]);
  return diff == 0;
}

}  // namespace

std::string job_secret_from_env() { return env_str(kJobSecretVar, ""); }

std::string new_job_secret() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    ANVIL_ENSURE(n > 0 || errno == EINTR, kIo, "cannot make the job's secret: getrandom failed: ",
                 std::strerror(errno));
    if (n > 0) got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) hex += {kHex[b >> 4], kHex[b & 15]};
  return hex;
}

void check_job_secret(const std::string& secret, const std::string& master_addr) {
  const char* make = "e.g. export ANVIL_JOB_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')";
  ANVIL_ENSURE(secret.size() <= kMaxSecretBytes, kInvalidInput, kJobSecretVar, " is ", secret.size(),
               " bytes long, more than the ", kMaxSecretBytes, " it may be");
  ANVIL_ENSURE(secret.empty() || secret.size() >= kMinSecretBytes, kInvalidInput, kJobSecretVar, " is only ",
               secret.size(), " bytes long: use at least ", kMinSecretBytes, " random characters (", make, ")");
  ANVIL_ENSURE(!secret.empty() || net::is_loopback(net::resolve_ipv4(master_addr)), kInvalidInput,
               "a rendezvous at ", master_addr, " (not a loopback address: other machines can reach it) needs ",
               kJobSecretVar, ", the same random value for every rank, so that only this job's ranks can join (",
               make, "; docs/multi-node.md). With every rank on this machine, MASTER_ADDR=127.0.0.1 does instead");
}

// A connection to rank 0 that has not said its whole hello yet.
struct Bootstrap::Newcomer {
  net::Socket socket;
  std::string peer;  // its address, for the log
  net::Deadline deadline;
  RendezvousHello hello{};
  size_t got = 0;  // bytes of the hello so far
};

Bootstrap::Bootstrap(const BootstrapOptions& options) : options_(options) {
  const int n = options_.world, me = options_.rank;
  ANVIL_ENSURE(n >= 1 && me >= 0 && me < n, kUsage, "rank ", me, " is outside world size ", n,
               " (check RANK and WORLD_SIZE)");
  if (n == 1) return;
  ANVIL_ENSURE(options_.master_port > 0 && options_.master_port < 65536, kUsage,
               "a world of ", n, " ranks needs MASTER_PORT (got ", options_.master_port, ")");
  what_ = cat("rendezvous at ", options_.master_addr, ":", options_.master_port, " (rank ", me, " of ", n, ")");
  check_job_secret(options_.secret, options_.master_addr);
  const auto deadline = net::Deadline::after(options_.timeout_s);
  if (me == 0) accept_ranks(deadline);
  else join_root(deadline);
  // Everyone has met only when rank 0 has heard from all: one exchange closes the rendezvous.
  all_gather(std::string(), "rendezvous");
}

void Bootstrap::accept_ranks(const net::Deadline& deadline) {
  const int n = options_.world;
  local_address_ = net::resolve_ipv4(options_.master_addr);
  ANVIL_ENSURE(!local_address_.empty(), kComm, what_, ": cannot resolve host '", options_.master_addr,
               "' (MASTER_ADDR)");
  if (options_.secret.empty())
    log_warn(what_, ": ", kJobSecretVar, " is not set, so any process of this machine could join this job or end "
             "it; set it to the same random value for every rank (anvil's launcher does)");
  net::Socket listener = net::listen_tcp(local_address_, options_.master_port, n, nullptr, what_);
  listener.set_nonblocking();
  to_ranks_.resize(static_cast<size_t>(n));
  std::vector<Newcomer> newcomers;
  int refused = 0;
  auto refuse = [&](const Newcomer& c, const std::string& why) {
    ++refused;
    log_warn(what_, ": closed the connection from ", c.peer, ": ", why, "; still waiting for rank(s) ",
             missing_ranks());
  };
  for (std::string missing = missing_ranks(); !missing.empty(); missing = missing_ranks()) {
    if (deadline.expired())
      raise(ErrorKind::kTimeout, what_, ": ranks ", missing, " did not join within ", options_.timeout_s,
            " s (ANVIL_COMM_TIMEOUT_S); rank 0 listens on ", local_address_, ":", options_.master_port,
            refused ? cat(" and refused ", refused, " connection(s), logged above") : "",
            "; were all workers started with the same MASTER_ADDR/MASTER_PORT?");
    await_news(listener, newcomers, deadline);
    for (net::Socket s = net::accept_waiting(listener); s.valid(); s = net::accept_waiting(listener)) {
      if (newcomers.size() == kMaxNewcomers) {
        refuse(newcomers.front(), cat("more than ", kMaxNewcomers, " connections were waiting to say hello"));
        newcomers.erase(newcomers.begin());
      }
      const std::string peer = net::peer_address(s);
      newcomers.push_back({std::move(s), peer, net::Deadline::after(options_.hello_timeout_s)});
    }
    for (auto c = newcomers.begin(); c != newcomers.end();) {
      std::string why;
      const Heard heard = hear(*c, why);
      if (heard == Heard::kRefused) refuse(*c, why);
      c = heard == Heard::kWaiting ? c + 1 : newcomers.erase(c);
    }
  }
  for (const Newcomer& c : newcomers)
    log_warn(what_, ": closed the connection from ", c.peer, ": every rank had joined before it said hello");
}

// Sleeps until a connection arrives, a newcomer sends, a newcomer's time is up, or the deadline.
void Bootstrap::await_news(const net::Socket& listener, const std::vector<Newcomer>& newcomers,
                           const net::Deadline& deadline) const {
  std::vector<pollfd> fds{{listener.fd(), POLLIN, 0}};
  int wait_ms = deadline.remaining_ms();
  for (const Newcomer& c : newcomers) {
    fds.push_back({c.socket.fd(), POLLIN, 0});
    wait_ms = std::min(wait_ms, c.deadline.remaining_ms());
  }
  ANVIL_ENSURE(::poll(fds.data(), fds.size(), wait_ms) >= 0 || errno == EINTR, kComm, what_, ": poll failed: ",
               std::strerror(errno));
}

// Reads what the newcomer has sent; once its hello is whole, admits it or not.
Bootstrap::Heard Bootstrap::hear(Newcomer& c, std::string& why) {
  size_t got = 0;
  const net::IoStatus st =
      net::recv_waiting(c.socket, reinterpret_cast<char*>(&c.hello) + c.got, sizeof c.hello - c.got, &got);
  c.got += got;
  if (c.got >= sizeof c.hello.magic && std::memcmp(c.hello.magic, kRendezvousMagic, sizeof c.hello.magic) != 0) {
    why = "it is not an anvil rank (what it sent does not start as anvil's rendezvous hello)";
    return Heard::kRefused;
  }
  if (st != net::IoStatus::kOk) {
    why = cat("it hung up after ", c.got, " of the ", sizeof c.hello, " bytes of a hello");
    return Heard::kRefused;
  }
  if (c.got < sizeof c.hello && !c.deadline.expired()) return Heard::kWaiting;
  if (c.got < sizeof c.hello) {
    why = cat("it sent ", c.got, " of the ", sizeof c.hello, " bytes of a hello in ", options_.hello_timeout_s, " s");
    return Heard::kRefused;
  }
  return admit(c, why);
}

// Checks a whole hello, tells the newcomer the verdict, and keeps its connection if it joined.
Bootstrap::Heard Bootstrap::admit(Newcomer& c, std::string& why) {
  const RendezvousHello& h = c.hello;
  const int n = options_.world;
  RendezvousAnswer answer{};
  std::memcpy(answer.magic, kRendezvousMagic, sizeof answer.magic);
  answer.world = n;
  answer.verdict = RendezvousVerdict::kJoined;
  if (!same_secret(h, options_.secret)) {
    answer.verdict = RendezvousVerdict::kWrongSecret;
    why = cat("its job secret is not this job's (", kJobSecretVar, "; a rank of another job on the same port?)");
  } else if (h.world != n) {
    answer.verdict = RendezvousVerdict::kWrongWorld;
    why = cat("it says the world has ", h.world, " ranks, rank 0 says ", n, " (WORLD_SIZE differs between workers)");
  } else if (h.rank < 1 || h.rank >= n) {
    answer.verdict = RendezvousVerdict::kBadRank;
    why = cat("it says it is rank ", h.rank, ", not one of 1 .. ", n - 1);
  } else if (to_ranks_[static_cast<size_t>(h.rank)].valid()) {
    answer.verdict = RendezvousVerdict::kBadRank;
    why = cat("it says it is rank ", h.rank, ", which has joined already (RANK set twice?)");
  }
  // 16 bytes into a fresh connection's empty send buffer: this does not wait.
  const bool told = net::send_all(c.socket, &answer, sizeof answer, net::Deadline::after(1)) == net::IoStatus::kOk;
  if (answer.verdict != RendezvousVerdict::kJoined) return Heard::kRefused;
  if (!told) {
    why = cat("rank ", h.rank, " hung up before it heard that it joined");
    return Heard::kRefused;
  }
  to_ranks_[static_cast<size_t>(h.rank)] = std::move(c.socket);
  return Heard::kJoined;
}

std::string Bootstrap::missing_ranks() const {
  std::string missing;
  for (int r = 1; r < options_.world; ++r)
    if (!to_ranks_[static_cast<size_t>(r)].valid()) missing += cat(missing.empty() ? "" : ", ", r);
  return missing;
}

void Bootstrap::join_root(const net::Deadline& deadline) {
  const RendezvousHello hello = hello_of(options_);
  for (;;) {
    net::Socket s = net::connect_tcp(options_.master_addr, options_.master_port, deadline, what_);
    RendezvousAnswer answer{};
    net::IoStatus st = net::send_all(s, &hello, sizeof hello, deadline);
    if (st == net::IoStatus::kOk) st = net::recv_all(s, &answer, sizeof answer, deadline);
    if (st == net::IoStatus::kOk) {
      check_answer(answer);
      local_address_ = net::local_address(s);
      to_root_ = std::move(s);
      return;
    }
    // Closed unanswered: rank 0 had too many strangers waiting, or our hello took too long
    // (a stalled machine). Knock again.
    if (st != net::IoStatus::kClosed || deadline.expired()) fail(st, 0, "rendezvous");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Bootstrap::check_answer(const RendezvousAnswer& a) const {
  const std::string at = cat(options_.master_addr, ":", options_.master_port);
  ANVIL_ENSURE(std::memcmp(a.magic, kRendezvousMagic, sizeof a.magic) == 0, kComm, what_, ": what listens at ", at,
               " is not anvil's rank 0 (another program, or another anvil version, on MASTER_PORT?)");
  switch (a.verdict) {
    case RendezvousVerdict::kJoined: return;
    case RendezvousVerdict::kWrongSecret:
      raise(ErrorKind::kComm, what_, ": rank 0 at ", at, " refused this rank: its job secret differs (",
            kJobSecretVar, " must be the same for every rank of a job; or is another job using this port?)");
    case RendezvousVerdict::kWrongWorld:
      raise(ErrorKind::kComm, what_, ": rank 0 says the world has ", a.world, " ranks, this rank says ",
            options_.world, " (WORLD_SIZE differs between workers)");
    case RendezvousVerdict::kBadRank:
      raise(ErrorKind::kComm, what_, ": rank 0 already has a rank ", options_.rank, " (RANK set twice?)");
  }
  raise(ErrorKind::kComm, what_, ": rank 0 at ", at, " gave an answer this anvil does not know (",
        static_cast<int32_t>(a.verdict), "); are the ranks running the same anvil?");
}

void Bootstrap::fail(net::IoStatus status, int peer, const std::string& what) const {
  const std::string where = cat(what, " on rank ", options_.rank, " of ", options_.world);
  if (status == net::IoStatus::kTimeout)
    raise(ErrorKind::kTimeout, where, ": no answer from rank ", peer, " within ", options_.timeout_s,
          " s (ANVIL_COMM_TIMEOUT_S)");
  if (status == net::IoStatus::kClosed)
    raise(ErrorKind::kComm, where, ": rank ", peer, " closed its connection (did it exit or crash?)");
  raise(ErrorKind::kComm, where, ": socket error talking to rank ", peer, ": ", std::strerror(errno));
}
void Bootstrap::send_blob(const net::Socket& s, const std::string& blob, int peer, const std::string& what,
                          const net::Deadline& deadline) const {
  uint64_t len = blob.size();
  net::IoStatus st = net::send_all(s, &len, sizeof len, deadline);
  if (st == net::IoStatus::kOk) st = net::send_all(s, blob.data(), blob.size(), deadline);
  if (st != net::IoStatus::kOk) fail(st, peer, what);
}

std::string Bootstrap::recv_blob(const net::Socket& s, int peer, const std::string& what,
                                 const net::Deadline& deadline) const {
  uint64_t len = 0;
  net::IoStatus st = net::recv_all(s, &len, sizeof len, deadline);
  if (st != net::IoStatus::kOk) fail(st, peer, what);
  ANVIL_ENSURE(len <= kMaxBlob, kComm, what, " on rank ", options_.rank, ": rank ", peer,
               " sent a malformed message (", len, " bytes); are the ranks running the same anvil?");
  std::string blob(len, '\0');
  st = net::recv_all(s, blob.data(), len, deadline);
  if (st != net::IoStatus::kOk) fail(st, peer, what);
  return blob;
}

std::vector<std::string> Bootstrap::all_gather(const std::string& mine, const std::string& what) {
  const int n = options_.world;
  if (n == 1) return {mine};
  const auto deadline = net::Deadline::after(options_.timeout_s);
  std::vector<std::string> all(static_cast<size_t>(n));
  if (options_.rank == 0) {
    all[0] = mine;
    for (int r = 1; r < n; ++r) all[static_cast<size_t>(r)] = recv_blob(to_ranks_[static_cast<size_t>(r)], r, what, deadline);
    for (int r = 1; r < n; ++r)
      for (const std::string& blob : all) send_blob(to_ranks_[static_cast<size_t>(r)], blob, r, what, deadline);
  } else {
    send_blob(to_root_, mine, 0, what, deadline);
    for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = recv_blob(to_root_, 0, what, deadline);
  }
  return all;
}

std::string Bootstrap::broadcast_from_root(const std::string& root_blob, const std::string& what) {
  if (options_.world == 1) return root_blob;
  const auto deadline = net::Deadline::after(options_.timeout_s);
  if (options_.rank == 0) {
    for (int r = 1; r < options_.world; ++r) send_blob(to_ranks_[static_cast<size_t>(r)], root_blob, r, what, deadline);
    return root_blob;
  }
  return recv_blob(to_root_, 0, what, deadline);
}

}  // namespace anvil
