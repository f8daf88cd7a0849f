// The rendezvous (comm/bootstrap.h) against what may reach its port while a job starts:
// garbage, a hello cut short, a client that connects and says nothing, a rank with another
// secret, a second job on the same port, hellos with bad fields. In each the real ranks
// (threads, each with its own Bootstrap) still meet and exchange; rank 0 listens on the
// master address only. The tests wait for events (rank 0 closing or answering a
// connection, a rank's result), never for a number of seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/socket.h"
#include "core/error.h"
#include "testing.h"

namespace anvil {
namespace {

const std::string kSecret = "0123456789abcdef-this-job", kOtherSecret = "0123456789abcdef-another-job";

BootstrapOptions rank_of(int rank, int world, int port, const std::string& secret = kSecret) {
  BootstrapOptions o;
  o.rank = rank;
  o.world = world;
  o.master_port = port;
  o.timeout_s = 10;
  o.secret = secret;
  return o;
}

// One rank in its own thread: it joins, then all_gathers "rN" and takes rank 0's broadcast.
// Its result: "r0 r1 ... | root" when the job formed and exchanged, else "[kind] message".
std::future<std::string> start(const BootstrapOptions& o) {
  return std::async(std::launch::async, [o] {
    try {
      Bootstrap b(o);
      std::string out;
      for (const std::string& s : b.all_gather(cat("r", o.rank), "test all_gather")) out += s + " ";
      return out + "| " + b.broadcast_from_root("root", "test broadcast");
    } catch (const Error& e) {
      return cat("[", error_kind_name(e.kind()), "] ", e.what());
    }
  });
}

std::string formed(int world) {
  std::string s;
  for (int r = 0; r < world; ++r) s += cat("r", r, " ");
  return s + "| root";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A raw connection to the rendezvous port, made once rank 0 listens (it retries until then);
// a failure to connect is the test's (the calls after it fail on the invalid socket).
net::Socket connect_to(int port, const std::string& host = "127.0.0.1") {
  try {
    return net::connect_tcp(host, port, net::Deadline::after(10), "a test's connection");
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    return net::Socket();
  }
}

void send(const net::Socket& s, const void* data, size_t bytes) {
  ASSERT_EQ(net::send_all(s, data, bytes, net::Deadline::after(10)), net::IoStatus::kOk);
}

// Whether rank 0 closes the connection (within 10 s) without a word.
bool closed_unanswered(const net::Socket& s) {
  char byte = 0;
  return net::recv_all(s, &byte, 1, net::Deadline::after(10)) == net::IoStatus::kClosed;
}

// "127.0.0.1:41234", as rank 0 names this connection in its log.
std::string address_of(const net::Socket& s) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &len);
  return cat(net::local_address(s), ":", ntohs(a.sin_port));
}

RendezvousHello hello(int rank, int world, const std::string& secret = kSecret) {
  RendezvousHello h{};
  std::memcpy(h.magic, kRendezvousMagic, sizeof h.magic);
  h.rank = rank;
  h.world = world;
  h.secret_bytes = static_cast<uint32_t>(secret.size());
  std::memcpy(h.secret, secret.data(), secret.size());
  return h;
}

// Sends a hello and reads rank 0's answer; the verdict's number, or -1 when there was none.
int verdict_for(int port, const RendezvousHello& h) {
  net::Socket s = connect_to(port);
  send(s, &h, sizeof h);
  RendezvousAnswer a{};
  if (net::recv_all(s, &a, sizeof a, net::Deadline::after(10)) != net::IoStatus::kOk) return -1;
  EXPECT_EQ(std::memcmp(a.magic, kRendezvousMagic, sizeof a.magic), 0);
  EXPECT_TRUE(closed_unanswered(s)) << "rank 0 kept a refused connection open";
  return static_cast<int>(a.verdict);
}

// The case seen in the wild: 2 KB of something else (an HTTP client, a port scanner) used to
// end the job ("rank 1112686919 says the world has 4540225 ranks"); a hello cut short hung
// rank 0 on it. Both are closed and logged with their address, and the ranks still meet.
TEST(Rendezvous, GarbageAndShortHellosAreClosedAndTheJobForms) {
  const int port = net::free_tcp_port();
  ::testing::internal::CaptureStderr();
  auto r0 = start(rank_of(0, 2, port));
  net::Socket garbage = connect_to(port);
  const std::string http(2048, 'G');
  send(garbage, http.data(), http.size());
  EXPECT_TRUE(closed_unanswered(garbage));
  net::Socket short_hello = connect_to(port);
  const RendezvousHello h = hello(1, 2);
  send(short_hello, &h, 20);
  ::shutdown(short_hello.fd(), SHUT_WR);
  EXPECT_TRUE(closed_unanswered(short_hello));
  auto r1 = start(rank_of(1, 2, port));
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(log, "closed the connection from " + address_of(garbage) + ": it is not an anvil rank")) << log;
  EXPECT_TRUE(has(log, "closed the connection from " + address_of(short_hello) + ": it hung up after 20 of the 148"))
      << log;
}

