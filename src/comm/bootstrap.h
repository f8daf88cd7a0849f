// The rendezvous: every rank meets rank 0 at MASTER_ADDR:MASTER_PORT.
//
// Rank 0 listens there; every other rank connects (retrying until rank 0 is up) and says
// who it is. The star of connections stays open for the life of the Bootstrap and carries
// small host-side exchanges: the CPU comm's mesh addresses, NCCL's unique id, bench
// timings, global token counts. Messages are length-prefixed; every exchange is collective
// (all ranks call it in the same order) and bounded by the comm timeout, and an error names
// the exchange, the rank and the peer that failed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/socket.h"

namespace anvil {

struct BootstrapOptions {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  double timeout_s = 600;
};

class Bootstrap {
 public:
  explicit Bootstrap(const BootstrapOptions& options);  // blocks until all ranks have met
  int rank() const { return options_.rank; }
  int world() const { return options_.world; }
  double timeout_s() const { return options_.timeout_s; }
  // This machine's address as rank 0 sees it (for peers to connect to).
  const std::string& local_address() const { return local_address_; }

  // Every rank's blob, in rank order. `what` names the exchange in errors.
  std::vector<std::string> all_gather(const std::string& mine, const std::string& what);
  // Rank 0's blob on every rank (the argument is ignored elsewhere).
  std::string broadcast_from_root(const std::string& root_blob, const std::string& what);

 private:
  [[noreturn]] void fail(net::IoStatus status, int peer, const std::string& what) const;
  void send_blob(const net::Socket& s, const std::string& blob, int peer, const std::string& what,
                 const net::Deadline& deadline) const;
  std::string recv_blob(const net::Socket& s, int peer, const std::string& what,
                        const net::Deadline& deadline) const;

  BootstrapOptions options_;
  std::string local_address_ = "127.0.0.1";
  net::Socket to_root_;                // ranks > 0
  std::vector<net::Socket> to_ranks_;  // rank 0: index r holds the connection to rank r
};

}  // namespace anvil
