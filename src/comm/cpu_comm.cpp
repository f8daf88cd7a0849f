// The CPU comm: collectives between processes (or threads) over a full mesh of TCP
// connections, set up through the rendezvous.
//
// Algorithms, for n ranks and a buffer split into n chunks (chunk j: elements
// [N*j/n, N*(j+1)/n)):
//  - reduce_scatter: rank j receives every rank's chunk j and adds them in rank order.
//  - all_reduce: reduce_scatter, then every rank sends its reduced chunk to all others.
//  - all_gather: every rank sends its slice to all others. broadcast: root sends to all.
//  - all_to_all: every rank sends chunk p of its input to rank p, and receives chunk p of
//    its output from rank p (its own chunk copied).
// Each element is reduced by exactly one rank, always as ((x0 + x1) + x2) + ..., in fp32
// (bf16 inputs are widened and rounded once at the end), so the result is bit-identical on
// every rank and every run, whatever order the bytes arrive in. Each rank sends and
// receives (n-1)/n of the buffer per phase, like a ring, without the ring's n-1 steps.
//
// All transfers of a phase progress together under one poll() loop on non-blocking
// sockets, so two ranks sending to each other never deadlock on full socket buffers, and
// the comm timeout bounds the whole collective. Every message starts with a header
// (sequence number, collective, byte count) that the receiver checks: ranks that call
// different collectives, or the same one with different sizes, get an error that says so
// instead of garbage.
// With a HostStager (comm.h) the tensors are on a GPU: each collective copies its input to
// host memory, runs as above, and copies the result back (several ranks on one GPU).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/comm.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/threads.h"

namespace anvil {
namespace {

enum class Op : uint32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast, kBarrier, kAllToAll };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
    case Op::kAllToAll: return "all_to_all";
  }
  return "?";
}

struct Header {
  uint64_t seq = 0;
  uint32_t op = 0;
  uint32_t magic = 0x616e766c;  // "anvl"
  uint64_t bytes = 0;
};
static_assert(sizeof(Header) == 24);

// One message to or from one peer within a phase: the header, then `bytes` of payload.
struct Transfer {
  int peer = 0;
  bool send = false;
  char* data = nullptr;
  size_t bytes = 0;
  Header header{};   // sent, or received and checked
  size_t done = 0;   // bytes of header + payload moved so far
  bool finished() const { return done == sizeof(Header) + bytes; }
};

// What one poll of a phase waits on: per socket, the transfer (index into the phase's
// transfers, or -1) that sends and the one that receives on it.
struct PollSet {
  std::vector<pollfd> fds;
  std::vector<int> send_of, recv_of;
};

int64_t chunk_begin(int64_t n_elems, int world, int j) {
  return n_elems * static_cast<int64_t>(j) / world;
}

// out[i] = op over sources (rank order) of src[r][i]; out may alias a source.
void reduce_in_rank_order(void* out, const std::vector<const void*>& srcs, DType dtype, int64_t n,
                          ReduceOp op, std::vector<float>& acc) {
  acc.resize(static_cast<size_t>(n));
  const float divisor = static_cast<float>(srcs.size());
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    float* a = acc.data();
    if (dtype == DType::kF32) {
      const float* s0 = static_cast<const float*>(srcs[0]);
      for (int64_t i = b; i < e; ++i) a[i] = s0[i];
      for (size_t r = 1; r < srcs.size(); ++r) {
        const float* s = static_cast<const float*>(srcs[r]);
        for (int64_t i = b; i < e; ++i) a[i] += s[i];
      }
      float* o = static_cast<float*>(out);
      if (op == ReduceOp::kAvg) for (int64_t i = b; i < e; ++i) o[i] = a[i] / divisor;
      else for (int64_t i = b; i < e; ++i) o[i] = a[i];
    } else {
      const uint16_t* s0 = static_cast<const uint16_t*>(srcs[0]);
      for (int64_t i = b; i < e; ++i) a[i] = bf16_bits_to_f32(s0[i]);
      for (size_t r = 1; r < srcs.size(); ++r) {
        const uint16_t* s = static_cast<const uint16_t*>(srcs[r]);
        for (int64_t i = b; i < e; ++i) a[i] += bf16_bits_to_f32(s[i]);
      }
      uint16_t* o = static_cast<uint16_t*>(out);
      for (int64_t i = b; i < e; ++i) o[i] = f32_to_bf16_bits(op == ReduceOp::kAvg ? a[i] / divisor : a[i]);
    }
  });
}

