// Held-out rows for evaluation: see data/holdout.h.
#include "data/holdout.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "data/source.h"

namespace anvil {
namespace {

uint64_t row_hash(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t count_rows(const std::vector<std::string>& files, const ColumnMap& columns) {
  int64_t n = 0;
  for (const std::string& f : files) {
    const std::unique_ptr<RowReader> reader = RowReader::open(f, columns);
    while (const std::unique_ptr<RowBatch> batch = reader->next(4096, 16u << 20))
      n += static_cast<int64_t>(batch->size());
  }
  return n;
}

}  // namespace

HoldoutRule HoldoutRule::make(const RowHoldout& h, const std::vector<std::string>& files, const ColumnMap& columns) {
  HoldoutRule r;
  if (!h.any()) return r;
  r.all_ = false;
  r.held_out_ = h.held_out;
  r.seed_ = h.seed;
  if (h.rows == 0) {  // the lowest fraction of the hashes' range
    const long double top = std::ldexp(static_cast<long double>(h.fraction), 64);
    r.none_ = top < 1;
    r.threshold_ = r.none_ ? 0 : static_cast<uint64_t>(top - 1);
    return r;
  }
  const int64_t total = count_rows(files, columns);
  ANVIL_ENSURE(h.rows < total, kInvalidInput, "--eval-rows ", h.rows, " leaves no training rows: the data has ",
               total, " rows (hold out fewer)");
  std::vector<uint64_t> hashes(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) hashes[static_cast<size_t>(i)] = row_hash(h.seed, i);
  std::nth_element(hashes.begin(), hashes.begin() + (h.rows - 1), hashes.end());
  r.threshold_ = hashes[static_cast<size_t>(h.rows - 1)];
  return r;
}

bool HoldoutRule::keeps(int64_t index) const {
  if (all_) return true;
  const bool held = !none_ && row_hash(seed_, index) <= threshold_;
  return held == held_out_;
}

}  // namespace anvil
