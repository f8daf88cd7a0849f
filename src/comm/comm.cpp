// The parts of Comm shared by every implementation: options from the environment, the
// argument checks, error context, and the host exchanges over the rendezvous.
#include "comm/comm.h"

#include <algorithm>
#include <cstring>

#include "core/env.h"
#include "core/error.h"

namespace anvil {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

std::string slurm_first_host(const std::string& nodelist) {
  const size_t end = nodelist.find_first_of(",[");
  if (end == std::string::npos || nodelist[end] == ',') return nodelist.substr(0, end);
  // prefix[a-b,c,...]suffix: the prefix, the first number as written (zero padding kept),
  // and the suffix up to the next host.
  const size_t close = nodelist.find(']', end);
  ANVIL_ENSURE(close != std::string::npos, kInvalidInput, "SLURM_JOB_NODELIST='", nodelist, "': no closing ]");
  const size_t first_end = nodelist.find_first_of("-,]", end + 1);
  const size_t next = nodelist.find(',', close);
  return nodelist.substr(0, end) + nodelist.substr(end + 1, first_end - end - 1) +
         nodelist.substr(close + 1, next == std::string::npos ? std::string::npos : next - close - 1);
}

CommOptions comm_options_from_env() {
  CommOptions o;
  o.timeout_s = static_cast<double>(env_comm_timeout_s());
  ANVIL_ENSURE(o.timeout_s > 0, kInvalidInput, "ANVIL_COMM_TIMEOUT_S must be positive, got ", o.timeout_s);
  const bool slurm = env_rank() < 0 && env_int("SLURM_PROCID", -1) >= 0;
  if (env_rank() < 0 && !slurm) return o;
  o.joined = true;
  const char* rank_var = slurm ? "SLURM_PROCID" : "RANK";
  const char* world_var = slurm ? "SLURM_NTASKS" : "WORLD_SIZE";
  o.rank = static_cast<int>(slurm ? env_int("SLURM_PROCID", -1) : env_rank());
  o.world = static_cast<int>(slurm ? env_int("SLURM_NTASKS", -1) : env_world_size());
  ANVIL_ENSURE(o.world >= 1, kInvalidInput, rank_var, " is set (", o.rank, ") but ", world_var, " is not");
  ANVIL_ENSURE(o.rank < o.world, kInvalidInput, rank_var, "=", o.rank, " is not below ", world_var, "=", o.world);
  const int64_t local = slurm ? env_int("SLURM_LOCALID", -1) : env_local_rank();
  o.local_rank = local >= 0 ? static_cast<int>(local) : o.rank;
  o.master_addr = env_master_addr();
  if (o.master_addr.empty() && slurm) o.master_addr = slurm_first_host(env_str("SLURM_JOB_NODELIST", ""));
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  o.master_port = static_cast<int>(env_master_port());
  const int64_t job = env_int("SLURM_JOB_ID", -1);
  if (o.master_port <= 0 && slurm && job >= 0) o.master_port = static_cast<int>(20000 + job % 20000);
  ANVIL_ENSURE(o.world == 1 || o.master_port > 0, kInvalidInput, rank_var, " and ", world_var, "=", o.world,
               " are set but MASTER_PORT is not");
  return o;
}

std::string Comm::where(std::string_view op, std::string_view tag) const { return where(op, tag, step_); }

std::string Comm::where(std::string_view op, std::string_view tag, int64_t step) const {
  std::string s = cat(op, " on rank ", rank(), " of ", world());
  if (step >= 0 || !tag.empty()) {
    s += " (";
    if (step >= 0) s += cat("step ", step);
    if (!tag.empty()) s += cat(step >= 0 ? ", " : "", "tag '", tag, "'");
    s += ")";
  }
  return s;
}

void Comm::check_device(std::string_view op, Tensor t) const {
  ANVIL_ENSURE(t.device == device(), kInternal, where(op, ""), ": a ",
               t.device == Device::kCPU ? "host" : "GPU", " tensor was given to the ", backend(), " comm");
}

void Comm::check_reduce(std::string_view op, Tensor out, Tensor in, int64_t in_per_out) const {
  check_device(op, out);
  check_device(op, in);
  ANVIL_ENSURE(in.dtype == DType::kF32 || in.dtype == DType::kBF16, kUnsupported, where(op, ""),
               ": reductions take F32 or BF16, not ", dtype_name(in.dtype));
  ANVIL_ENSURE(out.dtype == in.dtype, kInternal, where(op, ""), ": out is ", dtype_name(out.dtype), ", in is ",
               dtype_name(in.dtype));
  ANVIL_ENSURE(in.numel() == out.numel() * in_per_out, kInternal, where(op, ""), ": in has ", in.numel(),
               " elements, out ", out.numel(), " (expected in = ", in_per_out, " x out)");
}

void Comm::check_gather(std::string_view op, Tensor out, Tensor in, int64_t out_per_in) const {
  check_device(op, out);
  check_device(op, in);
  ANVIL_ENSURE(out.dtype == in.dtype, kInternal, where(op, ""), ": out is ", dtype_name(out.dtype), ", in is ",
               dtype_name(in.dtype));
  ANVIL_ENSURE(out.numel() == in.numel() * out_per_in, kInternal, where(op, ""), ": in has ", in.numel(),
               " elements, out ", out.numel(), " (expected out = ", out_per_in, " x in)");
}

void Comm::check_all_to_all(Tensor out, Tensor in) const {
  check_gather("all_to_all", out, in, 1);
  ANVIL_ENSURE(in.numel() % world() == 0, kInternal, where("all_to_all", ""), ": ", in.numel(),
               " elements do not split into ", world(), " chunks");
  const char* o = static_cast<const char*>(out.data);
  const char* i = static_cast<const char*>(in.data);
  ANVIL_ENSURE(o + out.bytes() <= i || i + in.bytes() <= o, kInternal, where("all_to_all", ""),
               ": out and in overlap");
}

Comm::Comm(const Comm& parent, std::vector<int> members) : bootstrap_(parent.bootstrap_), members_(std::move(members)) {
  ANVIL_ENSURE(parent.members_.empty(), kInternal, "a group of a group");
  const auto me = std::find(members_.begin(), members_.end(), parent.rank());
  ANVIL_ENSURE(me != members_.end() && std::is_sorted(members_.begin(), members_.end()) &&
                   std::adjacent_find(members_.begin(), members_.end()) == members_.end() &&
                   members_.front() >= 0 && members_.back() < parent.world(),
               kInternal, "group of ranks ", members_.size(), " not a sorted set of ranks with rank ", parent.rank());
  group_rank_ = static_cast<int>(me - members_.begin());
}

std::unique_ptr<Comm> Comm::group(const std::vector<int>&) {
  raise(ErrorKind::kUnsupported, "the ", backend(), " comm has no groups of ranks yet (sub-communicators): "
        "--expert-parallel below the number of ranks needs them; use --expert-parallel equal to the ranks");
}

void Comm::host_all_gather(const void* mine, size_t bytes, void* all, std::string_view tag) {
  ANVIL_ENSURE(members_.empty(), kInternal, "host_all_gather on a group comm (", tag,
               "): host exchanges are the run's");
  std::vector<std::string> blobs =
      bootstrap_->all_gather(std::string(static_cast<const char*>(mine), bytes), where("host_all_gather", tag));
  for (size_t r = 0; r < blobs.size(); ++r) {
    ANVIL_ENSURE(blobs[r].size() == bytes, kComm, where("host_all_gather", tag), ": rank ", r, " sent ",
                 blobs[r].size(), " bytes, expected ", bytes);
    std::memcpy(static_cast<char*>(all) + r * bytes, blobs[r].data(), bytes);
  }
}

namespace {
template <class T, class F>
T host_fold(Comm& comm, T value, std::string_view tag, F fold) {
  std::vector<T> all(static_cast<size_t>(comm.world()));
  comm.host_all_gather(&value, sizeof value, all.data(), tag);
  T acc = all[0];
  for (size_t r = 1; r < all.size(); ++r) acc = fold(acc, all[r]);
  return acc;
}
}  // namespace

double Comm::host_sum(double value, std::string_view tag) {
  return host_fold(*this, value, tag, [](double a, double b) { return a + b; });
}
int64_t Comm::host_sum(int64_t value, std::string_view tag) {
  return host_fold(*this, value, tag, [](int64_t a, int64_t b) { return a + b; });
}
double Comm::host_max(double value, std::string_view tag) {
  return host_fold(*this, value, tag, [](double a, double b) { return std::max(a, b); });
}

std::unique_ptr<Comm> make_comm(Device device, const CommOptions& options) {
  if (device == Device::kCPU) return make_cpu_comm(options);
  if (env_gpu_comm_host()) return make_cpu_comm(options, make_host_stager(options.local_rank));
  return make_nccl_comm(options);
}

}  // namespace anvil