class CpuComm final : public Comm {
 public:
  CpuComm(const CommOptions& o, std::unique_ptr<HostStager> stager)
      : Comm(std::make_unique<Bootstrap>(
            BootstrapOptions{o.rank, o.world, o.master_addr, o.master_port, o.timeout_s})),
        stager_(std::move(stager)) {
    if (world() > 1) connect_mesh();
  }
  // A group of parent's ranks (Comm::group): the parent's connections, its own sequence of
  // phases (the members call the group's collectives in the same order, so on each
  // connection the parent's and the group's messages come in the order both sides sent them).
  CpuComm(const CpuComm& parent, std::vector<int> members)
      : Comm(parent, std::move(members)), mesh_(parent.mesh_), stager_(parent.stager_) {}

  std::unique_ptr<Comm> group(const std::vector<int>& members) override {
    return std::make_unique<CpuComm>(*this, members);
  }

  Device device() const override { return stager_ ? Device::kCUDA : Device::kCPU; }
  int gpu() const override { return stager_ ? stager_->gpu() : -1; }
  std::string backend() const override { return stager_ ? "cpu (GPU tensors staged through the host)" : "cpu"; }

  CommWork all_reduce(Tensor out, Tensor in, ReduceOp op, std::string_view tag) override {
    check_reduce("all_reduce", out, in, 1);
    return staged(out, in, [&](Tensor o, Tensor i) { all_reduce_host(o, i, op, tag); });
  }

  CommWork reduce_scatter(Tensor out, Tensor in, ReduceOp op, std::string_view tag) override {
    check_reduce("reduce_scatter", out, in, world());
    return staged(out, in, [&](Tensor o, Tensor i) { reduce_scatter_host(o, i, op, tag); });
  }

  CommWork all_gather(Tensor out, Tensor in, std::string_view tag) override {
    check_gather("all_gather", out, in, world());
    return staged(out, in, [&](Tensor o, Tensor i) { all_gather_host(o, i, tag); });
  }

  CommWork all_to_all(Tensor out, Tensor in, std::string_view tag) override {
    check_all_to_all(out, in);
    return staged(out, in, [&](Tensor o, Tensor i) { all_to_all_host(o, i, tag); });
  }

  CommWork broadcast(Tensor buf, int root, std::string_view tag) override {
    check_device("broadcast", buf);
    ANVIL_ENSURE(root >= 0 && root < world(), kInternal, where("broadcast", tag), ": root ", root,
                 " is not a rank");
    return staged(buf, buf, [&](Tensor b, Tensor) { broadcast_host(b, root, tag); });
  }

  void barrier(std::string_view tag) override {
    std::vector<Transfer> ts;
    for (int p = 0; p < world(); ++p) {
      if (p == rank()) continue;
      ts.push_back(make(p, true, nullptr, 0));
      ts.push_back(make(p, false, nullptr, 0));
    }
    exchange(ts, Op::kBarrier, tag);
  }

  void set_compute_stream(void* stream) override {
    if (stager_) stager_->set_compute_stream(stream);
  }
  void wait(CommWork) override {}
  void synchronize() override {}

 private:
  CommWork next_work() { return CommWork{++works_}; }

