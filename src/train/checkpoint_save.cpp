// Writing checkpoints: the phases of a save and the one saver (see train/checkpoint_save.h).
#include "train/checkpoint_save.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "comm/first_error.h"
#include "core/duration.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/parallel_file.h"
#include "model/export.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

// Where a save goes: <dir>/step-<N>, written as <dir>/.tmp-step-<N>.
struct SavePlace {
  std::string ckpt_dir, final_dir, tmp_dir;
  int64_t step = 0;
};

// What one rank's shard write gave: its record and seconds, or its error.
struct ShardOutcome {
  ShardRecord record;
  double seconds = 0;
  std::string error;
};

// Why a save failed, what is left and what the run does: it stops.
[[noreturn]] void save_failed(const std::string& ckpt_dir, int64_t step, const std::string& why) {
  const std::vector<std::string> left = list_checkpoints(ckpt_dir);
  raise(ErrorKind::kIo, "checkpoint ", checkpoint_name(step), " not saved: ", why, "; ",
        left.empty() ? std::string("no earlier checkpoint exists, the run stops with nothing saved")
                     : cat("the run stops; its last good checkpoint is ", left.front(), " (step ",
                           checkpoint_step(left.front()), "), untouched; the same command resumes from it"));
}

// 1. Rank 0 makes the temporary folder, once what interrupted saves left is removed and the
// checkpoints beyond keep_last are deleted (a run killed between a commit and its rotation
// left one more), so that the folder never holds more than keep_last + 1; an error there
// stops the run on every rank.
SavePlace begin_save(Comm* comm, const std::string& ckpt_dir, int64_t step, int64_t keep_last,
                     const std::vector<std::string>& pinned) {
  const SavePlace place{ckpt_dir, path_join(ckpt_dir, checkpoint_name(step)),
                        path_join(ckpt_dir, ".tmp-" + checkpoint_name(step)), step};
  std::string error;
  if (!comm || comm->rank() == 0) {
    try {
      make_directories(ckpt_dir);
      remove_temporary_files(ckpt_dir);
      prune_checkpoints(ckpt_dir, keep_last, pinned);
      make_directories(place.tmp_dir);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = first_error(comm, error, "checkpoint folder");
  if (!error.empty()) save_failed(ckpt_dir, step, error);
  return place;
}

// The tensors of every rank's shard file (F32, 1-D): master, exp_avg and exp_avg_sq of each
// unit, each the rank's slice [r * shard, (r + 1) * shard).
std::vector<ShardTensor> shard_tensors(const ParamTable& table) {
  std::vector<ShardTensor> tensors;
  for (int k = 0; k < 3; ++k)
    for (size_t u = 0; u < table.units().size(); ++u)
      tensors.push_back({cat(kStateKinds[k], ".", u), table.units()[u].shard()});
  return tensors;
}

// The layout the checkpoint records: the table's, with expert parallel every shard's experts
// (ParamTable::saved_layout), so that any degree reads it by name.
Json table_json(const ParamTable& table) {
  Json units = Json::array(), tensors = Json::array();
  const ParamTable::Saved saved = table.saved_layout();
  for (const UnitInfo& u : saved.units) units.push_back({{"name", u.name}, {"numel", u.numel}, {"padded", u.padded}});
  for (const ParamEntry& e : saved.entries) {
    Json shape = Json::array();
    for (int i = 0; i < e.shape.ndim; ++i) shape.push_back(e.shape[i]);
    tensors.push_back({{"name", e.name}, {"unit", e.unit}, {"offset", e.offset}, {"shape", shape}});
  }
  return {{"units", units}, {"tensors", tensors}};
}

// meta.json as of now (step, data position, model, settings), without the shards' records.
Json checkpoint_meta(Trainer& trainer, const SaveSettings& settings, const DataPosition& position, int world) {
  Json meta = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion}, {"anvil_version", ANVIL_VERSION},
               {"step", trainer.step_count()}, {"world", static_cast<int64_t>(world)},
               {"mode", parallel_mode_name(trainer.store().mode())},
               {"data",
                {{"epoch", position.epoch},
                 {"samples_in_epoch", position.samples_in_epoch},
                 {"packing", position.packing}}},
               {"source", {{"model_dir", settings.model_dir}, {"tokenizer_dir", settings.tokenizer_dir}}},
               {"train", settings.train}};
  meta["config"] = hf_config_json(trainer.config());
  const Json t = table_json(trainer.table());
  meta["units"] = t["units"];
  meta["tensors"] = t["tensors"];
  return meta;
}

// The fault (core/fault.h) a rank's shard write injects at the save of `step`, if any.
Fault shard_write_fault(int64_t step, int rank, int world) {
  return fault_armed(Fault::kDieInSave, step, rank, world)       ? Fault::kDieInSave
         : fault_armed(Fault::kNoSpaceInSave, step, rank, world) ? Fault::kNoSpaceInSave
                                                                 : Fault::kNone;
}

