// Writing checkpoints: one path, asynchronous by default, waited on with --sync-save.
//
// Every rank calls each step of a save. Rank r writes rank-r.safetensors, its slice of every
// unit's master weights and AdamW m and v (io/checkpoint_files.h: the layout); the ranks
// exchange sizes and checksums (and any error); rank 0 then writes meta.json, renames the
// temporary folder to step-<N>, syncs the parent folder, and only then deletes the
// checkpoints beyond keep_last (again before the next save begins, for a run killed in
// between), so that the folder holds at most keep_last + 1 checkpoints, complete or not
// (besides those --keep-best and --on-save pin). A
// rank that dies mid-save leaves a .tmp-step-<N> folder that no reader takes for a
// checkpoint, and a checkpoint is deleted by renaming it .deleting-step-<N> first, so that
// one killed mid-deletion is never a step-<N> with a meta.json and files missing; the next
// run (and each save) removes both kinds of leftover.
//
// start() begins a save at the step. Asynchronously, training waits only for the copy of the
// state into the host snapshot (train/checkpoint_async.h); a writer thread then streams it
// into the shard file on several threads in large requests, hashed on the way
// (io/parallel_file.h), fsynced and renamed into the temporary folder. After every step the
// ranks agree, in one host exchange while a save is in flight, whether every writer has
// ended (poll); the records are then exchanged and rank 0's commit runs on a thread of its
// own, agreed on after a later step. A save due while one is in flight waits for it, or is
// skipped with a warning (--save-skip-busy). With --sync-save there is no snapshot: start()
// writes the shard file from the state itself while training waits, and the caller waits
// for the rest (wait). Either way the files are the same bytes, and a failed write (a full
// disk) stops the run on every rank, naming the file and the bytes missing and the last
// good checkpoint, which stays untouched; the temporary folder is removed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/json.h"
#include "data/blocks.h"
#include "io/checkpoint_files.h"
#include "train/checkpoint_async.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anvil {

// What a checkpoint records besides the state (where and how many: the run's
// CheckpointSection, train/config.h).
struct SaveSettings {
  // Recorded for export: where config, tokenizer and generation_config came from.
  std::string model_dir, tokenizer_dir;
  Json train = Json::object();  // the training settings, recorded as given (train_record)
  std::vector<std::string> pinned;  // checkpoints keep_last must not delete (copies off the machine)
  std::string config_toml;      // written as anvil_config.toml when not empty
};

struct SaveReport {
  std::string path;
  double gigabytes = 0;
  double seconds = 0;        // asynchronous: the slowest rank's background write; else the whole save
  double stall_seconds = 0;  // asynchronous: how long training waited (staging, an earlier save)
};

class CheckpointSaver {
 public:
  // Every rank. `background`: asynchronous saves, whose snapshot is allocated now; else each
  // save is written from the state itself while training waits.
  CheckpointSaver(Trainer& trainer, Comm* comm, bool background);
  ~CheckpointSaver();  // waits for a write in flight, which then stays incomplete (.tmp-step-<N>)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  bool background() const { return snapshot_ != nullptr; }
  bool busy() const { return pending_ != nullptr; }
  // Every rank, at a save step: begins the checkpoint of the current step. A save still in
  // flight is completed first (its report returned), waiting for it unless where.skip_busy
  // and `may_skip` (not the last step's, nor a stop's), which skips this one.
  std::optional<SaveReport> start(const CheckpointSection& where, const SaveSettings& settings,
                                  const DataPosition& position, bool may_skip);
  // Every rank, after every step: completes the save in flight once every rank's writer has
  // ended (its report); a failed write throws the same kIo error on every rank.
  std::optional<SaveReport> poll(const std::vector<std::string>& pinned);
  // Every rank: waits for the save in flight and completes it.
  std::optional<SaveReport> wait(const std::vector<std::string>& pinned);

 private:
  struct Pending;

  void write_shard_file(Pending& p, Fault fault);  // on the writer thread, or in start()
  void fill_from_state(size_t part, int64_t begin, int64_t n, float* out) const;
  bool any_unfinished(bool mine) const;
  void gather();  // every rank's shard written: the records exchanged, rank 0's commit started
  SaveReport conclude(const std::vector<std::string>& pinned);

  Trainer& trainer_;
  Comm* comm_;
  int rank_ = 0, world_ = 1;
  std::vector<ShardTensor> tensors_;
  std::unique_ptr<SaveSnapshot> snapshot_;  // asynchronous saves only
  std::unique_ptr<Pending> pending_;
};

// Removes what interrupted saves and deletions left in ckpt_dir (.tmp-step-<N> and
// .deleting-step-<N> folders, *.tmp.<pid>).
void remove_temporary_files(const std::string& ckpt_dir);
// Deletes a checkpoint: renamed .deleting-<name> beside it (the parent folder synced), then
// removed, so that no moment of it leaves a step-<N> with files missing.
void delete_checkpoint(const std::string& ckpt);
// Deletes the complete checkpoints beyond the newest keep_last (0: none), except `pinned`.
void prune_checkpoints(const std::string& ckpt_dir, int64_t keep_last, const std::vector<std::string>& pinned);

}  // namespace anvil
