// anvil bench (see bench.h). Buffers are allocated once at the largest size of the sweep
// and every size uses their prefix; the host holds the input pattern and a read-back copy.
#include "comm/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "comm/device.h"
#include "core/bf16.h"
#include "core/duration.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace anvil {

namespace {

using Clock = std::chrono::steady_clock;

// Host or GPU memory for one bench buffer, whichever the comm works on.
class BenchBuffer {
 public:
  BenchBuffer(const Comm& comm, size_t bytes) : device_(comm.device()) {
    if (device_ == Device::kCPU) host_.resize(bytes);
    else gpu_ = DeviceBuffer(comm.gpu(), bytes);
  }
  void* data() { return device_ == Device::kCPU ? static_cast<void*>(host_.data()) : gpu_.data(); }
  Tensor view(DType dtype, int64_t count, int64_t offset = 0) {
    return Tensor(static_cast<char*>(data()) + offset * static_cast<int64_t>(dtype_size(dtype)), dtype, {count},
                  device_);
  }
  void upload(const void* src, size_t bytes) {
    if (device_ == Device::kCPU) std::memcpy(host_.data(), src, bytes);
    else gpu_.upload(src, bytes);
  }
  void download(void* dst, size_t bytes) {
    if (device_ == Device::kCPU) std::memcpy(dst, host_.data(), bytes);
    else gpu_.download(dst, bytes);
  }

 private:
  Device device_;
  std::vector<char> host_;
  DeviceBuffer gpu_;
};

// Host values of `dtype` at index i, as float.
float element(const std::vector<char>& host, DType dtype, int64_t i) {
  if (dtype == DType::kF32) return reinterpret_cast<const float*>(host.data())[i];
  return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(host.data())[i]);
}

void fill_pattern(std::vector<char>& host, DType dtype, int rank, int64_t count) {
  host.resize(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    const float v = bench_input(rank, i);
    if (dtype == DType::kF32) reinterpret_cast<float*>(host.data())[i] = v;
    else reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_bf16_bits(v);
  }
}

// Element counts of the input and output buffers for a collective over `count` elements.
struct Counts {
  int64_t in, out;
};
Counts counts_of(BenchCollective c, int world, int64_t count) {
  switch (c) {
    case BenchCollective::kAllGather: return {count / world, count};
    case BenchCollective::kReduceScatter: return {count, count / world};
    default: return {count, count};
  }
}

void issue(Comm& comm, BenchCollective c, BenchBuffer& in, BenchBuffer& out, DType dtype, Counts n, int root) {
  switch (c) {
    case BenchCollective::kAllReduce:
      comm.all_reduce(out.view(dtype, n.out), in.view(dtype, n.in), ReduceOp::kSum, "bench");
      break;
    case BenchCollective::kAllGather: comm.all_gather(out.view(dtype, n.out), in.view(dtype, n.in), "bench"); break;
    case BenchCollective::kReduceScatter:
      comm.reduce_scatter(out.view(dtype, n.out), in.view(dtype, n.in), ReduceOp::kSum, "bench");
      break;
    case BenchCollective::kBroadcast: comm.broadcast(out.view(dtype, n.out), root, "bench"); break;
  }
}

// Seconds per collective, the slowest rank's.
double time_collective(Comm& comm, BenchCollective c, BenchBuffer& in, BenchBuffer& out, DType dtype, Counts n,
                       int root, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) issue(comm, c, in, out, dtype, n, root);
  comm.synchronize();
  comm.barrier("bench");
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) issue(comm, c, in, out, dtype, n, root);
  comm.synchronize();
  return comm.host_max(seconds_since(t0) / iters, "bench timing");
}

}  // namespace

namespace {
constexpr EnumName<BenchCollective> kCollectiveNames[] = {{BenchCollective::kAllReduce, "all_reduce"},
                                                          {BenchCollective::kAllGather, "all_gather"},
                                                          {BenchCollective::kReduceScatter, "reduce_scatter"},
                                                          {BenchCollective::kBroadcast, "broadcast"}};
}  // namespace

const char* bench_collective_name(BenchCollective c) { return enum_name(kCollectiveNames, c); }

bool bench_collective_from_name(const std::string& name, BenchCollective* out) {
  return enum_from_name(kCollectiveNames, name, out);
}

double bench_bus_factor(BenchCollective c, int world) {
  const double n = world;
  switch (c) {
    case BenchCollective::kAllReduce: return 2.0 * (n - 1) / n;
    case BenchCollective::kAllGather:
    case BenchCollective::kReduceScatter: return (n - 1) / n;
    case BenchCollective::kBroadcast: return 1.0;
  }
  return 1.0;
}

int64_t BenchReport::wrong() const {
  int64_t w = 0;
  for (const BenchRow& r : rows) w += r.wrong;
  return w;
}