// ANVIL_FAULT hold_save: the writer waits for the release file before its first byte.
void hold_until_released(const std::string& release) {
  log_error("fault hold_save (ANVIL_FAULT): the background write waits for ", release);
  while (!path_exists(release)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// The shards' records to every rank (sizes, checksums, write seconds), in rank order.
struct Wire {
  uint64_t bytes;
  char xxh64[16];
  double seconds;
};
std::vector<Wire> gather_records(Comm* comm, const ShardOutcome& mine) {
  Wire w{mine.record.bytes, {}, mine.seconds};
  std::memcpy(w.xxh64, mine.record.xxh64.data(), std::min<size_t>(16, mine.record.xxh64.size()));
  std::vector<Wire> all(comm ? static_cast<size_t>(comm->world()) : 1);
  if (comm) comm->host_all_gather(&w, sizeof w, all.data(), "checkpoint shards");
  else all[0] = w;
  return all;
}

// Every rank's chunk checksums, in rank order: every shard file has the same layout (the same
// tensors and sizes), so the same number of chunks.
std::vector<std::vector<std::string>> gather_chunk_sums(Comm* comm, const std::vector<std::string>& mine) {
  std::string flat;
  for (const std::string& hex : mine) flat += hex;
  const size_t world = comm ? static_cast<size_t>(comm->world()) : 1;
  std::string all = flat;
  if (comm) {
    all.assign(flat.size() * world, '\0');
    comm->host_all_gather(flat.data(), flat.size(), all.data(), "checkpoint chunk checksums");
  }
  std::vector<std::vector<std::string>> out(world);
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < mine.size(); ++i) out[r].push_back(all.substr((r * mine.size() + i) * 16, 16));
  return out;
}

// 2. After every rank's write: a failure on any rank throws the same kIo error on every rank
// (naming the file and the last good checkpoint; the temporary folder removed); else the
// records (sizes, checksums, seconds) are exchanged and added to rank 0's meta.
SaveReport gather_shards(Comm* comm, const SavePlace& place, Json& meta, const ShardOutcome& mine,
                         double stall_seconds) {
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  const std::string error = first_error(comm, mine.error, "checkpoint shards written");
  if (!error.empty()) {
    std::error_code ec;
    if (rank == 0) std::filesystem::remove_all(place.tmp_dir, ec);
    save_failed(place.ckpt_dir, place.step, error);
  }
  // Sizes and checksums to rank 0, which writes meta.json once every shard is synced.
  const std::vector<Wire> all = gather_records(comm, mine);
  for (const Wire& w : all) ANVIL_ASSERT(w.bytes == mine.record.bytes);  // the same layout on every rank
  const std::vector<std::vector<std::string>> chunks = gather_chunk_sums(comm, mine.record.chunks);
  SaveReport report;
  report.path = place.final_dir;
  report.stall_seconds = stall_seconds;
  uint64_t total = 0;
  Json shards = Json::array();
  for (int r = 0; r < world; ++r) {
    const Wire& w = all[static_cast<size_t>(r)];
    shards.push_back({{"file", shard_file_name(r)}, {"rank", r}, {"bytes", w.bytes}, {"xxh64", std::string(w.xxh64, 16)},
                      {"chunk_bytes", kFileChunk}, {"chunk_xxh64", chunks[static_cast<size_t>(r)]}});
    total += w.bytes;
    report.seconds = std::max(report.seconds, w.seconds);
  }
  if (rank == 0) meta["shards"] = shards;
  report.gigabytes = static_cast<double>(total) / 1e9;
  return report;
}

// 3. Rank 0, once every shard is synced: meta.json, then the rename of the temporary folder
// to step-<N> (the moment the checkpoint becomes complete), and the parent folder synced.
void commit_checkpoint(const SavePlace& place, const Json& meta, const std::string& config_toml, int world) {
  if (!config_toml.empty()) write_file_atomic(path_join(place.tmp_dir, "anvil_config.toml"), config_toml);
  write_checkpoint_meta(place.tmp_dir, meta);
  fsync_directory(place.tmp_dir);
  if (fault_armed(Fault::kDieBeforeRename, place.step, 0, world))
    die_at_fault(Fault::kDieBeforeRename, "before renaming " + place.tmp_dir + " to " + place.final_dir);
  if (path_exists(place.final_dir)) delete_checkpoint(place.final_dir);  // the same step's, of an earlier run
  ANVIL_ENSURE(std::rename(place.tmp_dir.c_str(), place.final_dir.c_str()) == 0, kIo, place.final_dir,
               ": rename from ", place.tmp_dir, " failed (", errno_text(), ")");
  fsync_directory(place.ckpt_dir);
}

// The commit's error (the temporary folder then removed), or empty; on any thread.
std::string try_commit(const SavePlace& place, const Json& meta, const std::string& config_toml, int world) {
  try {
    commit_checkpoint(place, meta, config_toml, world);
    return "";
  } catch (const Error& e) {
    std::error_code ec;
    std::filesystem::remove_all(place.tmp_dir, ec);
    return e.what();
  }
}

void log_saved(const SaveReport& r, int world, double stall_seconds) {
  char line[400];
  const double rate = r.gigabytes / std::max(r.seconds, 1e-9);
  if (stall_seconds < 0)
    std::snprintf(line, sizeof line, "saved %s: %.3f GB in %.2f s (%.2f GB/s, %d shard%s)", r.path.c_str(),
                  r.gigabytes, r.seconds, rate, world, world == 1 ? "" : "s");
  else
    std::snprintf(line, sizeof line,
                  "saved %s: %.3f GB written in the background in %.2f s (%.2f GB/s, %d shard%s); training "
                  "stalled %.2f s for it",
                  r.path.c_str(), r.gigabytes, r.seconds, rate, world, world == 1 ? "" : "s", stall_seconds);
  log_info(line);
}

// 4. Every rank: rank 0's commit error throws on every rank; else rank 0 logs the save
// (`background`: with its stall) and prunes beyond keep_last (except settings.pinned and
// this one).
void conclude_save(Comm* comm, const SavePlace& place, int64_t keep_last, const SaveSettings& settings,
                   const std::string& commit_error, const SaveReport& report, bool background) {
  const std::string error = first_error(comm, commit_error, "checkpoint complete");
  if (!error.empty()) save_failed(place.ckpt_dir, place.step, error);
  if (comm && comm->rank() != 0) return;
  log_saved(report, comm ? comm->world() : 1, background ? report.stall_seconds : -1);
  std::vector<std::string> pinned = settings.pinned;
  pinned.push_back(place.final_dir);  // a resumed run behind newer checkpoints keeps its own
  prune_checkpoints(place.ckpt_dir, keep_last, pinned);
}

}  // namespace

