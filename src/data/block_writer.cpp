// The block writers of a packed file: see data/block_writer.h.
#include "data/block_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.h"
#include "core/fs.h"
#include "data/packing.h"

namespace anvil {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    ANVIL_ENSURE(w > 0, kIo, path, ": write failed (", errno_text(), ")");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void BlockSink::write_block(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels) {
  write_all(fd_, ids.data(), seq_ * sizeof(int32_t), path_);
  if (with_labels_) write_all(fd_, labels.data(), seq_ * sizeof(int32_t), path_);
  ++blocks_;
}

void WrappedWriter::append(const TokenizedRow& row) {
  carry_ids_.insert(carry_ids_.end(), row.ids.begin(), row.ids.end());
  if (with_labels_) carry_labels_.insert(carry_labels_.end(), row.labels.begin(), row.labels.end());
  size_t used = 0;
  while (carry_ids_.size() - used >= seq_) {
    const auto from = static_cast<std::ptrdiff_t>(used), to = static_cast<std::ptrdiff_t>(used + seq_);
    ids_.assign(carry_ids_.begin() + from, carry_ids_.begin() + to);
    if (with_labels_) labels_.assign(carry_labels_.begin() + from, carry_labels_.begin() + to);
    write_block(ids_, labels_);
    used += seq_;
  }
  carry_ids_.erase(carry_ids_.begin(), carry_ids_.begin() + static_cast<std::ptrdiff_t>(used));
  if (with_labels_)
    carry_labels_.erase(carry_labels_.begin(), carry_labels_.begin() + static_cast<std::ptrdiff_t>(used));
}

BinWriter::BinWriter(int fd, const std::string& path, int64_t seq_len, bool with_labels, bool split, int32_t pad_id)
    : BlockSink(fd, path, seq_len, with_labels), split_(split), pad_id_(pad_id) {}

void BinWriter::append(const TokenizedRow& row) {
  window_ids_.push_back(row.ids);
  window_splits_.push_back(row.pair_split);
  ANVIL_ENSURE(row.pair_split == 0 || row.ids.size() <= seq_, kInternal, "a preference pair longer than a block");
  if (with_labels_) window_labels_.push_back(row.labels);
  if (static_cast<int64_t>(window_ids_.size()) == kBinWindowRows) pack_window();
}

void BinWriter::pack_window() {
  std::vector<int64_t> lengths;
  const auto seq = static_cast<int64_t>(seq_);
  for (const auto& ids : window_ids_) {
    const auto n = static_cast<int64_t>(ids.size());
    lengths.push_back(n);
    stats_.empty_rows += n == 0;
    if (n <= seq) continue;
    if (split_) {
      ++stats_.split_rows;
    } else {
      ++stats_.dropped_rows;
      stats_.dropped_tokens += n - seq;
    }
  }
  for (const Bin& bin : pack_best_fit(lengths, seq, split_)) write_bin(bin);
  window_ids_.clear();
  window_labels_.clear();
  window_splits_.clear();
}

void BinWriter::write_bin(const Bin& bin) {
  ids_.clear();
  labels_.clear();
  first_document_.push_back(static_cast<int64_t>(lengths_.size()));
  for (const Piece& p : bin) {
    const auto b = static_cast<std::ptrdiff_t>(p.begin), e = static_cast<std::ptrdiff_t>(p.begin + p.length);
    const auto& row_ids = window_ids_[static_cast<size_t>(p.row)];
    ids_.insert(ids_.end(), row_ids.begin() + b, row_ids.begin() + e);
    if (with_labels_) {
      const auto& row_labels = window_labels_[static_cast<size_t>(p.row)];
      labels_.insert(labels_.end(), row_labels.begin() + b, row_labels.begin() + e);
    }
    const int64_t split = window_splits_[static_cast<size_t>(p.row)];
    if (split > 0) lengths_.push_back(static_cast<int32_t>(split));  // the pair's chosen, then its rejected
    lengths_.push_back(static_cast<int32_t>(p.length - split));
    stats_.documents += split > 0 ? 2 : 1;
  }
  stats_.real_tokens += static_cast<int64_t>(ids_.size());
  ids_.resize(seq_, pad_id_);
  if (with_labels_) labels_.resize(seq_, kIgnoreIndex);
  write_block(ids_, labels_);
}

void BinWriter::finish() {
  if (!window_ids_.empty()) pack_window();
  first_document_.push_back(static_cast<int64_t>(lengths_.size()));
  const off_t at = ::lseek(fd_, 0, SEEK_CUR);
  ANVIL_ENSURE(at >= 0, kIo, path_, ": seek failed (", errno_text(), ")");
  const uint64_t pad = (8 - static_cast<uint64_t>(at) % 8) % 8;
  const char zeros[8] = {};
  write_all(fd_, zeros, pad, path_);
  documents_offset_ = static_cast<uint64_t>(at) + pad;
  write_all(fd_, first_document_.data(), first_document_.size() * sizeof(int64_t), path_);
  write_all(fd_, lengths_.data(), lengths_.size() * sizeof(int32_t), path_);
}

}  // namespace anvil
