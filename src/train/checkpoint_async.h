// Asynchronous saves: checkpoints written while training goes on, as PyTorch DCP's
// async_save and torchtitan's asynchronous checkpointing are.
//
// At a save step every rank copies its shard of the state (its slice of every unit's
// masters, AdamW m and v: what a synchronous save writes) into a snapshot in host memory,
// page-locked on a GPU so that the copies run at the link's speed (split masters copied as
// their two halves and joined by the writer); that copy is all the training waits for. A
// writer thread then streams the snapshot into the rank's shard file on several threads in
// large requests, hashed on the way (io/parallel_file.h), fsynced and renamed into the
// temporary folder. After every step the ranks agree, in one host exchange while a save is in
// flight, whether every writer has ended; the save then completes as a synchronous one does
// (train/checkpoint.h: the records exchanged, then rank 0's meta.json and the rename that
// make it complete, on a thread of its own, agreed on after a later step, then keep_last),
// and a failed write (a full disk) stops the run there on every rank, the last good
// checkpoint intact. A save due while one is in flight waits for it,
// or is skipped with a warning (--save-skip-busy). The snapshot (the plan's host_snapshot)
// is allocated once, before the first step, and refused there when the host's memory
// (sys/host_memory.h) cannot hold it for every rank of the machine.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "data/blocks.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anvil {

// Every rank, before any weight is read: refuses asynchronous saves (--save-every without
// --sync-save) whose snapshots, one per rank of this machine (LOCAL_WORLD_SIZE), do not fit
// in the host's available memory, naming --sync-save.
void check_snapshot_memory(const CheckpointSection& c, const ParamTable& table, Comm* comm);

class AsyncSaver {
 public:
  // Every rank: allocates this rank's snapshot.
  AsyncSaver(Trainer& trainer, Comm* comm);
  ~AsyncSaver();  // waits for a write in flight, which then stays incomplete (.tmp-step-<N>)
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  bool busy() const { return pending_ != nullptr; }
  // Every rank, at a save step: takes the snapshot of the current step and starts writing it.
  // A save still in flight is completed first (its report returned), waiting for it unless
  // where.skip_busy and `may_skip` (not the last step's, nor a stop's), which skips this one.
  std::optional<SaveReport> start(const CheckpointSection& where, const SaveSettings& settings,
                                  const DataPosition& position, bool may_skip);
  // Every rank, after every step: completes the save in flight once every rank's writer has
  // ended (its report); a failed write throws the same kIo error on every rank.
  std::optional<SaveReport> poll(const std::vector<std::string>& pinned);
  // Every rank: waits for the save in flight and completes it.
  std::optional<SaveReport> wait(const std::vector<std::string>& pinned);

 private:
  struct Part {
    int64_t numel = 0;
    size_t offset = 0;   // bytes into the snapshot
    bool split = false;  // held as high and low halves (core/bf16.h), joined when written
  };
  struct Pending;

  double stage(int64_t step);  // the copies into the snapshot; their seconds
  void fill(size_t part, int64_t begin, int64_t n, float* out) const;
  bool any_unfinished(bool mine) const;
  void gather();  // every rank's shard written: the records exchanged, rank 0's commit started
  SaveReport conclude(const std::vector<std::string>& pinned);

  Trainer& trainer_;
  Comm* comm_;
  int rank_ = 0, world_ = 1;
  std::vector<ShardTensor> tensors_;
  std::vector<Part> parts_;
  size_t bytes_ = 0;
  char* snapshot_ = nullptr;
  std::unique_ptr<Pending> pending_;
};

}  // namespace anvil
