// Random training blocks for tests that run anvil train: `rows` blocks of `cols` token ids
// below `vocab` (mt19937 seeded with `seed`, each id rng() % vocab), written as the
// input_ids safetensors file that --data takes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace anvil::testing {

inline void write_token_blocks(const std::string& file, int64_t rows, int64_t cols, unsigned seed,
                               int64_t vocab = 1000) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(static_cast<size_t>(rows * cols));
  for (auto& x : ids) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {rows, cols}, ids.data());
  w.write(file);
}

}  // namespace anvil::testing