std::vector<int64_t> bench_sizes(const BenchOptions& o, int world) {
  ANVIL_ENSURE(o.min_bytes > 0 && o.max_bytes >= o.min_bytes, kUsage, "bench: sizes need 0 < -b (", o.min_bytes,
               ") <= -e (", o.max_bytes, ")");
  ANVIL_ENSURE(o.factor > 1.0, kUsage, "bench: -f must be above 1, got ", o.factor);
  const int64_t es = static_cast<int64_t>(dtype_size(o.dtype));
  const bool split = o.collective == BenchCollective::kAllGather || o.collective == BenchCollective::kReduceScatter;
  std::vector<int64_t> sizes;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * (1 + 1e-12); s *= o.factor) {
    int64_t count = static_cast<int64_t>(s) / es;
    if (split) count = count / world * world;
    const int64_t bytes = count * es;
    if (count > 0 && (sizes.empty() || sizes.back() != bytes)) sizes.push_back(bytes);
  }
  return sizes;
}

float bench_input(int rank, int64_t i) { return static_cast<float>(i % 5 + rank % 3); }

float bench_expected(BenchCollective c, int world, int rank, int root, int64_t count, int64_t i) {
  float s3 = 0;  // sum over ranks of rank % 3
  for (int r = 0; r < world; ++r) s3 += static_cast<float>(r % 3);
  const float n = static_cast<float>(world);
  switch (c) {
    case BenchCollective::kAllReduce: return n * static_cast<float>(i % 5) + s3;
    case BenchCollective::kAllGather: {
      const int64_t m = count / world;
      return bench_input(static_cast<int>(i / m), i % m);
    }
    case BenchCollective::kReduceScatter: return n * static_cast<float>((rank * (count / world) + i) % 5) + s3;
    case BenchCollective::kBroadcast: return bench_input(root, i);
  }
  return 0;
}

namespace {

// The elements of readback (the first out_count) that differ from what o.collective should leave
// on rank me of n, for `count` elements per rank.
int64_t wrong_elements(const std::vector<char>& readback, const BenchOptions& o, int n, int me, int64_t count,
                       int64_t out_count) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < out_count; ++i) {
    float want = bench_expected(o.collective, n, me, o.root, count, i);
    if (o.dtype == DType::kBF16) want = round_bf16(want);
    wrong += element(readback, o.dtype, i) != want;
  }
  return wrong;
}

// The headline figure: the sweep's 1 GiB bf16 all_reduce, else (o.headline, on GPUs) one timed
// now, else a note saying how to measure it.
void set_headline(Comm& comm, const BenchOptions& o, BenchReport& report) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  for (const BenchRow& r : report.rows)
    if (o.collective == BenchCollective::kAllReduce && o.dtype == DType::kBF16 && r.bytes == kGiB) {
      report.has_headline = true;
      report.headline_busbw_gbps = r.busbw_gbps;
    }
  if (!report.has_headline && o.headline && comm.device() == Device::kCUDA) {
    const int64_t count = kGiB / 2;
    BenchBuffer hin(comm, static_cast<size_t>(kGiB)), hout(comm, static_cast<size_t>(kGiB));
    const double t = time_collective(comm, BenchCollective::kAllReduce, hin, hout, DType::kBF16, {count, count}, 0,
                                     o.iters, o.warmup);
    report.has_headline = true;
    const double factor = bench_bus_factor(BenchCollective::kAllReduce, comm.world());
    report.headline_busbw_gbps = static_cast<double>(kGiB) / t / 1e9 * factor;
  }
  if (!report.has_headline)
    report.headline_note = "not measured (the sweep did not include a 1 GiB bf16 all_reduce: run anvil bench "
                           "all_reduce --dtype bf16 -b 1G -e 1G)";
}

}  // namespace

