#include "ops/cross_entropy_chunks.h"

#include <algorithm>

namespace anvil {
namespace {

constexpr int64_t kBudget = int64_t{512} << 20;  // logits and dlogits together

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

CrossEntropyChunks cross_entropy_chunks(int64_t n, int64_t vocab) {
  CrossEntropyChunks c;
  c.grad_ld = round_up(vocab, 8);
  // grad_rows * 2 * grad_ld + grad_rows / 4 * 4 * vocab <= budget
  int64_t rows = kBudget / (2 * c.grad_ld + vocab);
  rows = rows >= 64 ? rows / 64 * 64 : std::max<int64_t>(rows / 4 * 4, 1);
  c.grad_rows = std::max<int64_t>(std::min(rows, n), 1);
  c.logit_rows = std::min(c.grad_rows, std::max<int64_t>(rows / 4, 1));
  c.logits_bytes = round_up(c.logit_rows * vocab * 4, 256);
  c.grad_bytes = round_up(c.grad_rows * c.grad_ld * 2, 256);
  c.bytes = c.logits_bytes + c.grad_bytes + n * 4;
  return c;
}

}  // namespace anvil
