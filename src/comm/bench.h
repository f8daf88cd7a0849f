// anvil bench: collective bandwidth as nccl-tests measures it, over any Comm.
//
// For each size of the sweep (min_bytes, times factor, up to max_bytes) every rank runs
// `warmup` untimed and `iters` timed collectives, then checks the output of the last one
// against a closed form of rank-based inputs (small integers: every partial sum is exact in
// bf16 and fp32 alike, whatever order the backend adds in). Reported per size, as
// nccl-tests does: time per collective (the slowest rank's), algorithm bandwidth
// algbw = size / time, and bus bandwidth busbw = algbw x factor, the factor
// (2(n-1)/n all-reduce, (n-1)/n all-gather and reduce-scatter, 1 broadcast) making busbw
// comparable with the links' speed whatever the rank count. "size" is the whole buffer:
// the all-reduced one, the gathered output, the reduce-scatter input.
// The closing line gives the 1 GiB bf16 all-reduce bus bandwidth, the headline figure of a
// multi-GPU machine: from the sweep when it measured it, else measured apart on GPUs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/json.h"

namespace anvil {

enum class BenchCollective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };
const char* bench_collective_name(BenchCollective c);
bool bench_collective_from_name(const std::string& name, BenchCollective* out);
double bench_bus_factor(BenchCollective c, int world);

struct BenchOptions {
  BenchCollective collective = BenchCollective::kAllReduce;
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{4} << 30;
  double factor = 2.0;
  DType dtype = DType::kBF16;
  int iters = 20;
  int warmup = 5;
  int root = 0;           // broadcast
  bool headline = true;   // measure the 1 GiB bf16 all-reduce apart when the sweep did not (GPU only)
};

struct BenchRow {
  int64_t bytes = 0;
  int64_t count = 0;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = 0;  // over all ranks
};

struct BenchReport {
  BenchOptions options;
  int world = 1;
  std::string backend;
  std::vector<BenchRow> rows;
  double avg_busbw_gbps = 0;
  bool has_headline = false;
  double headline_busbw_gbps = 0;
  std::string headline_note;  // why there is none
  int64_t wrong() const;
};

// The sizes (bytes) of the sweep: counts rounded down to whole elements, and to a multiple
// of the world for all-gather and reduce-scatter; empty and repeated sizes dropped.
std::vector<int64_t> bench_sizes(const BenchOptions& options, int world);
// The closed form: rank r's input at index i, and the expected output element i of rank
// `rank` for a buffer of `count` elements (the whole buffer, as "size" above).
float bench_input(int rank, int64_t i);
float bench_expected(BenchCollective c, int world, int rank, int root, int64_t count, int64_t i);

// Collective: every rank calls it with the same options; every rank gets the report.
BenchReport run_bench(Comm& comm, const BenchOptions& options);
std::string bench_table(const BenchReport& report);
Json bench_json(const BenchReport& report);

// One GPU: device-to-device copy bandwidth over the same sweep (what a single GPU can
// measure when there is nobody to talk to).
struct CopyRow {
  int64_t bytes = 0;
  double time_us = 0;
  double gbps = 0;  // bytes copied per second; memory traffic is twice that (read + write)
};
std::vector<CopyRow> bench_device_copy(int device, const BenchOptions& options);
std::string copy_table(const std::vector<CopyRow>& rows, int device);

// Every ordered pair of GPUs: copy bandwidth with and without peer access.
struct P2pReport {
  int gpus = 0;
  int64_t bytes = 0;
  std::vector<double> gbps_peer;     // [src * gpus + dst]; the diagonal is the device copy
  std::vector<double> gbps_staged;   // peer access disabled
  std::vector<bool> can_access;
};
P2pReport bench_p2p(int64_t bytes, int iters, int warmup);
std::string p2p_table(const P2pReport& report);
Json p2p_json(const P2pReport& report);

}  // namespace anvil
