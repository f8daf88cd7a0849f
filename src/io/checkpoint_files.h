// The checkpoint format on disk: files, checksums, validation, discovery.
//
// A checkpoint is a folder <ckpt-dir>/step-<N> holding
//  - rank-<r>.safetensors, one per rank of the run that wrote it: for every unit u the F32
//    tensors master.<u>, exp_avg.<u>, exp_avg_sq.<u>, each rank r's slice
//    [r * shard, (r + 1) * shard) of the unit padded for that world size (the FSDP layout,
//    whatever the mode: a DDP rank writes the same slice of its whole copy, so every mode
//    writes each byte of state once);
//  - meta.json, written by rank 0 last: the model config, the name table (every tensor's
//    global shape, unit and offset), the units, world size, mode, step, data position,
//    anvil version, the training settings, and the size and checksums of every shard file:
//    of the whole file, and of each of its 64 MiB chunks ("chunk_bytes", "chunk_xxh64").
// The folder is written as <ckpt-dir>/.tmp-step-<N> and renamed once every rank has synced
// its shard and meta.json is synced, so a folder named step-<N> with a meta.json is
// complete; validation still checks every file's size and checksum before a byte is used.
// The checksum is XXH64 (seed 0) of the whole file, written as 16 lowercase hex digits:
// fast enough (several GB/s per core) not to slow the save, and standard enough to
// recompute with xxhsum -H1 (core/hash.h: Xxh64, hash_file). The whole file's is one stream,
// hashed on one thread in file order, which a fast disk outruns; validation checks the
// chunks' instead, each on its own, on several threads at once (io/parallel_file.h), and the
// whole file's only for a checkpoint saved before chunk checksums were recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fault.h"
#include "core/json.h"
#include "sys/disk_bench.h"

namespace anvil {

constexpr const char* kCheckpointFormat = "anvil-checkpoint";
constexpr int kCheckpointVersion = 1;

// The state a shard holds of every unit u, as tensors <kind>.<u>, in this order.
inline constexpr const char* kStateKinds[3] = {"master", "exp_avg", "exp_avg_sq"};

std::string shard_file_name(int rank);          // "rank-00003.safetensors"
std::string checkpoint_name(int64_t step);      // "step-12"

// One tensor of a shard: name and element count (F32, 1-D).
struct ShardTensor {
  std::string name;
  int64_t numel = 0;
};

struct ShardRecord {
  std::string file;  // name inside the checkpoint folder
  uint64_t bytes = 0;
  std::string xxh64;
  std::vector<std::string> chunks;  // XXH64 hex of each kFileChunk-byte chunk
};

// fill(i, begin, n, out): elements [begin, begin + n) of tensor i into out.
using ShardFill = std::function<void(size_t, int64_t, int64_t, float*)>;
// Writes a safetensors file of F32 1-D tensors in order, streaming in chunks (the next one
// filled while the last is written). The file (and each chunk) is hashed as it is written, fsynced, and
// renamed into place; on an error the partial file is removed and the message names the
// file and the bytes missing. `fault` (core/fault.h, tests only): kDieInSave exits the
// process halfway through the file, kNoSpaceInSave fails there with ENOSPC.
ShardRecord write_shard(const std::string& path, const std::vector<ShardTensor>& tensors, const ShardFill& fill,
                        Fault fault = Fault::kNone);

// The same file as write_shard (the same bytes and checksum) from a fill that may be called
// from several threads at once (host memory: an asynchronous save's snapshot), written in
// large requests by `threads` threads (io/parallel_file.h). The same faults.
ShardRecord write_shard_parallel(const std::string& path, const std::vector<ShardTensor>& tensors,
                                 const ShardFill& fill, Fault fault = Fault::kNone, int threads = kDiskThreads);

// meta.json of a checkpoint folder (throws naming the file when absent or malformed).
Json read_checkpoint_meta(const std::string& ckpt);
void write_checkpoint_meta(const std::string& ckpt, const Json& meta);  // atomic, fsynced

// Every check that needs no model: meta.json parses and is this format, every shard file
// named there exists with its recorded size and (when verify_checksums) checksums: its
// chunks', each on its own on several threads (the whole file's where meta.json records no
// chunks'). The error names the file and what is wrong (for a chunk, its bytes).
Status validate_checkpoint(const std::string& ckpt, bool verify_checksums = true);
// What is wrong with the checksums of a shard file of its recorded size (`shard`: its record
// in meta.json); empty when they match. Its chunks', where recorded, else the whole file's.
std::string checksum_error(const std::string& path, const Json& shard);

// Complete checkpoints (step-<N> folders with a meta.json) in a folder, newest first.
std::vector<std::string> list_checkpoints(const std::string& ckpt_dir);
// The step of a checkpoint folder's name, or -1 when it is not step-<N>.
int64_t checkpoint_step(const std::string& path);
// The newest checkpoint of ckpt's parent folder older than ckpt that validates (sizes and
// checksums); empty when there is none.
std::string older_valid_checkpoint(const std::string& ckpt);
// The refusal of checkpoint ckpt: why (naming the file), then what to do instead: resume from
// the newest older complete checkpoint, or that none is left.
std::string checkpoint_refusal(const std::string& ckpt, const std::string& why);

// Syncs a folder's entries (after a rename into it).
void fsync_directory(const std::string& dir);

}  // namespace anvil