// A client that connects first and sends nothing holds up no rank: rank 1, which connects
// behind it and gives up after 5 s, joins although the silent client has 10 s to say hello
// and rank 0 30 s to wait, which it could not if rank 0 read hellos one after another.
TEST(Rendezvous, ASilentClientDoesNotHoldUpTheRanks) {
  const int port = net::free_tcp_port();
  BootstrapOptions o0 = rank_of(0, 2, port), o1 = rank_of(1, 2, port);
  o0.timeout_s = 30;
  o1.timeout_s = 5;
  auto r0 = start(o0);
  net::Socket silent = connect_to(port);
  net::Socket half = connect_to(port);
  send(half, kRendezvousMagic, 4);
  auto r1 = start(o1);
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
  EXPECT_TRUE(closed_unanswered(silent));  // once the job formed, at the latest
  EXPECT_TRUE(closed_unanswered(half));
}

// ... and is closed when its time to say hello is up, while rank 0 still waits.
TEST(Rendezvous, ASilentClientIsClosedWhenItsHelloTimeIsUp) {
  const int port = net::free_tcp_port();
  BootstrapOptions o0 = rank_of(0, 2, port);
  o0.hello_timeout_s = 0.2;
  auto r0 = start(o0);
  net::Socket silent = connect_to(port);
  EXPECT_TRUE(closed_unanswered(silent)) << "rank 0 kept a silent connection for 10 s";
  auto r1 = start(rank_of(1, 2, port));
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
}

// A rank with another secret is told so; rank 0 logs it and waits for the right one.
TEST(Rendezvous, ARankWithAnotherSecretIsToldAndTheJobForms) {
  const int port = net::free_tcp_port();
  ::testing::internal::CaptureStderr();
  auto r0 = start(rank_of(0, 2, port));
  const std::string wrong = start(rank_of(1, 2, port, kOtherSecret)).get();
  auto r1 = start(rank_of(1, 2, port));
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string at = "127.0.0.1:" + std::to_string(port);
  EXPECT_TRUE(has(wrong, "[communication] rendezvous at " + at + " (rank 1 of 2): rank 0 at " + at)) << wrong;
  EXPECT_TRUE(has(wrong, "refused this rank: its job secret differs (ANVIL_JOB_SECRET must be the same")) << wrong;
  EXPECT_TRUE(has(log, "(rank 0 of 2): closed the connection from 127.0.0.1:")) << log;
  EXPECT_TRUE(has(log, ": its job secret is not this job's (ANVIL_JOB_SECRET; a rank of another job on the same "
                      "port?)"))
      << log;
  EXPECT_FALSE(has(log, kOtherSecret) || has(log, kSecret) || has(wrong, kOtherSecret)) << "a secret was shown";
}

// A second job given the same port: its rank 0 cannot listen there, and its rank 1 is
// turned away by this job's rank 0, which then meets its own rank 1.
TEST(Rendezvous, ASecondJobOnTheSamePortDoesNotDisturbTheFirst) {
  const int port = net::free_tcp_port();
  auto r0 = start(rank_of(0, 2, port));
  connect_to(port);  // rank 0 listens
  const std::string other0 = start(rank_of(0, 2, port, kOtherSecret)).get();
  const std::string other1 = start(rank_of(1, 2, port, kOtherSecret)).get();
  auto r1 = start(rank_of(1, 2, port));
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
  EXPECT_TRUE(has(other0, "cannot listen on 127.0.0.1:" + std::to_string(port))) << other0;
  EXPECT_TRUE(has(other1, "its job secret differs")) << other1;
}

