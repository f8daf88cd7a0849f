// What makes a save asynchronous, as PyTorch DCP's async_save and torchtitan's asynchronous
// checkpointing are: a snapshot of the rank's state in host memory.
//
// At a save step every rank copies its shard of the state (its slice of every unit's
// masters, AdamW m and v: what its shard file holds) into the snapshot, page-locked on a GPU
// so that the copies run at the link's speed (split masters copied as their two halves and
// joined as the file is written); that copy is all the training waits for, and the shard
// file is then written from the snapshot in the background (train/checkpoint_save.h). The
// snapshot (the plan's host_snapshot) is allocated once, before the first step, and refused
// there when the host's memory (sys/host_memory.h) cannot hold it for every rank of the
// machine; --sync-save writes from the state itself, with no snapshot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "io/checkpoint_files.h"
#include "model/params.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anvil {

// Every rank, before any weight is read: refuses asynchronous saves (--save-every without
// --sync-save) whose snapshots, one per rank of this machine (LOCAL_WORLD_SIZE), do not fit
// in the host's available memory, naming --sync-save.
void check_snapshot_memory(const CheckpointSection& c, const ParamTable& table, Comm* comm);

class SaveSnapshot {
 public:
  // Every rank: allocates the snapshot of a shard file's tensors (the state's kinds, unit by
  // unit: train/checkpoint_save.cpp's order); one rank's failure throws on every rank.
  SaveSnapshot(Trainer& trainer, Comm* comm, const std::vector<ShardTensor>& tensors);
  ~SaveSnapshot();
  SaveSnapshot(const SaveSnapshot&) = delete;
  SaveSnapshot& operator=(const SaveSnapshot&) = delete;

  size_t bytes() const { return bytes_; }
  // The copies of the state of `step` into the snapshot; their seconds.
  double stage(int64_t step);
  // Elements [begin, begin + n) of tensor `part` into out (any thread).
  void fill(size_t part, int64_t begin, int64_t n, float* out) const;

 private:
  struct Part {
    int64_t numel = 0;
    size_t offset = 0;   // bytes into the snapshot
    bool split = false;  // held as high and low halves (core/bf16.h), joined when written
  };

  Trainer& trainer_;
  int rank_ = 0, world_ = 1;
  std::vector<Part> parts_;
  size_t bytes_ = 0;
  char* data_ = nullptr;
};

}  // namespace anvil
