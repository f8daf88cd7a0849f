// Packing names and best-fit-decreasing bins: see data/bin_packing.h.
#include "data/bin_packing.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

#include "core/error.h"

namespace anvil {

Packing parse_packing(const std::string& name) {
  if (name == "bfd-split" || name == "bfd_split") return Packing::kBfdSplit;
  if (name == "bfd") return Packing::kBfd;
  if (name == "wrapped") return Packing::kWrapped;
  raise(ErrorKind::kUsage, "unknown packing '", name, "' (bfd-split, bfd or wrapped)");
}

const char* packing_name(Packing p) {
  switch (p) {
    case Packing::kBfdSplit: return "bfd-split";
    case Packing::kBfd: return "bfd";
    case Packing::kWrapped: return "wrapped";
  }
  return "?";
}

namespace {

// The window's pieces in row order: each non-empty row whole, cut (bfd) or split (bfd-split) at seq_len.
std::vector<Piece> pieces_of(const std::vector<int64_t>& lengths, int64_t seq_len, bool split) {
  std::vector<Piece> pieces;
  for (size_t r = 0; r < lengths.size(); ++r) {
    const int64_t n = lengths[r];
    const auto row = static_cast<int64_t>(r);
    if (!split && n > 0) pieces.push_back({row, 0, std::min(n, seq_len)});
    if (split)
      for (int64_t b = 0; b < n; b += seq_len) pieces.push_back({row, b, std::min(seq_len, n - b)});
  }
  return pieces;
}

}  // namespace

std::vector<Bin> pack_best_fit(const std::vector<int64_t>& lengths, int64_t seq_len, bool split) {
  ANVIL_ENSURE(seq_len >= 1, kUsage, "packing: the sequence length must be at least 1, got ", seq_len);
  const std::vector<Piece> pieces = pieces_of(lengths, seq_len, split);
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return pieces[a].length > pieces[b].length; });
  std::vector<Bin> bins;
  // The open bins by free room (> 0), each room's bins in the order they reached it.
  std::map<int64_t, std::deque<size_t>> by_room;
  for (const size_t i : order) {
    const Piece& piece = pieces[i];
    int64_t room = seq_len;
    size_t bin = bins.size();
    const auto fit = by_room.lower_bound(piece.length);
    if (fit != by_room.end()) {
      room = fit->first;
      bin = fit->second.front();
      fit->second.pop_front();
      if (fit->second.empty()) by_room.erase(fit);
    } else {
      bins.emplace_back();
    }
    bins[bin].push_back(piece);
    room -= piece.length;
    if (room > 0) by_room[room].push_back(bin);
  }
  return bins;
}

}  // namespace anvil
