// Ranks as threads, for the tests of collectives and of what runs on several ranks: fn(comm)
// on n ranks, each with its own comm from `make` (the CPU comm unless given), meeting on a
// free port; each rank's error as "[kind] what" ("" where none).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/socket.h"
#include "core/error.h"

namespace anvil::testing {

using MakeComm = std::function<std::unique_ptr<Comm>(const CommOptions&)>;

inline std::vector<std::string> run_comm_ranks(
    int n, const std::function<void(Comm&)>& fn, double timeout_s = 20,
    const MakeComm& make = [](const CommOptions& o) { return make_cpu_comm(o); }) {
  const int port = net::free_tcp_port();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        CommOptions o;
        o.rank = r;
        o.local_rank = r;  // the GPU of an NCCL rank
        o.world = n;
        o.master_port = port;
        o.timeout_s = timeout_s;
        const std::unique_ptr<Comm> comm = make(o);
        fn(*comm);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = cat("[", error_kind_name(e.kind()), "] ", e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace anvil::testing
