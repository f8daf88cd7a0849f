// Writers of the blocks of a packed file (data/packing.h says the file's layout): rows go in
// as they are tokenized, in order, and blocks of seq_len tokens come out to the file.
//
// WrappedWriter: the wrapped packing, rows concatenated and cut every seq_len tokens (what is
// left waits for the next row; the end's remainder is dropped). BinWriter: best-fit-decreasing
// bins of each window of kBinWindowRows rows (data/bin_packing.h); each bin is one block, its
// documents (rows, or pieces of rows) then padding up to seq_len: ids pad_id, labels -100. It
// keeps each block's document lengths, written after the blocks by finish(). A preference pair
// (TokenizedRow::pair_split) is packed as one row, never split or cut (the caller checks it fits),
// and recorded as its two documents.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/bin_packing.h"

namespace anvil {

struct TokenizedRow;

// Writes n bytes at the file's position, retrying short writes; kIo on failure.
void write_all(int fd, const void* data, size_t n, const std::string& path);

// What packing made, beyond the blocks: counted by BinWriter (a wrapped file has no documents).
struct BinStats {
  int64_t documents = 0;       // rows and pieces of split rows, one per run of positions
  int64_t real_tokens = 0;     // tokens of documents (the rest of the blocks is padding)
  int64_t split_rows = 0;      // bfd-split: rows longer than seq_len, split into pieces
  int64_t dropped_rows = 0;    // bfd: rows longer than seq_len, cut there
  int64_t dropped_tokens = 0;  // bfd: the tokens cut off those rows
  int64_t empty_rows = 0;      // rows of no tokens (no document)
};

class BlockSink {
 public:
  virtual ~BlockSink() = default;
  virtual void append(const TokenizedRow& row) = 0;
  // After the last row: any blocks still held, then what follows the blocks.
  virtual void finish() = 0;
  int64_t blocks() const { return blocks_; }

 protected:
  BlockSink(int fd, const std::string& path, int64_t seq_len, bool with_labels)
      : fd_(fd), path_(path), seq_(static_cast<size_t>(seq_len)), with_labels_(with_labels) {}
  // Writes one block: ids, then labels when the file holds them.
  void write_block(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels);

  int fd_;
  const std::string& path_;
  size_t seq_;
  bool with_labels_;
  int64_t blocks_ = 0;
};

class WrappedWriter : public BlockSink {
 public:
  WrappedWriter(int fd, const std::string& path, int64_t seq_len, bool with_labels)
      : BlockSink(fd, path, seq_len, with_labels) {}
  void append(const TokenizedRow& row) override;
  void finish() override {}

 private:
  std::vector<int32_t> carry_ids_, carry_labels_, ids_, labels_;
};

class BinWriter : public BlockSink {
 public:
  // split: bfd-split, else bfd. pad_id: the ids of padding.
  BinWriter(int fd, const std::string& path, int64_t seq_len, bool with_labels, bool split, int32_t pad_id);
  void append(const TokenizedRow& row) override;
  // Packs the last window, then writes the document table; documents_offset() says where it starts.
  void finish() override;
  const BinStats& stats() const { return stats_; }
  uint64_t documents_offset() const { return documents_offset_; }

 private:
  void pack_window();
  void write_bin(const Bin& bin);

  bool split_;
  int32_t pad_id_;
  std::vector<std::vector<int32_t>> window_ids_, window_labels_;
  std::vector<int64_t> window_splits_;  // each row's TokenizedRow::pair_split (a pair: two documents)
  std::vector<int32_t> ids_, labels_;
  std::vector<int64_t> first_document_;  // per block, then one past the last: index into lengths_
  std::vector<int32_t> lengths_;         // every document's length, block after block
  BinStats stats_;
  uint64_t documents_offset_ = 0;
};

}  // namespace anvil
