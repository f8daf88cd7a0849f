// Resuming from a checkpoint. Rank 0 validates every file (sizes now, checksums while the
// state is read) before the first step. A checkpoint named by --resume that fails is refused,
// naming the file and the newest older complete checkpoint; the newest one of --ckpt-dir that
// fails is skipped with a warning and the next older one loaded instead (everything read
// again, on every rank), and once one loads the failed ones are set aside as
// <name>.corrupt: never deleted, and no longer a checkpoint to resume or for --keep-last to
// count. The state is read by tensor name through the ParamTable
// (train/checkpoint_reader.h), so any world size and either mode can load any checkpoint of
// the same model: with the same world size the bytes land where they were and the run
// continues bit for bit.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/json.h"
#include "data/blocks.h"
#include "model/params.h"
#include "model/weights.h"
#include "train/checkpoint_reader.h"
#include "train/trainer.h"

namespace anvil {

// The checkpoints a run may resume from, in the order it tries them: the one `resume` names
// (it must exist; a --ckpt-dir given for it: its newest complete one), alone; else every
// complete checkpoint of ckpt_dir, newest first; none: a fresh start. Every rank lists the
// folder itself (the run's lock keeps it still), so every rank holds the same list.
class ResumeChoice {
 public:
  ResumeChoice(const std::string& ckpt_dir, const std::string& resume);
  const std::string& path() const;  // the one to try now; empty: a fresh start
  const std::vector<std::string>& candidates() const { return candidates_; }  // all, newest first
  // Whether a failure of path() goes on to an older one (chosen from --ckpt-dir, one left)
  // rather than refusing it.
  bool can_fall_back() const { return !given_ && at_ + 1 < candidates_.size(); }
  // Every rank, when path() failed its checks (`why`, rank 0's words on every rank): rank 0
  // warns, naming it and why, and the next older one is tried.
  void fall_back(const std::string& why, int rank);
  // Rank 0, once a checkpoint has loaded: the ones that failed renamed <name>.corrupt, with a
  // warning (a name that is not a checkpoint's, so resume and --keep-last pass them by).
  void set_aside_failed() const;

 private:
  std::vector<std::string> candidates_;
  size_t at_ = 0;
  bool given_ = false;
  std::vector<std::string> failed_;
};

// A checkpoint's checksum verdict: what failed (empty: every chunk matches) and, on rank 0, the
// seconds until every chunk was checked.
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
  std::shared_ptr<CheckpointReader> reader;  // the shard files, mapped, until the state is read
  std::future<ChecksumVerdict> checksums;  // rank 0: the checksum pass, running
  std::string failed;  // why it failed its checks (rank 0's words, on every rank); empty: it passed
};

// Checks choice.path() (rank 0 checks every file's size and every rank reads the shards'
// headers; the verdict is shared, so every rank decides alike) and against `table`'s model,
// and starts the checksum checks: every rank's reads hash each chunk they touch first, and
// rank 0's pass beside them hashes the chunks no read touched, so each byte comes from the
// disk once (io/shard_checks.h); restore_optimizer waits for the verdict, so a corrupt
// checkpoint never trains. A failure is point.failed when the choice can fall back, else the refusal
// (thrown on every rank, naming the file and the newest older complete checkpoint); another
// model is always refused. Every rank calls it.
ResumePoint open_checkpoint(const ResumeChoice& choice, const ParamTable& table, Comm* comm);
// The masters of the checkpoint laid out for `table` (any world size), read as the Trainer
// asks (only the owned ranges; the shard files' pages dropped after use); the time and bytes
// are added to `point`, which must outlive the reader.
UnitReader checkpoint_masters_reader(ResumePoint& point, const ParamTable& table);
// After the Trainer was built from those masters: AdamW m and v (only the elements this
// rank owns are read) and the step counter; then the checksums' verdict, shared as
// open_checkpoint's (point.failed, or the refusal thrown on every rank); logs this rank's
// load speed.
void restore_optimizer(ResumePoint& point, const ResumeChoice& choice, Trainer& trainer);

}  // namespace anvil