// With the job's secret, every other field must still fit: rank 0 answers each bad hello
// with why, closes it, and keeps the places open for the real ranks.
TEST(Rendezvous, EveryFieldOfAHelloIsChecked) {
  const int port = net::free_tcp_port();
  auto r0 = start(rank_of(0, 3, port));
  const int wrong_secret = static_cast<int>(RendezvousVerdict::kWrongSecret);
  const int wrong_world = static_cast<int>(RendezvousVerdict::kWrongWorld);
  const int bad_rank = static_cast<int>(RendezvousVerdict::kBadRank);
  EXPECT_EQ(verdict_for(port, hello(1112686919, 4540225, "")), wrong_secret);
  EXPECT_EQ(verdict_for(port, hello(1, 3, kSecret.substr(0, 16))), wrong_secret);
  RendezvousHello long_secret = hello(1, 3);
  long_secret.secret_bytes = 1u << 31;  // the secret's bytes are right, its length is not
  EXPECT_EQ(verdict_for(port, long_secret), wrong_secret);
  EXPECT_EQ(verdict_for(port, hello(1, 4540225)), wrong_world);
  EXPECT_EQ(verdict_for(port, hello(1, -3)), wrong_world);
  EXPECT_EQ(verdict_for(port, hello(0, 3)), bad_rank);
  EXPECT_EQ(verdict_for(port, hello(3, 3)), bad_rank);
  EXPECT_EQ(verdict_for(port, hello(-1, 3)), bad_rank);
  // Two ranks say they are rank 1: the one rank 0 hears first joins, the other is told.
  auto r1 = start(rank_of(1, 3, port)), twin = start(rank_of(1, 3, port));
  const auto ready = [](std::future<std::string>& f) {
    return f.wait_for(std::chrono::milliseconds(10)) == std::future_status::ready;
  };
  while (!ready(r1) && !ready(twin)) {
  }
  std::future<std::string>& told = ready(r1) ? r1 : twin;
  std::future<std::string>& joined = ready(r1) ? twin : r1;
  EXPECT_TRUE(has(told.get(), ": rank 0 already has a rank 1 (RANK set twice?)"));
  auto r2 = start(rank_of(2, 3, port));
  EXPECT_EQ(r0.get(), formed(3));
  EXPECT_EQ(joined.get(), formed(3));
  EXPECT_EQ(r2.get(), formed(3));
}

// Rank 0 listens on the master address, not on every address: with MASTER_ADDR 127.0.0.2
// (a loopback address like 127.0.0.1, on any Linux machine) a connection to 127.0.0.1 at
// the same port finds nobody.
TEST(Rendezvous, RankZeroListensOnTheMasterAddressOnly) {
  const int port = net::free_tcp_port();
  BootstrapOptions o0 = rank_of(0, 2, port), o1 = rank_of(1, 2, port);
  o0.master_addr = o1.master_addr = "127.0.0.2";
  auto r0 = start(o0);
  connect_to(port, "127.0.0.2");  // rank 0 listens
  EXPECT_THROW(net::connect_tcp("127.0.0.1", port, net::Deadline::after(0), "a probe"), Error);
  auto r1 = start(o1);
  EXPECT_EQ(r0.get(), formed(2));
  EXPECT_EQ(r1.get(), formed(2));
}

// Without a secret, only a loopback master will do (and only this machine can reach it).
TEST(Rendezvous, ASecretIsNeededBeyondLoopback) {
  EXPECT_NO_THROW(check_job_secret("", "127.0.0.1"));
  EXPECT_NO_THROW(check_job_secret("", "localhost"));
  EXPECT_NO_THROW(check_job_secret(kSecret, "192.0.2.1"));
  try {
    check_job_secret("", "192.0.2.1");
    ADD_FAILURE() << "no secret was accepted for a master other machines can reach";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_TRUE(has(e.what(), "a rendezvous at 192.0.2.1 (not a loopback address")) << e.what();
    EXPECT_TRUE(has(e.what(), "needs ANVIL_JOB_SECRET")) << e.what();
  }
  EXPECT_THROW(check_job_secret("short", "127.0.0.1"), Error);
  EXPECT_THROW(check_job_secret(std::string(kMaxSecretBytes + 1, 'x'), "127.0.0.1"), Error);
  // A rank refuses to start, before it connects or listens.
  BootstrapOptions far = rank_of(1, 2, net::free_tcp_port(), "");
  far.master_addr = "192.0.2.1";
  const std::string refused = start(far).get();
  EXPECT_TRUE(has(refused, "[invalid input] a rendezvous at 192.0.2.1 (not a loopback address")) << refused;
}

TEST(Rendezvous, NewSecretsAreRandomHex) {
  const std::string a = new_job_secret(), b = new_job_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace anvil
