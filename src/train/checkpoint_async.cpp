// Asynchronous saves: the snapshot, the background writer, completion (see checkpoint_async.h).
#include "train/checkpoint_async.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/bf16.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"
#include "plan/memory_plan.h"
#include "sys/host_memory.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double gib(double bytes) { return bytes / double(1 << 30); }

// Why `local_ranks` snapshots of `bytes` each do not fit in the host's memory (empty: they fit).
std::string snapshot_refusal(size_t bytes, int local_ranks) {
  const HostMemory m = host_memory();
  const double need = static_cast<double>(bytes) * local_ranks;
  if (need <= static_cast<double>(m.available)) return "";
  char line[512];
  std::snprintf(line, sizeof line,
                "asynchronous saves hold a snapshot of each rank's state in host memory: %.2f GiB per rank, %.2f "
                "GiB for the %d rank%s of this machine, but %.2f GiB of its %.2f GiB are available (%s); save "
                "synchronously with --sync-save (training then waits while each checkpoint is written), or spread "
                "the state over more machines",
                gib(static_cast<double>(bytes)), gib(need), local_ranks, local_ranks == 1 ? "" : "s",
                gib(static_cast<double>(m.available)), gib(static_cast<double>(m.total)), m.source.c_str());
  return line;
}

// ANVIL_FAULT hold_save: the writer waits for the release file before its first byte.
void hold_until_released(const std::string& release) {
  log_error("fault hold_save (ANVIL_FAULT): the background write waits for ", release);
  while (!path_exists(release)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

void check_snapshot_memory(const CheckpointSection& c, const ParamTable& table, Comm* comm) {
  if (c.save_every <= 0 || c.sync_save) return;
  const int local_ranks = static_cast<int>(env_int("LOCAL_WORLD_SIZE", 1));
  const std::string refusal =
      first_error(comm, snapshot_refusal(static_cast<size_t>(host_snapshot_bytes(table)), local_ranks), "snapshot memory");
  ANVIL_ENSURE(refusal.empty(), kOutOfMemory, refusal);
}

// A save in flight: where it goes, what meta.json will say, the writer's outcome, then
// (once every rank's shard is written and the records exchanged) rank 0's commit's.
struct AsyncSaver::Pending {
  SavePlace place;
  int64_t keep_last = 0;
  Json meta;
  SaveSettings settings;
  double stall_seconds = 0;
  ShardOutcome outcome;
  std::atomic<bool> done{false};
  std::thread writer;
  bool gathered = false;
  SaveReport report;
  std::string commit_error;
  std::atomic<bool> committed{false};
  std::thread committer;  // rank 0
};

AsyncSaver::AsyncSaver(Trainer& trainer, Comm* comm)
    : trainer_(trainer), comm_(comm), rank_(comm ? comm->rank() : 0), world_(comm ? comm->world() : 1) {
  tensors_ = shard_tensors(trainer.table());
  for (const ShardTensor& t : tensors_) {
    parts_.push_back({t.numel, bytes_, false});
    bytes_ += static_cast<size_t>(t.numel) * 4;
  }
  ANVIL_ENSURE(static_cast<int64_t>(bytes_) == trainer.plan().host_snapshot, kInternal, "the snapshot of ", bytes_,
               " bytes differs from the plan's ", trainer.plan().host_snapshot);
  const auto t0 = Clock::now();
  std::string error;  // one rank's failure is every rank's (the others would wait for it)
  try {
    snapshot_ = static_cast<char*>(trainer.ops().runtime().alloc_host(bytes_));
  } catch (const Error& e) {
    error = cat(e.what(), "; save synchronously with --sync-save (no snapshot)");
  }
  error = first_error(comm, error, "snapshot allocation");
  if (!error.empty()) {
    trainer.ops().runtime().release_host(snapshot_);
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

AsyncSaver::~AsyncSaver() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
  if (pending_ && pending_->committer.joinable()) pending_->committer.join();
  trainer_.ops().runtime().release_host(snapshot_);
}

double AsyncSaver::stage(int64_t step) {
  const auto t0 = Clock::now();
  const ParamTable& table = trainer_.table();
  ParamStore& store = trainer_.store();
  const size_t n_units = table.units().size();
  const ParamStore::State state[3] = {ParamStore::State::kMaster, ParamStore::State::kExpAvg,
                                      ParamStore::State::kExpAvgSq};
  const bool die = fault_armed(Fault::kDieInStaging, step, rank_, world_);
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (die && i == parts_.size() / 2) die_at_fault(Fault::kDieInStaging, cat("halfway through the snapshot of step ", step));
    const int u = static_cast<int>(i % n_units);
    const int64_t shard = parts_[i].numel, at = rank_ * shard - store.owned_offset(u);
    const std::vector<Tensor> held = store.owned_tensors(state[i / n_units], u);
    char* dst = snapshot_ + parts_[i].offset;
    for (const Tensor& t : held) {
      const Tensor slice = t.slice_rows(at, at + shard);
      trainer_.ops().runtime().download(dst, slice);
      dst += slice.bytes();
    }
    parts_[i].split = held.size() == 2;
  }
  return seconds_since(t0);
}

void AsyncSaver::fill(size_t part, int64_t begin, int64_t n, float* out) const {
  const Part& p = parts_[part];
  const char* src = snapshot_ + p.offset;
  if (!p.split) {
    std::memcpy(out, reinterpret_cast<const float*>(src) + begin, static_cast<size_t>(n) * 4);
    return;
  }
  const uint16_t* hi = reinterpret_cast<const uint16_t*>(src) + begin;
  const int16_t* lo = reinterpret_cast<const int16_t*>(src + 2 * p.numel) + begin;
  for (int64_t j = 0; j < n; ++j) out[j] = join_master(hi[j], lo[j]);
}

std::optional<SaveReport> AsyncSaver::start(const CheckpointSection& where, const SaveSettings& settings,
                                            const DataPosition& position, bool may_skip) {
  const auto t0 = Clock::now();
  const int64_t step = trainer_.step_count();
  std::optional<SaveReport> earlier = poll(settings.pinned);
  if (busy() && where.skip_busy && may_skip) {
    if (rank_ == 0)
      log_warn("checkpoint ", checkpoint_name(step), " skipped (--save-skip-busy): the save of step ",
               pending_->place.step, " is still being written");
    return earlier;
  }
  if (busy()) earlier = wait(settings.pinned);
  auto p = std::make_unique<Pending>();
  p->place = begin_save(comm_, where.dir, step);
  p->keep_last = where.keep_last;
  p->meta = checkpoint_meta(trainer_, settings, position, world_);
  p->settings = settings;
  const double staged = stage(step);
  p->stall_seconds = seconds_since(t0);
  if (rank_ == 0) {
    char line[256];
    std::snprintf(line, sizeof line, "saving %s in the background: %.3f GB per rank staged in %.2f s",
                  p->place.final_dir.c_str(), static_cast<double>(bytes_) / 1e9, staged);
    log_info(line);
  }
  const std::string path = path_join(p->place.tmp_dir, shard_file_name(rank_));
  const Fault fault = shard_write_fault(step, rank_, world_);
  const bool hold = fault_armed(Fault::kHoldSave, step, rank_, world_);
  Pending* q = p.get();
  p->writer = std::thread([this, q, path, fault, hold] {
    try {
      if (hold) hold_until_released(q->place.tmp_dir + ".release");
      const auto w0 = Clock::now();
      q->outcome.record = write_shard_parallel(
          path, tensors_, [this](size_t i, int64_t b, int64_t n, float* out) { fill(i, b, n, out); }, fault);
      q->outcome.seconds = seconds_since(w0);
    } catch (const std::exception& e) {
      q->outcome.error = e.what();
    }
    q->done = true;
  });
  pending_ = std::move(p);
  return earlier;
}

// Whether any rank's flag is still false (one host exchange).
bool AsyncSaver::any_unfinished(bool mine) const {
  const double open = mine ? 0 : 1;
  return (comm_ ? comm_->host_max(open, "checkpoint writers") : open) > 0;
}

std::optional<SaveReport> AsyncSaver::poll(const std::vector<std::string>& pinned) {
  if (!pending_) return std::nullopt;
  if (!pending_->gathered) {
    if (any_unfinished(pending_->done)) return std::nullopt;
    gather();
  }
  if (any_unfinished(pending_->committed)) return std::nullopt;
  return conclude(pinned);
}

std::optional<SaveReport> AsyncSaver::wait(const std::vector<std::string>& pinned) {
  if (!pending_) return std::nullopt;
  if (!pending_->gathered) gather();
  if (pending_->committer.joinable()) pending_->committer.join();
  return conclude(pinned);
}

void AsyncSaver::gather() {
  Pending& p = *pending_;
  p.writer.join();
  p.gathered = true;
  try {
    p.report = gather_shards(comm_, p.place, p.meta, p.outcome, p.stall_seconds);
  } catch (...) {
    pending_.reset();
    throw;
  }
  if (rank_ != 0) {
    p.committed = true;
    return;
  }
  p.committer = std::thread([this, q = &p] {
    q->commit_error = try_commit(q->place, q->meta, q->settings.config_toml, world_);
    q->committed = true;
  });
}

SaveReport AsyncSaver::conclude(const std::vector<std::string>& pinned) {
  if (pending_->committer.joinable()) pending_->committer.join();
  const std::unique_ptr<Pending> p = std::move(pending_);
  p->settings.pinned = pinned;
  conclude_save(comm_, p->place, p->keep_last, p->settings, p->commit_error, p->report, true);
  return p->report;
}

}  // namespace anvil