BenchReport run_bench(Comm& comm, const BenchOptions& o) {
  ANVIL_ENSURE(o.dtype == DType::kF32 || o.dtype == DType::kBF16, kUsage, "bench: --dtype is bf16 or fp32");
  ANVIL_ENSURE(o.iters >= 1 && o.warmup >= 0, kUsage, "bench: --iters must be at least 1 and --warmup at least 0");
  ANVIL_ENSURE(o.root >= 0 && o.root < comm.world(), kUsage, "bench: --root ", o.root, " is not a rank of ",
               comm.world());
  const int n = comm.world(), me = comm.rank();
  BenchReport report;
  report.options = o;
  report.world = n;
  report.backend = comm.backend();
  const std::vector<int64_t> sizes = bench_sizes(o, n);
  ANVIL_ENSURE(!sizes.empty(), kUsage, "bench: no size between -b ", o.min_bytes, " and -e ", o.max_bytes,
               " holds a whole ", dtype_name(o.dtype), " element per rank");
  const size_t es = dtype_size(o.dtype);
  const int64_t max_count = sizes.back() / static_cast<int64_t>(es);
  const Counts max_n = counts_of(o.collective, n, max_count);
  const bool in_place = o.collective == BenchCollective::kBroadcast;
  std::vector<char> pattern, readback(static_cast<size_t>(max_n.out) * es);
  fill_pattern(pattern, o.dtype, in_place && me != o.root ? -1 : me, max_n.in);
  BenchBuffer in(comm, in_place ? 0 : static_cast<size_t>(max_n.in) * es);
  BenchBuffer out(comm, static_cast<size_t>(max_n.out) * es);
  const double factor = bench_bus_factor(o.collective, n);
  double busbw_sum = 0;
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / static_cast<int64_t>(es);
    const Counts cn = counts_of(o.collective, n, count);
    // Inputs (and, for broadcast, the non-roots' stale buffer: rank -1's pattern differs
    // from every rank's) go up before each size.
    (in_place ? out : in).upload(pattern.data(), static_cast<size_t>(cn.in) * es);
    const double t = time_collective(comm, o.collective, in, out, o.dtype, cn, o.root, o.iters, o.warmup);
    out.download(readback.data(), static_cast<size_t>(cn.out) * es);
    const int64_t wrong = wrong_elements(readback, o, n, me, count, cn.out);
    BenchRow row;
    row.bytes = bytes;
    row.count = count;
    row.time_us = t * 1e6;
    row.algbw_gbps = static_cast<double>(bytes) / t / 1e9;
    row.busbw_gbps = row.algbw_gbps * factor;
    row.wrong = comm.host_sum(wrong, "bench check");
    busbw_sum += row.busbw_gbps;
    report.rows.push_back(row);
  }
  report.avg_busbw_gbps = busbw_sum / static_cast<double>(report.rows.size());

  set_headline(comm, o, report);
  return report;
}

namespace {
std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}
std::string pad(const std::string& s, size_t width) { return s.size() >= width ? s : std::string(width - s.size(), ' ') + s; }
const char* type_name(DType d) { return d == DType::kBF16 ? "bf16" : "fp32"; }
}  // namespace

std::string bench_table(const BenchReport& r) {
  const BenchOptions& o = r.options;
  const double factor = bench_bus_factor(o.collective, r.world);
  const char* formula = o.collective == BenchCollective::kAllReduce ? "2(n-1)/n"
                        : o.collective == BenchCollective::kBroadcast ? "1"
                                                                       : "(n-1)/n";
  std::ostringstream s;
  s << "# anvil bench " << bench_collective_name(o.collective) << ": " << r.world << " rank(s) on the " << r.backend
    << " comm, " << type_name(o.dtype) << (o.collective == BenchCollective::kBroadcast ? cat(", root ", o.root) : "")
    << ", " << o.iters << " timed iterations after " << o.warmup << " warm-up\n";
  s << "# busbw = algbw x " << formula << " = " << fixed(factor, 4) << "; time is the slowest rank's; size is the "
    << (o.collective == BenchCollective::kAllGather       ? "gathered output"
        : o.collective == BenchCollective::kReduceScatter ? "reduce-scatter input"
                                                          : "whole buffer")
    << "\n#\n";
  s << "#" << pad("size(B)", 14) << pad("count", 13) << pad("type", 6) << pad("redop", 7) << pad("time(us)", 12)
    << pad("algbw(GB/s)", 13) << pad("busbw(GB/s)", 13) << pad("#wrong", 8) << "\n";
  for (const BenchRow& row : r.rows)
    s << " " << pad(std::to_string(row.bytes), 14) << pad(std::to_string(row.count), 13) << pad(type_name(o.dtype), 6)
      << pad(o.collective == BenchCollective::kAllReduce || o.collective == BenchCollective::kReduceScatter ? "sum" : "none", 7)
      << pad(fixed(row.time_us, 2), 12) << pad(fixed(row.algbw_gbps, 2), 13) << pad(fixed(row.busbw_gbps, 2), 13)
      << pad(std::to_string(row.wrong), 8) << "\n";
  s << "# out of bounds values : " << r.wrong() << (r.wrong() ? " WRONG" : " OK") << "\n";
  s << "# average bus bandwidth: " << fixed(r.avg_busbw_gbps, 3) << " GB/s\n";
  s << "# 1 GiB bf16 all_reduce bus bandwidth: "
    << (r.has_headline ? fixed(r.headline_busbw_gbps, 2) + " GB/s" : r.headline_note) << "\n";
  return s.str();
}

