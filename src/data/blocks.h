// The blocks a run trains on: the data section of the run's config, the sources of token
// blocks (BlockSource), the order the steps read them in (BatchOrder) and where that order
// stands (DataPosition, what a checkpoint records).
//
// A source is token ids [N, T] from a safetensors file (input_ids), a packed block file made
// by `anvil prepare`, or rows (JSONL, Parquet, a folder, a hub dataset id: data/source.h)
// prepared on the fly into the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/objective.h"
#include "data/packing.h"
#include "data/sampler.h"
#include "io/safetensors.h"

namespace anvil {

// The data section: what the steps read, how rows are packed and how much each step takes.
struct DataSection {
  std::string source;           // --data: safetensors, a prepared block file/folder, or rows
  std::string split = "train";  // hub dataset ids: the split and config read
  std::string config;
  std::string tokenizer;  // for rows: folder with tokenizer.json (default: the model's)
  std::string cache;      // where rows are prepared (default: ~/.cache/anvil)
  int64_t seq_len = 0;    // tokens per block; 0: from the data
  Packing packing = Packing::kBfdSplit;  // how rows are packed into blocks (data/bin_packing.h)
  int64_t micro_batch = 1, grad_accum = 1;  // sequences per micro-batch, micro-batches per step
  bool shuffle = true;
  bool assistant_only_loss = false;
  bool completion_only_loss = true;  // prompt-completion rows: loss on the completion only (as TRL)
  std::string columns;               // renamed columns: messages=conversations,... (data/row_shapes.h)
  bool skip_bad_rows = false;
  bool reset_position = false;  // a resumed run reads the blocks from the start (--reset-data-position)
  Objective objective = Objective::kSft;  // dpo: the rows are preference pairs
  int64_t max_length = 0;  // dpo: each sequence of a pair cut to its first N tokens (TRL's max_length); 0: none
  bool operator==(const DataSection&) const = default;
};

enum class DataKind { kSafetensors, kPacked, kRows };
DataKind data_kind(const std::string& source);
// Where rows are prepared: --data-cache, else $XDG_CACHE_HOME/anvil, else ~/.cache/anvil.
std::string data_cache_dir(const DataSection& d);

// Token blocks of one micro-batch: ids (B*T) and, optionally, labels (B*T, -100 where no
// loss is wanted; empty: labels = ids). Position t is trained to predict label t+1.
// positions (B*T, bfd and bfd-split only; empty: wrapped, each sequence 0..T-1): each token's
// position in its document, 0 at a document's first token; a block's padding after its last
// document counts as one more document (positions 0, 1, ..., ids the pad id, labels -100).
// padding: how many of the ids are padding; the rest are real tokens.
// pairs (preference data, DPO): each pair's chosen and rejected documents, as offsets into
// ids, and the pair's index among the data's pairs (its reference log-probs' row).
struct PreferencePair {
  int64_t index = 0;
  int64_t chosen_begin = 0, chosen_length = 0, rejected_begin = 0, rejected_length = 0;
};
struct TokenBatch {
  std::vector<int64_t> ids;
  std::vector<int64_t> labels;
  std::vector<int64_t> positions;
  std::vector<PreferencePair> pairs;
  int64_t padding = 0;
  int64_t real_tokens() const { return static_cast<int64_t>(ids.size()) - padding; }
};

// Who prepares rows in a group of processes: the `first` one prepares, then `barrier`
// (empty for a single process) lets the others open what it wrote.
struct PrepareTurn {
  bool first = true;
  std::function<void()> barrier;
};

// The blocks of `source` (rows packed into blocks of d.seq_len with d's tokenizer and
// options; `split` empty: d.split).
class BlockSource {
 public:
  // holdout: the side of the rows held out for evaluation this source packs (none: all rows).
  BlockSource(const DataSection& d, const std::string& source, const std::string& split, const std::string& model_dir,
              const PrepareTurn& turn, const RowHoldout& holdout = RowHoldout());

  int64_t size() const { return n_; }
  int64_t seq_len() const { return t_; }
  // The packing of the blocks (a prepared file's own; safetensors blocks are wrapped).
  Packing packing() const { return packed_ ? packed_->packing() : Packing::kWrapped; }
  // Preference pairs (DPO): how many the blocks hold in all (0: not preference data).
  int64_t pairs() const;
  // The prepared block file (packed.bin) and its cache key (what it was made from); rows and
  // prepared folders only.
  std::string prepared_file() const;
  std::string prepared_key() const;
  // One line on how the blocks were packed (packing_summary; safetensors: the blocks' shape).
  std::string summary() const;
  // Appends block `block`'s ids; labels and positions when the blocks have them (bfd: always).
  void append(int64_t block, TokenBatch& b) const;

 private:
  void open_safetensors(const std::string& source);

  std::unique_ptr<SafetensorsFile> file_;
  std::vector<int64_t> ids_;
  std::unique_ptr<PackedDataset> packed_;
  int64_t n_ = 0, t_ = 0;
};

// Where the data order stands after `step` steps: the epoch, and the blocks (summed over
// ranks) already trained on in that epoch, blocks of the packing named (other packings make
// other blocks: the position means nothing in them).
struct DataPosition {
  int64_t epoch = 0;
  int64_t samples_in_epoch = 0;
  std::string packing = "wrapped";  // checkpoints before the bfd packings: wrapped
};

// The blocks each step reads on this rank: PyTorch's DistributedSampler with set_epoch; an
// epoch ends when a whole step no longer fits, as a DataLoader with drop_last does. A
// checkpoint records the epoch and the blocks (all ranks) trained on in it, so a resumed
// run skips them, with any number of ranks.
class BatchOrder {
 public:
  BatchOrder(const DataSection& d, int64_t seed, const BlockSource& blocks, int world, int rank);

  // Continue after a checkpoint's data position. With d.reset_position the blocks start over
  // whatever the position; without it a position of another packing is refused (kUsage).
  void resume_at(const DataPosition& p, int64_t step);
  // The i-th block of step `step` (1-based) on this rank.
  int64_t block(int64_t step, int64_t i);
  // Where the data stands after `step` steps (what a checkpoint records).
  DataPosition after(int64_t step) const;

 private:
  DistributedSampler sampler_;
  Packing packing_;
  bool reset_position_;
  int world_;
  int64_t per_step_, epoch_len_;
  int64_t first_index_ = 0, start_ = 0, epoch_ = -1;
  std::vector<int64_t> mine_;
};

}  // namespace anvil