  // Runs f on host views of out and in: themselves on the CPU; with a stager, copies (in
  // read into host memory, inside the copy of out when it lies within out), and out written
  // back to the GPU after f.
  template <class F>
  CommWork staged(Tensor out, Tensor in, F f) {
    if (!stager_) {
      f(out, in);
      return next_work();
    }
    auto on_host = [](Tensor t, char* p) { return Tensor(p, t.dtype, t.shape, Device::kCPU); };
    const char* od = static_cast<const char*>(out.data);
    const char* id = static_cast<const char*>(in.data);
    host_out_.resize(out.bytes());
    Tensor hi;
    if (id >= od && id + in.bytes() <= od + out.bytes()) {
      stager_->to_host(host_out_.data(), out.data, out.bytes());
      hi = on_host(in, host_out_.data() + (id - od));
    } else {
      host_in_.resize(in.bytes());
      stager_->to_host(host_in_.data(), in.data, in.bytes());
      hi = on_host(in, host_in_.data());
    }
    f(on_host(out, host_out_.data()), hi);
    stager_->to_device(out.data, host_out_.data(), out.bytes());
    return next_work();
  }

  void all_reduce_host(Tensor out, Tensor in, ReduceOp op, std::string_view tag) {
    if (out.data != in.data) std::memmove(out.data, in.data, in.bytes());
    const int n = world(), me = rank();
    if (n == 1) return;
    const size_t es = dtype_size(in.dtype);
    const int64_t N = in.numel();
    char* buf = static_cast<char*>(out.data);
    auto begin = [&](int j) { return chunk_begin(N, n, j); };
    const int64_t mine = begin(me + 1) - begin(me);
    reduce_chunk(Op::kAllReduce, tag, out.dtype, op, mine, [&](int p) { return buf + begin(p) * es; },
                 buf + begin(me) * es, buf + begin(me) * es,
                 [&](int p) { return static_cast<size_t>(begin(p + 1) - begin(p)) * es; });
    std::vector<Transfer> ts;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      ts.push_back(make(p, true, buf + begin(me) * es, static_cast<size_t>(mine) * es));
      ts.push_back(make(p, false, buf + begin(p) * es, static_cast<size_t>(begin(p + 1) - begin(p)) * es));
    }
    exchange(ts, Op::kAllReduce, tag);
  }

  void reduce_scatter_host(Tensor out, Tensor in, ReduceOp op, std::string_view tag) {
    const int n = world(), me = rank();
    const size_t slice = out.bytes();
    char* src = static_cast<char*>(in.data);
    if (n == 1) {
      if (out.data != in.data) std::memmove(out.data, in.data, slice);
      return;
    }
    reduce_chunk(Op::kReduceScatter, tag, in.dtype, op, out.numel(),
                 [&](int p) { return src + static_cast<size_t>(p) * slice; }, src + static_cast<size_t>(me) * slice,
                 static_cast<char*>(out.data), [&](int) { return slice; });
  }

  void all_gather_host(Tensor out, Tensor in, std::string_view tag) {
    const int me = rank();
    const size_t slice = in.bytes();
    char* dst = static_cast<char*>(out.data);
    if (dst + static_cast<size_t>(me) * slice != in.data)
      std::memmove(dst + static_cast<size_t>(me) * slice, in.data, slice);
    with_every_peer(Op::kAllGather, tag, slice, [&](int) { return dst + static_cast<size_t>(me) * slice; },
                    [&](int p) { return dst + static_cast<size_t>(p) * slice; });
  }

  void all_to_all_host(Tensor out, Tensor in, std::string_view tag) {
    const int n = world(), me = rank();
    const size_t chunk = in.bytes() / static_cast<size_t>(n);
    char* dst = static_cast<char*>(out.data);
    char* src = static_cast<char*>(in.data);
    std::memcpy(dst + static_cast<size_t>(me) * chunk, src + static_cast<size_t>(me) * chunk, chunk);
    with_every_peer(Op::kAllToAll, tag, chunk, [&](int p) { return src + static_cast<size_t>(p) * chunk; },
                    [&](int p) { return dst + static_cast<size_t>(p) * chunk; });
  }

  // One phase in which this rank sends `bytes` at send_at(p) to every peer p and receives
  // `bytes` from it at recv_at(p).
  template <class SendAt, class RecvAt>
  void with_every_peer(Op coll, std::string_view tag, size_t bytes, SendAt send_at, RecvAt recv_at) {
    std::vector<Transfer> ts;
    for (int p = 0; p < world(); ++p) {
      if (p == rank()) continue;
      ts.push_back(make(p, true, send_at(p), bytes));
      ts.push_back(make(p, false, recv_at(p), bytes));
    }
    exchange(ts, coll, tag);
  }

  void broadcast_host(Tensor buf, int root, std::string_view tag) {
    std::vector<Transfer> ts;
    if (rank() == root) {
      for (int p = 0; p < world(); ++p)
        if (p != root) ts.push_back(make(p, true, static_cast<char*>(buf.data), buf.bytes()));
    } else {
      ts.push_back(make(root, false, static_cast<char*>(buf.data), buf.bytes()));
    }
    exchange(ts, Op::kBroadcast, tag);
  }

  static Transfer make(int peer, bool send, char* data, size_t bytes) {
    Transfer t;
    t.peer = peer;
    t.send = send;
    t.data = data;
    t.bytes = bytes;
    return t;
  }

  // The reduce-scatter phase: send chunk p (at chunk_of(p)) to every peer p, receive every
  // peer's copy of my chunk (bytes_of(me) each), and reduce it with mine (at my_src) into
  // dst, in rank order.
  template <class ChunkOf, class BytesOf>
  void reduce_chunk(Op coll, std::string_view tag, DType dtype, ReduceOp op, int64_t my_elems, ChunkOf chunk_of,
                    const char* my_src, char* dst, BytesOf bytes_of) {
    const int n = world(), me = rank();
    const size_t my_bytes = bytes_of(me);
    staging_.resize(my_bytes * static_cast<size_t>(n - 1));
    std::vector<Transfer> ts;
    std::vector<const void*> srcs(static_cast<size_t>(n));
    size_t slot = 0;
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        srcs[static_cast<size_t>(p)] = my_src;
        continue;
      }
      char* stage = staging_.data() + slot++ * my_bytes;
      srcs[static_cast<size_t>(p)] = stage;
      ts.push_back(make(p, true, chunk_of(p), bytes_of(p)));
      ts.push_back(make(p, false, stage, my_bytes));
    }
    exchange(ts, coll, tag);
    reduce_in_rank_order(dst, srcs, dtype, my_elems, op, acc_);
  }

  void connect_mesh();
  void exchange(std::vector<Transfer>& ts, Op coll, std::string_view tag);
  void poll_set_for(const std::vector<Transfer>& ts, PollSet& ps) const;
  [[noreturn]] void exchange_timed_out(const std::vector<Transfer>& ts, Op coll, std::string_view tag) const;
  void check_header(const Transfer& t, Op coll, std::string_view tag, uint64_t seq) const;
  void receive_ready(Transfer& t, int fd, Op coll, std::string_view tag, uint64_t seq) const;
  void send_ready(Transfer& t, int fd, Op coll, std::string_view tag) const;
  [[noreturn]] void peer_failed(Op coll, std::string_view tag, int peer, bool closed) const;

  // The connection to rank p of this comm (a group's rank p: the run's rank members_[p]).
  const net::Socket& peer(int p) const {
    return (*mesh_)[static_cast<size_t>(members_.empty() ? p : members_[static_cast<size_t>(p)])];
  }
  // index p: the connection to the run's rank p (none to self); shared by the groups
  std::shared_ptr<std::vector<net::Socket>> mesh_ = std::make_shared<std::vector<net::Socket>>();
  uint64_t seq_ = 0;                // phases exchanged so far: the same count on every rank
  uint64_t works_ = 0;
  std::vector<char> staging_;
  std::vector<float> acc_;
  std::shared_ptr<HostStager> stager_;     // GPU tensors through the host (comm.h); null on the CPU
  std::vector<char> host_out_, host_in_;  // their host copies
};