Json bench_json(const BenchReport& r) {
  Json rows = Json::array();
  for (const BenchRow& row : r.rows)
    rows.push_back({{"bytes", row.bytes},
                    {"count", row.count},
                    {"time_us", row.time_us},
                    {"algbw_gbps", row.algbw_gbps},
                    {"busbw_gbps", row.busbw_gbps},
                    {"wrong", row.wrong}});
  Json j = {{"collective", bench_collective_name(r.options.collective)},
            {"world", r.world},
            {"backend", r.backend},
            {"dtype", type_name(r.options.dtype)},
            {"iters", r.options.iters},
            {"warmup", r.options.warmup},
            {"bus_factor", bench_bus_factor(r.options.collective, r.world)},
            {"rows", rows},
            {"wrong", r.wrong()},
            {"avg_busbw_gbps", r.avg_busbw_gbps}};
  j["allreduce_1gib_bf16_busbw_gbps"] = r.has_headline ? Json(r.headline_busbw_gbps) : Json(nullptr);
  return j;
}

std::vector<CopyRow> bench_device_copy(int device, const BenchOptions& o) {
  BenchOptions bytes_only = o;
  bytes_only.collective = BenchCollective::kAllReduce;
  std::vector<CopyRow> rows;
  for (int64_t bytes : bench_sizes(bytes_only, 1)) {
    const double t = device_copy_seconds(device, static_cast<size_t>(bytes), o.iters, o.warmup);
    rows.push_back(CopyRow{bytes, t * 1e6, static_cast<double>(bytes) / t / 1e9});
  }
  return rows;
}

std::string copy_table(const std::vector<CopyRow>& rows, int device) {
  std::ostringstream s;
  s << "# device-to-device copy on GPU " << device << " (cudaMemcpyAsync); GB/s counts bytes copied, the memory "
       "moves twice that (read + write)\n#\n";
  s << "#" << pad("size(B)", 14) << pad("time(us)", 12) << pad("copy(GB/s)", 12) << "\n";
  for (const CopyRow& r : rows)
    s << " " << pad(std::to_string(r.bytes), 14) << pad(fixed(r.time_us, 2), 12) << pad(fixed(r.gbps, 2), 12) << "\n";
  return s.str();
}

P2pReport bench_p2p(int64_t bytes, int iters, int warmup) {
  P2pReport r;
  r.gpus = gpu_count();
  ANVIL_ENSURE(r.gpus > 0, kNoDevice, "bench p2p: no GPU is visible (no driver, no GPU, or CUDA_VISIBLE_DEVICES empty)");
  r.bytes = bytes;
  const size_t cells = static_cast<size_t>(r.gpus * r.gpus);
  r.gbps_peer.assign(cells, 0);
  r.gbps_staged.assign(cells, 0);
  r.can_access.assign(cells, false);
  for (int s = 0; s < r.gpus; ++s)
    for (int d = 0; d < r.gpus; ++d) {
      const size_t k = static_cast<size_t>(s * r.gpus + d);
      r.can_access[k] = s == d || p2p_can_access(s, d);
      for (bool peer : {true, false}) {
        const double t = s == d ? device_copy_seconds(s, static_cast<size_t>(bytes), iters, warmup)
                                : p2p_copy_seconds(s, d, static_cast<size_t>(bytes), iters, warmup, peer && r.can_access[k]);
        (peer ? r.gbps_peer : r.gbps_staged)[k] = static_cast<double>(bytes) / t / 1e9;
      }
    }
  return r;
}

std::string p2p_table(const P2pReport& r) {
  std::ostringstream s;
  s << "# copy bandwidth between GPUs (GB/s, " << r.bytes << " bytes per copy; rows: source, columns: destination)\n";
  for (int pass = 0; pass < 2; ++pass) {
    s << (pass == 0 ? "\n# peer access enabled (direct over NVLink or PCIe; '*': no peer access possible, staged)\n"
                    : "\n# peer access disabled (staged through host memory by the driver)\n");
    s << pad("src\\dst", 8);
    for (int d = 0; d < r.gpus; ++d) s << pad(cat("GPU", d), 10);
    s << "\n";
    for (int src = 0; src < r.gpus; ++src) {
      s << pad(cat("GPU", src), 8);
      for (int d = 0; d < r.gpus; ++d) {
        const size_t k = static_cast<size_t>(src * r.gpus + d);
        const double v = (pass == 0 ? r.gbps_peer : r.gbps_staged)[k];
        s << pad(fixed(v, 1) + (pass == 0 && !r.can_access[k] ? "*" : ""), 10);
      }
      s << "\n";
    }
  }
  return s.str();
}

Json p2p_json(const P2pReport& r) {
  return {{"gpus", r.gpus}, {"bytes", r.bytes}, {"gbps_peer", r.gbps_peer}, {"gbps_staged", r.gbps_staged},
          {"can_access", r.can_access}};
}

}  // namespace anvil
