// From rows (JSONL or Parquet, data/source.h) to training blocks: the packings, assistant-only
// labels, the memory-mapped block file and its cache.
//
// Every row is rendered with the chat template ({"messages": [...]}) or taken as is
// ({"text": "..."}) and tokenized without added special tokens, rows in file order (files in
// the order given), then packed into blocks of seq_len tokens (data/bin_packing.h):
//   wrapped: all rows concatenated and cut every seq_len tokens, the remainder
//     dropped; a block runs across rows.
//   bfd, bfd-split (the default): TRL's best-fit-decreasing bins, each block whole documents
//     (rows, or pieces of rows longer than seq_len) then padding: ids the tokenizer's pad token
//     (else eos, else 0), labels -100.
// With assistant_only_loss, labels are the ids inside assistant turns
// (ChatTemplate::assistant_spans) and -100 elsewhere; with prompt-completion rows
// (data/row_shapes.h) and completion_only_loss, the ids of the completion; otherwise the
// labels are the ids themselves and are not stored.
//
// File (packed.bin): "ANVILPK1", a little-endian uint64 header length, the JSON header
// (format, packing, seq_len, num_blocks, has_labels, data_offset, block_stride, tokenizer and
// data hashes, counts), spaces up to data_offset (a multiple of 4096), then the blocks as int32:
// block b holds seq_len input ids followed, when has_labels, by seq_len labels.
// Format anvil-packed-v1 is a wrapped file (as every file before the bfd packings). Format
// anvil-packed-v2 (bfd, bfd-split) adds each block's documents after the blocks, at
// documents_offset (a multiple of 8): int64 first_document[num_blocks + 1] (block b's documents
// are [first_document[b], first_document[b + 1])), then int32 length[num_documents]; a block's
// tokens after its documents are padding. A file of preference pairs (header "preference": true)
// holds each pair as two documents of one block, chosen then rejected.
// The file is written under a temporary name and renamed: a reader never sees half of one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "data/bin_packing.h"
#include "data/chat_template.h"
#include "data/holdout.h"
#include "data/row_shapes.h"
#include "data/tokenizer.h"

namespace anvil {

constexpr int32_t kIgnoreIndex = -100;

struct TokenizedRow {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // filled only when RowOptions::labels
  std::string rendered;         // the chat rendering (messages rows only)
  // A preference pair (RowOptions::preference): ids are the chosen sequence's, then the
  // rejected's; the first pair_split of them are the chosen's. 0: not a pair.
  int64_t pair_split = 0;
  // A preference pair whose prompt alone holds RowOptions::max_length tokens: left out (no ids),
  // as TRL drops it (nothing of its completions would be kept).
  bool dropped = false;
};

// How rows become tokens and labels.
struct RowOptions {
  bool assistant_only_loss = false;
  bool completion_only_loss = true;  // prompt-completion rows: loss on the completion only (TRL's default)
  bool labels = false;    // labels are kept: with assistant_only_loss, or prompt-completion data (prompt_rows_first)
  std::string eos_token;  // appended to a plain completion that does not end with it (as TRL)
  ColumnMap columns;
  bool preference = false;  // DPO: every row a preference pair (and only those)
  // Preference pairs: each sequence (prompt + completion) cut to its first max_length tokens,
  // TRL's DPOConfig.max_length with truncation_mode "keep_start"; 0: none.
  int64_t max_length = 0;
};

// Turns one row (a JSONL line, or a RowBatch's row) into tokens: a chat, a text, or a prompt
// and its completion (data/row_shapes.h). A prompt-completion row is tokenized as TRL's
// SFTTrainer does: the prompt alone (a chat's with the generation prompt) and the prompt
// followed by its completion (a plain completion ending with the eos token); the completion
// starts where the two ids part. A preference pair (options.preference) is tokenized as TRL's
// DPOTrainer does (its _prepare_dataset): an implicit prompt split off, the eos token appended
// to plain chosen and rejected texts that lack it, then prompt, prompt + chosen and prompt +
// rejected tokenized (chats rendered, the prompt with the generation prompt); the completions
// start where the prompt's ids and the nearer of the two part, and only their tokens have
// labels. A malformed row throws kInvalidInput saying what is wrong
// (the caller adds where it is). Thread-safe.
class RowEncoder {
 public:
  // chat_template may be null when no row holds messages.
  RowEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, bool assistant_only_loss);
  RowEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, RowOptions options);
  void encode_line(std::string_view line, TokenizedRow& out) const;
  // Same, for a row already parsed.
  void encode_row(const OrderedJson& row, TokenizedRow& out) const;

 private:
  void encode_chat(const OrderedJson& messages, TokenizedRow& out) const;
  void encode_text(const std::string& text, TokenizedRow& out) const;
  void encode_prompt_completion(const ShapedRow& row, TokenizedRow& out) const;
  void encode_preference(const ShapedRow& row, TokenizedRow& out) const;
  const ChatTemplate& need_template(const char* what) const;

  const Tokenizer& tokenizer_;
  const ChatTemplate* template_;
  RowOptions o_;
};

