// The packings a run can train with, and best-fit-decreasing bins: TRL's
// pack_dataset(strategy="bfd" | "bfd_split" | "wrapped"), which a user switching from TRL expects.
//
// wrapped: every row's tokens concatenated and cut into blocks of seq_len.
// bfd: each row whole in one sequence of at most seq_len tokens (a longer row cut at seq_len, the
// rest dropped); bins by best-fit decreasing. bfd-split: the same, a longer row split into pieces
// of at most seq_len (full pieces first, the remainder last) that are packed like rows.
//
// The bins are TRL's _pack_bfd on one batch of its batched map (kBinWindowRows rows, the
// datasets default): empty rows left out, the pieces taken longest first (ties in row order),
// each into the open bin whose free room is the smallest that holds it (of those, the one that
// reached that room first), else into a new bin. Bins in the order they were opened, each with
// its pieces in the order they went in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil {

enum class Packing { kBfdSplit, kBfd, kWrapped };

// "bfd-split" | "bfd" | "wrapped" (TRL spells the first "bfd_split": accepted too).
Packing parse_packing(const std::string& name);
const char* packing_name(Packing p);

// Rows per packing window: TRL packs each batch of datasets' map (1000 rows) on its own.
constexpr int64_t kBinWindowRows = 1000;

// Tokens [begin, begin + length) of row `row` of the window.
struct Piece {
  int64_t row = 0, begin = 0, length = 0;
};
using Bin = std::vector<Piece>;

// The bins of one window's rows of `lengths` tokens (0 allowed: left out); split: bfd-split,
// else bfd (a longer row's piece is its first seq_len tokens).
std::vector<Bin> pack_best_fit(const std::vector<int64_t>& lengths, int64_t seq_len, bool split);

}  // namespace anvil