void CpuComm::connect_mesh() {
  const int n = world(), me = rank();
  const std::string what = cat("CPU comm setup on rank ", me, " of ", n);
  int port = 0;
  net::Socket listener = net::listen_tcp(bootstrap_->local_address(), 0, n, &port, what);
  std::vector<std::string> addrs = bootstrap_->all_gather(cat(bootstrap_->local_address(), ":", port), what);
  const auto deadline = net::Deadline::after(timeout_s());
  std::vector<net::Socket>& peers = *mesh_;
  peers.resize(static_cast<size_t>(n));
  // Each rank connects to the ranks below it and accepts the ranks above it.
  for (int p = 0; p < me; ++p) {
    const std::string& a = addrs[static_cast<size_t>(p)];
    const size_t colon = a.rfind(':');
    net::Socket s = net::connect_tcp(a.substr(0, colon), std::stoi(a.substr(colon + 1)), deadline, what);
    int32_t hello = me;
    ANVIL_ENSURE(net::send_all(s, &hello, sizeof hello, deadline) == net::IoStatus::kOk, kComm, what,
                 ": rank ", p, " did not take our hello");
    peers[static_cast<size_t>(p)] = std::move(s);
  }
  for (int k = me + 1; k < n; ++k) {
    net::Socket s = net::accept_tcp(listener, deadline);
    ANVIL_ENSURE(s.valid(), kTimeout, what, ": the ranks above ", me, " did not all connect within ", timeout_s(), " s");
    int32_t hello = -1;
    ANVIL_ENSURE(net::recv_all(s, &hello, sizeof hello, deadline) == net::IoStatus::kOk, kComm, what,
                 ": a peer connected but did not say its rank");
    ANVIL_ENSURE(hello > me && hello < n && !peers[static_cast<size_t>(hello)].valid(), kComm, what,
                 ": unexpected hello from rank ", hello);
    peers[static_cast<size_t>(hello)] = std::move(s);
  }
  for (auto& s : peers)
    if (s.valid()) s.set_nonblocking();
}

