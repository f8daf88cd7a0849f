// The rendezvous star (see bootstrap.h). Wire format: a hello of two int32 (rank, world)
// from each rank to rank 0, then length-prefixed blobs (uint64 length, bytes).
#include "comm/bootstrap.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace anvil {

namespace {
constexpr uint64_t kMaxBlob = 1ull << 30;
}

Bootstrap::Bootstrap(const BootstrapOptions& options) : options_(options) {
  const int n = options_.world, me = options_.rank;
  ANVIL_ENSURE(n >= 1 && me >= 0 && me < n, kUsage, "rank ", me, " is outside world size ", n,
               " (check RANK and WORLD_SIZE)");
  if (n == 1) return;
  ANVIL_ENSURE(options_.master_port > 0 && options_.master_port < 65536, kUsage,
               "a world of ", n, " ranks needs MASTER_PORT (got ", options_.master_port, ")");
  const auto deadline = net::Deadline::after(options_.timeout_s);
  const std::string what = cat("rendezvous at ", options_.master_addr, ":", options_.master_port, " (rank ", me,
                               " of ", n, ")");
  if (me == 0) {
    net::Socket listener = net::listen_tcp(options_.master_port, n, nullptr, what);
    to_ranks_.resize(static_cast<size_t>(n));
    for (int joined = 1; joined < n;) {
      net::Socket s = net::accept_tcp(listener, deadline);
      if (!s.valid()) {
        std::string missing;
        for (int r = 1; r < n; ++r)
          if (!to_ranks_[static_cast<size_t>(r)].valid()) missing += cat(missing.empty() ? "" : ", ", r);
        raise(ErrorKind::kTimeout, what, ": ranks ", missing, " did not join within ", options_.timeout_s,
              " s (ANVIL_COMM_TIMEOUT_S); were all workers started with the same MASTER_ADDR/MASTER_PORT?");
      }
      int32_t hello[2] = {-1, -1};
      if (net::recv_all(s, hello, sizeof hello, deadline) != net::IoStatus::kOk) continue;
      ANVIL_ENSURE(hello[1] == n, kComm, what, ": rank ", hello[0], " says the world has ", hello[1],
                   " ranks, rank 0 says ", n, " (WORLD_SIZE differs between workers)");
      ANVIL_ENSURE(hello[0] > 0 && hello[0] < n && !to_ranks_[static_cast<size_t>(hello[0])].valid(), kComm, what,
                   ": a worker joined as rank ", hello[0], ", which is out of range or taken (RANK set twice?)");
      if (joined == 1) local_address_ = net::local_address(s);
      to_ranks_[static_cast<size_t>(hello[0])] = std::move(s);
      ++joined;
    }
  } else {
    to_root_ = net::connect_tcp(options_.master_addr, options_.master_port, deadline, what);
    local_address_ = net::local_address(to_root_);
    int32_t hello[2] = {me, n};
    net::IoStatus st = net::send_all(to_root_, hello, sizeof hello, deadline);
    if (st != net::IoStatus::kOk) fail(st, 0, "rendezvous");
  }
  // Everyone has met only when rank 0 has heard from all: one exchange closes the rendezvous.
  all_gather(std::string(), "rendezvous");
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