void remove_temporary_files(const std::string& ckpt_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind(".tmp-step-", 0) == 0 || n.rfind(".deleting-step-", 0) == 0 || n.find(".tmp.") != std::string::npos) {
      std::filesystem::remove_all(entry.path(), ec);
      if (!ec) log_info("removed the leftover ", entry.path().string(), " of an interrupted save");
    }
  }
}

void delete_checkpoint(const std::string& ckpt) {
  const std::filesystem::path p(ckpt);
  const std::string gone = (p.parent_path() / (".deleting-" + p.filename().string())).string();
  std::error_code ec;
  std::filesystem::remove_all(gone, ec);  // an earlier deletion's, interrupted
  ANVIL_ENSURE(std::rename(ckpt.c_str(), gone.c_str()) == 0, kIo, ckpt, ": rename to ", gone, " failed (",
               errno_text(), ")");
  fsync_directory(p.parent_path().string());
  std::filesystem::remove_all(gone, ec);
  if (ec) log_warn("could not delete ", gone, " (", ec.message(), "); the next save removes it");
}

void prune_checkpoints(const std::string& ckpt_dir, int64_t keep_last, const std::vector<std::string>& pinned) {
  if (keep_last <= 0) return;
  const std::vector<std::string> kept = list_checkpoints(ckpt_dir);
  for (size_t i = static_cast<size_t>(keep_last); i < kept.size(); ++i) {
    if (std::find(pinned.begin(), pinned.end(), kept[i]) != pinned.end()) continue;
    try {
      delete_checkpoint(kept[i]);
    } catch (const Error& e) {
      log_warn("could not delete the old checkpoint ", kept[i], " (", e.what(), ")");
    }
  }
}

// A save in flight: where it goes, what meta.json will say, the shard write's outcome, then
// (once every rank's shard is written and the records exchanged) rank 0's commit's.
struct CheckpointSaver::Pending {
  SavePlace place;
  int64_t keep_last = 0;
  Json meta;
  SaveSettings settings;
  Clock::time_point started;
  double stall_seconds = 0;
  ShardOutcome outcome;
  std::atomic<bool> done{false};
  std::thread writer;  // asynchronous saves
  bool gathered = false;
  SaveReport report;
  std::string commit_error;
  std::atomic<bool> committed{false};
  std::thread committer;  // rank 0
};

CheckpointSaver::CheckpointSaver(Trainer& trainer, Comm* comm, bool background)
    : trainer_(trainer), comm_(comm), rank_(comm ? comm->rank() : 0), world_(comm ? comm->world() : 1) {
  tensors_ = shard_tensors(trainer.table());
  if (background) snapshot_ = std::make_unique<SaveSnapshot>(trainer, comm, tensors_);
}

