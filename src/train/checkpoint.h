// Checkpoints of a training run (save, resume, resharding) and Hugging Face export.
//
// Save (every rank calls save_checkpoint): rank r writes rank-r.safetensors, its slice of
// every unit's master weights and AdamW m and v (io/checkpoint_files.h: the layout); the ranks
// exchange sizes and checksums (and any error); rank 0 then writes meta.json, renames the
// temporary folder to step-<N>, syncs the parent folder, and only then deletes the
// checkpoints beyond keep_last. A rank that dies mid-save leaves a .tmp-step-<N> folder
// that no reader takes for a checkpoint. save_checkpoint runs these phases at once; the
// asynchronous saves (train/checkpoint_async.h) run the same phases with the write between
// them on a background thread.
// Resume: rank 0 validates every file (sizes and checksums) before anything is read; a
// refusal names the file and the newest older complete checkpoint. The state is read by
// tensor name through the ParamTable, so any world size and either mode can load any
// checkpoint of the same model: with the same world size the bytes land where they were
// and the run continues bit for bit.
// Export: the model's config and its weights by Hugging Face name handed to io/hf_export.h,
// which writes the folder.
#pragma once

#include <cstdint>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include "comm/comm.h"
#include "core/json.h"
#include "data/blocks.h"
#include "io/checkpoint_files.h"
#include "io/hf_export.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weights.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anvil {

// What a checkpoint records besides the state (where and how many: the run's
// CheckpointSection, train/config.h).
struct SaveSettings {
  // Recorded for export: where config, tokenizer and generation_config came from.
  std::string model_dir, tokenizer_dir;
  Json train = Json::object();  // the training settings, recorded as given
  std::vector<std::string> pinned;  // checkpoints keep_last must not delete (copies off the machine)
  std::string config_toml;      // written as anvil_config.toml when not empty
};

struct SaveReport {
  std::string path;
  double gigabytes = 0, seconds = 0;  // asynchronous: seconds of the slowest rank's background write
  double stall_seconds = 0;           // asynchronous: how long training waited (staging, an earlier save)
};

// Every rank calls it with the same arguments after the same step. Returns on every rank
// once the checkpoint is complete (rank 0 logs the line with its speed). A failure on any
// rank (a full disk, a write error) throws the same kIo error on every rank, naming the
// file and the bytes missing and the last good checkpoint, which stays untouched; the
// temporary folder is removed.
SaveReport save_checkpoint(Trainer& trainer, Comm* comm, const CheckpointSection& where, const SaveSettings& settings,
                           const DataPosition& position);

// The phases of a save, shared by save_checkpoint and the asynchronous saves
// (train/checkpoint_async.h); every rank calls each of them.
struct SavePlace {
  std::string ckpt_dir, final_dir, tmp_dir;  // <dir>/step-<N> and <dir>/.tmp-step-<N>
  int64_t step = 0;
};
// 1. Rank 0 makes the temporary folder (removing what interrupted saves left); an error
// there stops the run on every rank.
SavePlace begin_save(Comm* comm, const std::string& ckpt_dir, int64_t step);
// The tensors of every rank's shard file (F32, 1-D): master, exp_avg and exp_avg_sq of each
// unit, each the rank's slice [r * shard, (r + 1) * shard).
std::vector<ShardTensor> shard_tensors(const ParamTable& table);
// meta.json as of now (step, data position, model, settings), without the shards' records.
Json checkpoint_meta(Trainer& trainer, const SaveSettings& settings, const DataPosition& position, int world);
// What one rank's shard write gave: its record and seconds, or its error.
struct ShardOutcome {
  ShardRecord record;
  double seconds = 0;
  std::string error;
};
// 2. After every rank's write: a failure on any rank throws the same kIo error on every
// rank (naming the file and the last good checkpoint; the temporary folder removed); else
// the records (sizes, checksums, seconds) are exchanged and added to rank 0's meta.
SaveReport gather_shards(Comm* comm, const SavePlace& place, Json& meta, const ShardOutcome& mine,
                         double stall_seconds);
// 3. Rank 0, on any thread: meta.json, the rename that completes the checkpoint, the syncs;
// the error (the temporary folder then removed), or empty.
std::string try_commit(const SavePlace& place, const Json& meta, const std::string& config_toml, int world);
// 4. Every rank: rank 0's commit error throws on every rank; else rank 0 logs the save
// (`background`: with its stall) and prunes beyond keep_last (except settings.pinned and
// this one).
void conclude_save(Comm* comm, const SavePlace& place, int64_t keep_last, const SaveSettings& settings,
                   const std::string& commit_error, const SaveReport& report, bool background);
// The fault (core/fault.h) a rank's shard write injects at the save of `step`, if any.
Fault shard_write_fault(int64_t step, int rank, int world);
// The first rank's error message (empty: none), on every rank.
std::string first_error(Comm* comm, const std::string& mine, std::string_view tag);

// Removes what interrupted saves left in ckpt_dir (.tmp-step-<N> folders, *.tmp.<pid>).
void remove_temporary_files(const std::string& ckpt_dir);
// Deletes the complete checkpoints beyond the newest keep_last (0: none), except `pinned`.
void prune_checkpoints(const std::string& ckpt_dir, int64_t keep_last, const std::vector<std::string>& pinned);

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
// The master weights laid out for `table` (any world size).
// The masters of the checkpoint, read as the Trainer asks (only the owned ranges; the
// shard files' pages dropped after use); the time and bytes are added to `point`, which
// must outlive the reader.
UnitReader checkpoint_masters_reader(ResumePoint& point, const ParamTable& table);
// After the Trainer was built from those masters: AdamW m and v (only the elements this
// rank owns are read) and the step counter; then the checksums' verdict (a refusal throws
// on every rank, naming the file and the newest older complete checkpoint); logs this
// rank's load speed.
void restore_optimizer(ResumePoint& point, Trainer& trainer);

// config.json of the model: as it was read, or made from `config` for a model built without one.
Json hf_config_json(const ModelConfig& config);
// Every entry of `table` as an export tensor, its values read from `units` (which must outlive the list).
std::vector<HfTensor> hf_tensors(const ParamTable& table, const HostUnits& units);
// Writes a Hugging Face model folder from host units laid out for `table`.
void export_model(const ModelConfig& config, const ParamTable& table, const HostUnits& units,
                  const HfExportSettings& settings);

struct ExportOptions {
  std::string ckpt;
  std::string out;
  std::string dtype = "bf16";  // bf16 | fp32
  bool full = false;           // one safetensors file: weights and optimizer state (F32)
  int64_t max_shard_bytes = int64_t{5} << 30;
};
// anvil export.
void run_export(const ExportOptions& o);

}  // namespace anvil
