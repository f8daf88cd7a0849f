// The rendezvous: every rank meets rank 0 at MASTER_ADDR:MASTER_PORT.
//
// Rank 0 listens there, on that address only (a loopback one when every rank is on this
// machine); every other rank connects (retrying until rank 0 is up) and says who it is. The
// star of connections stays open for the life of the Bootstrap and carries small host-side
// exchanges: the CPU comm's mesh addresses, NCCL's unique id, bench timings, global token
// counts. Messages are length-prefixed; every exchange is collective (all ranks call it in
// the same order) and bounded by the comm timeout, and an error names the exchange, the rank
// and the peer that failed.
//
// Who may join. Every rank presents the job's secret (ANVIL_JOB_SECRET) in its hello, and
// rank 0 compares it in constant time. anvil's launcher on one machine makes a fresh random
// one for its workers; across machines (several launchers, torchrun, Slurm) the user sets
// the same value on every machine, and a rank refuses to start without it unless
// MASTER_ADDR is a loopback address, where only this machine can connect (rank 0 then warns
// that any process of this machine could join). Rank 0 reads every connection's hello
// side by side (poll), each within hello_timeout_s, checks every field, and answers: a rank
// it refuses (another secret, another world size, a rank out of range or taken) is told
// why and fails with that; whatever it cannot use (garbage, a short or slow hello, a
// stranger) is closed and logged with its address, and rank 0 keeps waiting for the real
// ranks until its own timeout. The secret travels in the clear: it keeps out whoever can
// reach the port, not whoever can read the network's traffic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/socket.h"

namespace anvil {

// The job's secret, from this variable (empty when unset).
inline constexpr const char* kJobSecretVar = "ANVIL_JOB_SECRET";
inline constexpr size_t kMinSecretBytes = 16, kMaxSecretBytes = 128;
std::string job_secret_from_env();
// A fresh secret: 32 random bytes (getrandom), in hex.
std::string new_job_secret();
// Throws kInvalidInput unless `secret` will do for a rendezvous at master_addr: between
// kMinSecretBytes and kMaxSecretBytes long, or empty when master_addr is a loopback address.
void check_job_secret(const std::string& secret, const std::string& master_addr);

struct BootstrapOptions {
  int rank = 0;
  int world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  double timeout_s = 600;
  std::string secret = job_secret_from_env();
  double hello_timeout_s = 10;  // for a connection to rank 0 to send its whole hello
};

// The wire of the rendezvous: each rank's first message to rank 0, and rank 0's answer.
// Integers are in the machines' own byte order (every rank runs the same anvil).
inline constexpr char kRendezvousMagic[8] = {'a', 'n', 'v', 'i', 'l', 'r', 'v', '1'};
struct RendezvousHello {
  char magic[8];  // kRendezvousMagic: an anvil rank, of this protocol
  int32_t rank, world;
  uint32_t secret_bytes;
  char secret[kMaxSecretBytes];  // zero after secret_bytes
};
enum class RendezvousVerdict : int32_t { kJoined, kWrongSecret, kWrongWorld, kBadRank };
struct RendezvousAnswer {
  char magic[8];  // kRendezvousMagic
  RendezvousVerdict verdict;
  int32_t world;  // rank 0's
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
  struct Newcomer;
  enum class Heard { kWaiting, kJoined, kRefused };

  void accept_ranks(const net::Deadline& deadline);  // rank 0
  void await_news(const net::Socket& listener, const std::vector<Newcomer>& newcomers,
                  const net::Deadline& deadline) const;
  Heard hear(Newcomer& c, std::string& why);
  Heard admit(Newcomer& c, std::string& why);
  std::string missing_ranks() const;
  void join_root(const net::Deadline& deadline);  // the other ranks
  void check_answer(const RendezvousAnswer& answer) const;

  [[noreturn]] void fail(net::IoStatus status, int peer, const std::string& what) const;
  void send_blob(const net::Socket& s, const std::string& blob, int peer, const std::string& what,
                 const net::Deadline& deadline) const;
  std::string recv_blob(const net::Socket& s, int peer, const std::string& what,
                        const net::Deadline& deadline) const;

  BootstrapOptions options_;
  std::string what_;  // "rendezvous at HOST:PORT (rank r of n)", the start of its messages
  std::string local_address_ = "127.0.0.1";
  net::Socket to_root_;                // ranks > 0
  std::vector<net::Socket> to_ranks_;  // rank 0: index r holds the connection to rank r
};

}  // namespace anvil
