// The snapshot of asynchronous saves (see train/checkpoint_async.h).
#include "train/checkpoint_async.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "comm/first_error.h"
#include "core/bf16.h"
#include "core/duration.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/units.h"
#include "plan/memory_plan.h"
#include "sys/host_memory.h"

namespace anvil {
namespace {

// Why `local_ranks` snapshots of `bytes` each do not fit in the host's memory (empty: they fit).
std::string snapshot_refusal(size_t bytes, int local_ranks) {
  const HostMemory m = host_memory();
  const double need = static_cast<double>(bytes) * local_ranks;
  if (need <= static_cast<double>(m.available)) return "";
  char line[512];
  std::snprintf(line, sizeof line,
                "asynchronous saves hold a snapshot of each rank's state in host memory: %s GiB per rank, %s "
                "GiB for the %d rank%s of this machine, but %s GiB of its %s GiB are available (%s); save "
                "synchronously with --sync-save (training then waits while each checkpoint is written), or spread "
                "the state over more machines",
                gib(static_cast<double>(bytes)).c_str(), gib(need).c_str(), local_ranks, local_ranks == 1 ? "" : "s",
                gib(static_cast<double>(m.available)).c_str(), gib(static_cast<double>(m.total)).c_str(),
                m.source.c_str());
  return line;
}

}  // namespace

void check_snapshot_memory(const CheckpointSection& c, const ParamTable& table, Comm* comm) {
  if (c.save_every <= 0 || c.sync_save) return;
  const int local_ranks = static_cast<int>(env_int("LOCAL_WORLD_SIZE", 1));
  const std::string refusal =
      first_error(comm, snapshot_refusal(static_cast<size_t>(host_snapshot_bytes(table)), local_ranks), "snapshot memory");
  ANVIL_ENSURE(refusal.empty(), kOutOfMemory, refusal);
}

SaveSnapshot::SaveSnapshot(Trainer& trainer, Comm* comm, const std::vector<ShardTensor>& tensors)
    : trainer_(trainer), rank_(comm ? comm->rank() : 0), world_(comm ? comm->world() : 1) {
  for (const ShardTensor& t : tensors) {
    parts_.push_back({t.numel, bytes_, false});
    bytes_ += static_cast<size_t>(t.numel) * 4;
  }
  ANVIL_ENSURE(static_cast<int64_t>(bytes_) == trainer.plan().host_snapshot, kInternal, "the snapshot of ", bytes_,
               " bytes differs from the plan's ", trainer.plan().host_snapshot);
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;  // one rank's failure is every rank's (the others would wait for it)
  try {
    data_ = static_cast<char*>(trainer.ops().runtime().alloc_host(bytes_));
  } catch (const Error& e) {
    error = cat(e.what(), "; save synchronously with --sync-save (no snapshot)");
  }
  error = first_error(comm, error, "snapshot allocation");
  if (!error.empty()) {
    trainer.ops().runtime().release_host(data_);
    raise(ErrorKind::kOutOfMemory, error);
  }
  if (rank_ == 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "asynchronous saves: a snapshot of %.3f GB per rank in host memory (allocated in %.2f s)",
                  static_cast<double>(bytes_) / 1e9, seconds_since(t0));
    log_info(line);
  }
}

SaveSnapshot::~SaveSnapshot() { trainer_.ops().runtime().release_host(data_); }

double SaveSnapshot::stage(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  const ParamTable& table = trainer_.table();
  ParamStore& store = trainer_.store();
  const size_t n_units = table.units().size();
  const ParamStore::State state[3] = {ParamStore::State::kMaster, ParamStore::State::kExpAvg,
                                      ParamStore::State::kExpAvgSq};
  const bool die = fault_armed(Fault::kDieInStaging, step, rank_, world_);
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (die && i == parts_.size() / 2) die_at_fault(Fault::kDieInStaging, cat("halfway through the snapshot of step ", step));
    const int u = static_cast<int>(i % n_units);
    const int64_t shard = parts_[i].numel, at = table.slice_rank(u, rank_) * shard - store.owned_offset(u);
    const std::vector<Tensor> held = store.owned_tensors(state[i / n_units], u);
    char* dst = data_ + parts_[i].offset;
    for (const Tensor& t : held) {
      const Tensor slice = t.slice_rows(at, at + shard);
      trainer_.ops().runtime().download(dst, slice);
      dst += slice.bytes();
    }
    parts_[i].split = held.size() == 2;
  }
  return seconds_since(t0);
}

void SaveSnapshot::fill(size_t part, int64_t begin, int64_t n, float* out) const {
  const Part& p = parts_[part];
  const char* src = data_ + p.offset;
  if (!p.split) {
    std::memcpy(out, reinterpret_cast<const float*>(src) + begin, static_cast<size_t>(n) * 4);
    return;
  }
  const uint16_t* hi = reinterpret_cast<const uint16_t*>(src) + begin;
  const int16_t* lo = reinterpret_cast<const int16_t*>(src + 2 * p.numel) + begin;
  for (int64_t j = 0; j < n; ++j) out[j] = join_master(hi[j], lo[j]);
}

}  // namespace anvil
