#include "train/eval.h"

#include <chrono>

#include "core/error.h"

namespace anvil {

EvalResult evaluate(Trainer& trainer, Comm* comm, int64_t blocks, int64_t micro_batch, int64_t seq_len,
                    const std::function<void(int64_t, TokenBatch&)>& append) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  const int64_t per_round = micro_batch * world;
  const int64_t rounds = (blocks + per_round - 1) / per_round;
  double sum = 0;
  int64_t tokens = 0;
  for (int64_t k = 0; k < rounds; ++k) {
    TokenBatch batch;
    for (int64_t b = 0; b < micro_batch; ++b) {
      const int64_t block = (k * world + rank) * micro_batch + b;
      if (block < blocks) {
        append(block, batch);
        continue;
      }
      // Padding past the end of the set: ids 0, no target; after bfd blocks, one more document.
      if (batch.labels.empty()) batch.labels = batch.ids;  // the real blocks' labels are their ids
      batch.ids.resize(batch.ids.size() + static_cast<size_t>(seq_len), 0);
      batch.labels.resize(batch.ids.size(), -100);
      if (!batch.positions.empty())
        for (int64_t t = 0; t < seq_len; ++t) batch.positions.push_back(t);
      batch.padding += seq_len;
    }
    const Trainer::LossSum s = trainer.forward_loss(batch);
    sum += s.sum;
    tokens += s.tokens;
  }
  EvalResult r;
  r.blocks = blocks;
  r.tokens = comm ? comm->host_sum(tokens, "eval tokens") : tokens;
  ANVIL_ENSURE(r.tokens > 0, kInvalidInput, "the eval set has no target tokens");
  r.loss = (comm ? comm->host_sum(sum, "eval loss") : sum) / static_cast<double>(r.tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace anvil
