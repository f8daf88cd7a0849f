// Resuming from a checkpoint. Rank 0 validates every file (sizes now, checksums while the
// state is read) before the first step; a refusal names the file and the newest older
// complete checkpoint. The state is read by tensor name through the ParamTable
// (train/checkpoint_reader.h), so any world size and either mode can load any checkpoint of
// the same model: with the same world size the bytes land where they were and the run
// continues bit for bit.
#pragma once

#include <cstdint>
#include <future>
#include <string>

#include "comm/comm.h"
#include "core/json.h"
#include "data/blocks.h"
#include "model/params.h"
#include "model/weights.h"
#include "train/trainer.h"

namespace anvil {

// The checkpoint to resume: `resume` when given (it must exist), else the newest complete
// checkpoint of ckpt_dir, else empty (a fresh start).
std::string find_resume_checkpoint(const std::string& ckpt_dir, const std::string& resume);

// Rank 0's checksum pass over a checkpoint: the refusal (empty: every file matches) and its seconds.
struct ChecksumVerdict {
  std::string error;
  double seconds = 0;
};

// A checkpoint whose files have their recorded sizes and whose name table matches the model
// being trained; the checksums are verified while the state is read.
struct ResumePoint {
  std::string path;
  Json meta;
  int64_t step = 0;
  DataPosition position;
  double read_bytes = 0, read_seconds = 0;  // this rank's load, for the log line
  Comm* comm = nullptr;
  std::future<ChecksumVerdict> checksums;  // rank 0: the checksum pass, running
};

// Checks the checkpoint (rank 0 checks every file's size, the verdict is shared so that every
// rank throws the same refusal) and against `table`'s model, and starts rank 0's checksum
// pass, which reads the files beside the state's reads (the page cache serves the second);
// restore_optimizer waits for its verdict, so a corrupt checkpoint never trains. Every rank
// calls it.
ResumePoint open_checkpoint(const std::string& path, const ParamTable& table, Comm* comm);
// The masters of the checkpoint laid out for `table` (any world size), read as the Trainer
// asks (only the owned ranges; the shard files' pages dropped after use); the time and bytes
// are added to `point`, which must outlive the reader.
UnitReader checkpoint_masters_reader(ResumePoint& point, const ParamTable& table);
// After the Trainer was built from those masters: AdamW m and v (only the elements this
// rank owns are read) and the step counter; then the checksums' verdict (a refusal throws
// on every rank, naming the file and the newest older complete checkpoint); logs this
// rank's load speed.
void restore_optimizer(ResumePoint& point, Trainer& trainer);

}  // namespace anvil
