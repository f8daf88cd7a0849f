// Rows held out of the training rows for evaluation (--eval-fraction F, --eval-rows N): each
// row's index among all rows read (in file order, bad rows counted) is hashed with the
// seed (splitmix64); with a fraction a row is held out when its hash falls in the lowest F
// of the range, with a count the N rows of the lowest hashes are (the rows are counted
// first). The training side packs the others: the two sides are disjoint, together they are
// the data, and the same seed makes the same split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/row_shapes.h"  // ColumnMap

namespace anvil {

struct RowHoldout {
  double fraction = 0;    // --eval-fraction, in [0, 1)
  int64_t rows = 0;       // --eval-rows (exclusive with fraction)
  uint64_t seed = 0;
  bool held_out = false;  // this side: the held-out rows (evaluation), else the rest (training)
  bool any() const { return fraction > 0 || rows > 0; }
};

// Which rows one side of a holdout keeps.
class HoldoutRule {
 public:
  // Counts the rows of `files` when h.rows is set (kInvalidInput when they are not more).
  static HoldoutRule make(const RowHoldout& h, const std::vector<std::string>& files, const ColumnMap& columns = {});
  // Row `index` (among all rows read, in order) belongs to this side.
  bool keeps(int64_t index) const;

 private:
  bool all_ = true;    // no holdout: every row
  bool none_ = false;  // a fraction too small to hold out any row
  bool held_out_ = false;
  uint64_t seed_ = 0;
  uint64_t threshold_ = 0;  // held out: hash <= threshold_
};

}  // namespace anvil