// Whether the first row of the data is a prompt-completion row: its blocks then keep labels
// (the completion's) when completion_only_loss is on, as TRL decides from its first example.
bool prompt_rows_first(const std::vector<std::string>& files, const ColumnMap& columns);

// Labels for ids of `rendered`: the id where its first byte lies inside a span, else -100.
std::vector<int32_t> span_labels(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                 const std::vector<std::pair<size_t, size_t>>& spans);

// A packed block file, memory-mapped read-only. Move-only.
class PackedDataset {
 public:
  // path: a packed.bin file or the folder holding one.
  static PackedDataset open(const std::string& path);
  PackedDataset(PackedDataset&& other) noexcept;
  PackedDataset& operator=(PackedDataset&& other) noexcept;
  PackedDataset(const PackedDataset&) = delete;
  PackedDataset& operator=(const PackedDataset&) = delete;
  ~PackedDataset();

  int64_t num_blocks() const { return num_blocks_; }
  int64_t seq_len() const { return seq_len_; }
  bool has_labels() const { return has_labels_; }
  Packing packing() const { return packing_; }
  const int32_t* input_ids(int64_t block) const;  // (seq_len,)
  const int32_t* labels(int64_t block) const;     // (seq_len,): the ids themselves when !has_labels()
  // bfd, bfd-split: the lengths of the block's documents, in order (the rest is padding); wrapped: empty.
  std::span<const int32_t> documents(int64_t block) const;
  // bfd, bfd-split: the index of the block's first document among all the file's documents.
  int64_t first_document(int64_t block) const;
  // Preference pairs (DPO): documents 2k and 2k + 1 are pair k's chosen and rejected sequences,
  // always in one block.
  bool preference() const { return preference_; }
  const Json& header() const { return header_; }
  const std::string& path() const { return path_; }

 private:
  PackedDataset() = default;
  std::string path_;
  Json header_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const int32_t* blocks_ = nullptr;
  const int64_t* first_document_ = nullptr;  // v2: num_blocks + 1 entries
  const int32_t* document_lengths_ = nullptr;
  int64_t num_blocks_ = 0, seq_len_ = 0, stride_ = 0;
  bool has_labels_ = false;
  bool preference_ = false;
  Packing packing_ = Packing::kWrapped;

  void open_documents(size_t size);
};

struct PrepareOptions {
  std::string tokenizer;          // folder with tokenizer.json (and tokenizer_config.json for chats)
  std::vector<std::string> data;  // JSONL or Parquet files (resolve_data_source), packed in this order
  int64_t seq_len = 0;
  Packing packing = Packing::kBfdSplit;
  bool assistant_only_loss = false;
  bool completion_only_loss = true;  // prompt-completion rows: labels on the completion only
  std::string columns;               // --columns renames (data/row_shapes.h)
  RowHoldout holdout;                // rows held out for evaluation: this side's (data/holdout.h)
  bool skip_bad_rows = false;        // count and skip malformed rows instead of failing
  bool preference = false;           // DPO: preference pairs, each pair's two sequences in one block
  int64_t max_length = 0;            // preference pairs: RowOptions::max_length (--max-length)
};

// Tokenizes and packs o.data into out_dir/packed.bin on every core; returns its header.
Json prepare_packed(const PrepareOptions& o, const std::string& out_dir);

// The trainer's entry point: opens cache_dir/<key>/packed.bin when one was made from the
// same tokenizer, template, data contents and settings, else prepares it there first.
PackedDataset prepare_cached(const PrepareOptions& o, const std::string& cache_dir);

// The cache key of o (hashes the tokenizer files and every data file).
std::string prepare_key(const PrepareOptions& o);

// What a packed file's header says of its packing, in one line: for bfd and bfd-split the
// documents, sequences, real tokens, padding fraction, split and dropped rows.
std::string packing_summary(const Json& header);

}  // namespace anvil
