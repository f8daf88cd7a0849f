// The inference forward of the model: a KV cache, then rows of new tokens.
//
// The same block as Transformer's (model/block.h), with two differences: attention reads
// and extends a KV cache (Ops::attention_cached) instead of attending within a fixed (B, T)
// block, and the residual stream runs in place, each residual add fused with the norm after
// it (Ops::add_rmsnorm_forward, the results of the two ops: fewer kernels per decode step;
// model/block.h's NormFusion). A call runs
// any set of rows, each a token of some sequence (its cache slot) at some position, so a
// prefill of prompts of different lengths (all their tokens, packed without padding) and
// a decode step (one row per sequence) are the same forward. Only the rows that need
// logits go through the final norm and the output projection, whose logits are F32.
//
// Decode steps repeat one shape, so where the backend can record (CUDA graphs) the second
// call of a shape in a row is recorded and later calls replay it; a call of another shape
// runs directly and drops the recordings (it may move the backend's scratch memory).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "model/activations.h"
#include "model/block.h"
#include "model/config.h"
#include "model/params.h"
#include "model/transformer.h"
#include "ops/ops.h"

namespace anvil {

// Compute copies of every unit, resident on the ops' device (F32 on the CPU, BF16 on
// CUDA): the UnitSource of inference. Gradients are not available.
class ResidentWeights final : public UnitSource {
 public:
  ResidentWeights(const ParamTable& table, Ops& ops, const std::vector<std::vector<float>>& units);
  ~ResidentWeights() override;
  ResidentWeights(const ResidentWeights&) = delete;
  ResidentWeights& operator=(const ResidentWeights&) = delete;

  Tensor weights(int unit) override { return units_[static_cast<size_t>(unit)]; }
  void release(int) override {}
  Tensor grads(int unit) override;
  void grads_ready(int) override {}
  int64_t bytes() const { return bytes_; }

 private:
  Ops& ops_;
  std::vector<Tensor> units_;
  int64_t bytes_ = 0;
};

// One forward's rows (host). Row i is token ids[i] of the sequence in cache slot slots[i],
// at position positions[i]; logits are wanted for the rows listed in `outputs`.
struct DecodeRows {
  std::vector<int32_t> ids, slots, positions;
  std::vector<int32_t> outputs;
  void clear() {
    ids.clear();
    slots.clear();
    positions.clear();
    outputs.clear();
  }
  void add(int32_t id, int32_t slot, int32_t position) {
    ids.push_back(id);
    slots.push_back(slot);
    positions.push_back(position);
  }
};

class Decoder {
 public:
  Decoder(const ModelConfig& config, const ParamTable& table, Ops& ops, UnitSource& weights);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // A KV cache of `slots` sequences of up to `positions` tokens each (kept when the current
  // one is at least as large). Its contents are undefined until rows are written.
  void reserve_cache(int64_t slots, int64_t positions);
  int64_t cache_slots() const { return slots_; }
  int64_t cache_positions() const { return positions_; }
  int64_t cache_bytes() const;

  // Runs the rows and writes the logits of rows.outputs, in order, to `logits` (host,
  // outputs.size() x vocab_size F32).
  void forward(const DecodeRows& rows, std::vector<float>& logits);
  // The same, keeping only each output row's largest logit's index (the first on ties),
  // found on the device: greedy decoding moves outputs.size() ids, not the logits.
  void forward_greedy(const DecodeRows& rows, std::vector<int32_t>& ids);

  // Whether repeated shapes are recorded and replayed (where the backend can); on by default.
  void set_recording(bool on) { recording_ = on; }

 private:
  struct Buffers {  // views of the first R rows / n outputs of the row buffers
    Tensor ids, slots, positions, outputs, cos, sin;
  };
  class CachedAttention;
  Tensor make(Shape shape, DType dtype, std::vector<void*>& owner);
  Activations rows_of(int64_t rows) const;  // the first `rows` rows of the block's buffers
  void reserve_rows(int64_t rows, int64_t outputs);
  Buffers upload(const DecodeRows& rows);
  void compute(const DecodeRows& rows, bool greedy);  // upload, then run or replay
  void run(const Buffers& b, int64_t rows, int64_t outputs, bool greedy);  // device work only
  void free_all(std::vector<void*>& owner);

  const ModelConfig& c_;
  const ParamTable& table_;
  Ops& ops_;
  UnitSource& weights_;
  DType cd_;
  std::vector<float> inv_freq_;
  bool recording_ = true;

  int64_t slots_ = 0, positions_ = 0;
  std::vector<void*> cache_buffers_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer, (S, KV, P, hd)

  int64_t rows_cap_ = 0, outputs_cap_ = 0;
  std::vector<void*> row_buffers_;
  Tensor staging_;  // ids, slots, positions, outputs (I32) then cos, sin (F32): one upload
  static int64_t rope_at(int64_t rows, int64_t outputs);  // the first element of cos
  Activations acts_;  // the table's decode_buffers (model/activations.h), rows_cap_ rows each
  Tensor last_, last_norm_, last_rstd_, logits_, argmax_;
  Fp8Slots no_slots_;
  BlockLinears linears_;  // plain (no FP8)
  MlpTiles untiled_;
  Block block_;

  std::map<std::tuple<int64_t, int64_t, bool>, int> seen_;  // (rows, outputs, greedy) -> recording, -1: seen once
};

}  // namespace anvil