CheckpointSaver::~CheckpointSaver() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
  if (pending_ && pending_->committer.joinable()) pending_->committer.join();
}

std::optional<SaveReport> CheckpointSaver::start(const CheckpointSection& where, const SaveSettings& settings,
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
  auto begun = std::make_unique<Pending>();
  begun->started = t0;
  begun->place = begin_save(comm_, where.dir, step, where.keep_last, settings.pinned);
  begun->keep_last = where.keep_last;
  begun->meta = checkpoint_meta(trainer_, settings, position, world_);
  begun->settings = settings;
  pending_ = std::move(begun);
  Pending& p = *pending_;
  const Fault fault = shard_write_fault(step, rank_, world_);
  if (!snapshot_) {
    write_shard_file(p, fault);
    return earlier;
  }
  const double staged = snapshot_->stage(step);
  p.stall_seconds = seconds_since(t0);
  if (rank_ == 0) {
    char line[256];
    std::snprintf(line, sizeof line, "saving %s in the background: %.3f GB per rank staged in %.2f s",
                  p.place.final_dir.c_str(), static_cast<double>(snapshot_->bytes()) / 1e9, staged);
    log_info(line);
  }
  const bool hold = fault_armed(Fault::kHoldSave, step, rank_, world_);
  p.writer = std::thread([this, q = &p, fault, hold] {
    if (hold) hold_until_released(q->place.tmp_dir + ".release");
    write_shard_file(*q, fault);
  });
  return earlier;
}

// This rank's shard file, from the snapshot on several threads (asynchronous), or from the
// state itself as it is written (synchronous: downloaded on this thread, training waiting).
void CheckpointSaver::write_shard_file(Pending& p, Fault fault) {
  const auto t0 = Clock::now();
  const std::string path = path_join(p.place.tmp_dir, shard_file_name(rank_));
  try {
    p.outcome.record =
        snapshot_ ? write_shard_parallel(
                        path, tensors_,
                        [this](size_t i, int64_t b, int64_t n, float* out) { snapshot_->fill(i, b, n, out); }, fault)
                  : write_shard(
                        path, tensors_,
                        [this](size_t i, int64_t b, int64_t n, float* out) { fill_from_state(i, b, n, out); }, fault);
  } catch (const std::exception& e) {
    p.outcome.error = e.what();
  }
  p.outcome.seconds = seconds_since(t0);
  p.done = true;
}

// Rank r's slice [r * shard, (r + 1) * shard) of tensor `part`'s unit, wherever it is held (an
// experts unit: its replica's slice of the rank's shard, ParamTable::slice_rank).
void CheckpointSaver::fill_from_state(size_t part, int64_t begin, int64_t n, float* out) const {
  const ParamTable& table = trainer_.table();
  const size_t n_units = table.units().size();
  const ParamStore::State state[3] = {ParamStore::State::kMaster, ParamStore::State::kExpAvg,
                                      ParamStore::State::kExpAvgSq};
  const int u = static_cast<int>(part % n_units);
  const int64_t shard = table.units()[static_cast<size_t>(u)].shard();
  const int64_t at = table.slice_rank(u, rank_) * shard - trainer_.store().owned_offset(u) + begin;
  trainer_.store().read_owned(state[part / n_units], u, at, n, out);
}

// Whether any rank's flag is still false (one host exchange).
bool CheckpointSaver::any_unfinished(bool mine) const {
  const double open = mine ? 0 : 1;
  return (comm_ ? comm_->host_max(open, "checkpoint writers") : open) > 0;
}

std::optional<SaveReport> CheckpointSaver::poll(const std::vector<std::string>& pinned) {
  if (!pending_) return std::nullopt;
  if (!pending_->gathered) {
    if (any_unfinished(pending_->done)) return std::nullopt;
    gather();
  }
  if (any_unfinished(pending_->committed)) return std::nullopt;
  return conclude(pinned);
}

std::optional<SaveReport> CheckpointSaver::wait(const std::vector<std::string>& pinned) {
  if (!pending_) return std::nullopt;
  if (!pending_->gathered) gather();
  if (pending_->committer.joinable()) pending_->committer.join();
  return conclude(pinned);
}

void CheckpointSaver::gather() {
  Pending& p = *pending_;
  if (p.writer.joinable()) p.writer.join();
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

SaveReport CheckpointSaver::conclude(const std::vector<std::string>& pinned) {
  if (pending_->committer.joinable()) pending_->committer.join();
  const std::unique_ptr<Pending> p = std::move(pending_);
  p->settings.pinned = pinned;
  if (!snapshot_) p->report.seconds = seconds_since(p->started);  // the whole save, which training waited for
  conclude_save(comm_, p->place, p->keep_last, p->settings, p->commit_error, p->report, snapshot_ != nullptr);
  return p->report;
}

}  // namespace anvil