void CpuComm::peer_failed(Op coll, std::string_view tag, int peer, bool closed) const {
  if (closed)
    raise(ErrorKind::kComm, where(op_name(coll), tag), ": rank ", peer,
          " closed its connection (did it exit or crash?)");
  raise(ErrorKind::kComm, where(op_name(coll), tag), ": socket error talking to rank ", peer, ": ",
        std::strerror(errno));
}

// Fills the headers of the transfers that send: the phase number, the collective and the payload size.
void stamp_headers(std::vector<Transfer>& ts, Op coll, uint64_t seq) {
  for (Transfer& t : ts)
    if (t.send) {
      t.header.seq = seq;
      t.header.op = static_cast<uint32_t>(coll);
      t.header.bytes = t.bytes;
    }
}

// The peers' sockets one poll waits on (each once), and per socket the transfer that
// sends or receives on it.
void CpuComm::poll_set_for(const std::vector<Transfer>& ts, PollSet& ps) const {
  ps.fds.clear();
  ps.send_of.clear();
  ps.recv_of.clear();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].finished()) continue;
    size_t k = 0;
    while (k < ps.fds.size() && ps.fds[k].fd != peer(ts[i].peer).fd()) ++k;
    if (k == ps.fds.size()) {
      ps.fds.push_back(pollfd{peer(ts[i].peer).fd(), 0, 0});
      ps.send_of.push_back(-1);
      ps.recv_of.push_back(-1);
    }
    ps.fds[k].events |= ts[i].send ? POLLOUT : POLLIN;
    (ts[i].send ? ps.send_of : ps.recv_of)[k] = static_cast<int>(i);
  }
}

// The phase's deadline passed: says which peers it still waits on.
void CpuComm::exchange_timed_out(const std::vector<Transfer>& ts, Op coll, std::string_view tag) const {
  std::string silent, stuck;
  for (const Transfer& t : ts) {
    if (t.finished()) continue;
    std::string& list = t.send ? stuck : silent;
    list += cat(list.empty() ? "" : ", ", t.peer);
  }
  raise(ErrorKind::kTimeout, where(op_name(coll), tag), ": did not finish within ", timeout_s(),
        " s (ANVIL_COMM_TIMEOUT_S)", silent.empty() ? "" : cat("; waiting for data from rank(s) ", silent),
        stuck.empty() ? "" : cat("; rank(s) ", stuck, " not reading"),
        ". A rank is stuck, slow or calling a different collective");
}

