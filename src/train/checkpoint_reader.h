// Reading a checkpoint's state by tensor name (its name table in meta.json, io/checkpoint_files.h:
// the layout) into the units of any ParamTable of the same model: any world size, either
// mode. Resume (train/checkpoint_load.h) and anvil export read through it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "io/safetensors.h"
#include "io/shard_checks.h"
#include "model/params.h"
#include "model/weights.h"

namespace anvil {

// Throws (kInvalidInput, a refusal naming meta.json and the tensor) when the checkpoint's
// name table is not the model's: every tensor of `table` must be there with the same shape,
// and nothing else.
void check_model(const std::string& ckpt, const Json& meta, const ParamTable& table);

// The shard files of a checkpoint (`meta`: its meta.json), mapped; throws (naming the file)
// when one lacks a tensor of the layout or holds it in another shape. With `verify`, the
// shards' chunk checksums are checked as the state is read (io/shard_checks.h: a chunk hashed
// by the first read that touches it, so each byte comes from the disk once) and check_rest()
// checks the rest. Kinds index kStateKinds: 0 the masters, 1 AdamW m, 2 AdamW v.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& ckpt, const Json& meta, bool verify = false);

  // Elements [begin, end) of one unit of `table` of one kind (padding zero), gathered tensor
  // by tensor in pieces of at most 64 MiB, copied in parallel (each read ahead, its pages
  // dropped after use), so that a large tensor (the embedding) is read by every thread too.
  void read_range(int kind, const ParamTable& table, int unit, int64_t begin, int64_t end, float* out) const;
  // Every unit of `table` of one kind.
  HostUnits read(int kind, const ParamTable& table) const;

  // With `verify`: the first checksum mismatch in the chunks read so far (empty: none).
  std::string checksum_error() const;
  // With `verify`: checks every chunk not read yet, on a few threads (beside the reads, which
  // go on), waits for those being checked by the reads, and returns checksum_error(). A shard
  // saved before chunk checksums were recorded has its whole file hashed here instead.
  std::string check_rest() const;

 private:
  // Elements [offset, offset + n) of saved unit `unit` of one kind, across shard files.
  void copy(int kind, int unit, int64_t offset, int64_t n, float* out) const;

  int world_ = 1;
  std::vector<int64_t> padded_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::unique_ptr<ShardChecks>> checks_;  // per file with `verify`; null: none recorded
  Json shards_;  // meta.json's records of the files
  std::map<std::string, std::pair<int, int64_t>> place_;  // tensor name -> saved unit, offset
};

}  // namespace anvil