// A received header must name this phase, its collective and its size: else the ranks
// called different collectives.
void CpuComm::check_header(const Transfer& t, Op coll, std::string_view tag, uint64_t seq) const {
  const Header& h = t.header;
  const bool ok =
      h.magic == Header{}.magic && h.seq == seq && h.op == static_cast<uint32_t>(coll) && h.bytes == t.bytes;
  if (!ok)
    raise(ErrorKind::kComm, where(op_name(coll), tag), ": collective mismatch: this rank expects ", op_name(coll), " #",
          seq, " with ", t.bytes, " bytes from rank ", t.peer, ", which sent ",
          h.magic == Header{}.magic ? op_name(static_cast<Op>(h.op)) : "garbage", " #", h.seq, " with ", h.bytes,
          " bytes; every rank must call the same collectives in the same order and sizes");
}

// Receives what the socket has of the transfer's header and payload, without blocking.
void CpuComm::receive_ready(Transfer& t, int fd, Op coll, std::string_view tag, uint64_t seq) const {
  while (!t.finished()) {
    const bool in_header = t.done < sizeof(Header);
    char* p = in_header ? reinterpret_cast<char*>(&t.header) + t.done : t.data + (t.done - sizeof(Header));
    size_t want = in_header ? sizeof(Header) - t.done : t.bytes - (t.done - sizeof(Header));
    ssize_t got = ::recv(fd, p, want, MSG_DONTWAIT);
    if (got == 0) peer_failed(coll, tag, t.peer, true);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      peer_failed(coll, tag, t.peer, errno == ECONNRESET);
    }
    t.done += static_cast<size_t>(got);
    if (in_header && t.done == sizeof(Header)) check_header(t, coll, tag, seq);
  }
}

// Sends what the socket takes of the transfer's header and payload, without blocking.
void CpuComm::send_ready(Transfer& t, int fd, Op coll, std::string_view tag) const {
  while (!t.finished()) {
    const bool in_header = t.done < sizeof(Header);
    const char* p = in_header ? reinterpret_cast<const char*>(&t.header) + t.done : t.data + (t.done - sizeof(Header));
    size_t want = in_header ? sizeof(Header) - t.done : t.bytes - (t.done - sizeof(Header));
    ssize_t put = ::send(fd, p, want, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (put < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      peer_failed(coll, tag, t.peer, errno == EPIPE || errno == ECONNRESET);
    }
    t.done += static_cast<size_t>(put);
  }
}

void CpuComm::exchange(std::vector<Transfer>& ts, Op coll, std::string_view tag) {
  const uint64_t seq = ++seq_;
  stamp_headers(ts, coll, seq);
  const auto deadline = net::Deadline::after(timeout_s());
  PollSet ps;
  for (;;) {
    poll_set_for(ts, ps);
    if (ps.fds.empty()) return;
    int r = ::poll(ps.fds.data(), ps.fds.size(), deadline.remaining_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && deadline.expired()) exchange_timed_out(ts, coll, tag);
    for (size_t k = 0; k < ps.fds.size(); ++k) {
      const short ev = ps.fds[k].revents;
      if (ev == 0) continue;
      if (ps.recv_of[k] >= 0 && (ev & (POLLIN | POLLHUP | POLLERR)))
        receive_ready(ts[static_cast<size_t>(ps.recv_of[k])], ps.fds[k].fd, coll, tag, seq);
      if (ps.send_of[k] >= 0 && (ev & (POLLOUT | POLLHUP | POLLERR)))
        send_ready(ts[static_cast<size_t>(ps.send_of[k])], ps.fds[k].fd, coll, tag);
    }
  }
}

}  // namespace

std::unique_ptr<Comm> make_cpu_comm(const CommOptions& options, std::unique_ptr<HostStager> stager) {
  return std::make_unique<CpuComm>(options, std::move(stager));
}

}  // namespace anvil
