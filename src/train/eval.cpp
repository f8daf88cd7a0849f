// Evaluation, its schedule and its progress lines: see train/eval.h.
#include "train/eval.h"

#include <algorithm>

#include "core/duration.h"
#include "core/error.h"
#include "core/log.h"

namespace anvil {

EvalResult evaluate(Trainer& trainer, Comm* comm, int64_t blocks, int64_t micro_batch, int64_t seq_len,
                    const std::function<void(int64_t, TokenBatch&)>& append,
                    const std::function<void(int64_t)>& on_progress, const ReferenceLogps* reference) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t world = trainer.data_world(), rank = trainer.data_rank();  // a context-parallel group: one
  const int64_t per_round = micro_batch * world;
  const int64_t rounds = (blocks + per_round - 1) / per_round;
  double sum = 0;
  int64_t tokens = 0;
  DpoSums pairs;
  const DpoSection& dpo = trainer.settings().config.dpo;
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
    if (reference) {
      const std::vector<PairLogps> lp = trainer.pair_logps(batch);
      for (size_t p = 0; p < lp.size(); ++p) {
        PairLogps x = lp[p];
        const auto i = static_cast<size_t>(batch.pairs[p].index);
        x.ref_chosen = reference->chosen[i];
        x.ref_rejected = reference->rejected[i];
        pairs.add(dpo, x, dpo_pair_loss(dpo, x).loss);
      }
    } else {
      const Trainer::LossSum s = trainer.forward_loss(batch);
      sum += s.sum;
      tokens += s.tokens;
    }
    if (on_progress) on_progress(std::min(blocks, (k + 1) * per_round));
  }
  EvalResult r;
  r.blocks = blocks;
  if (reference) {
    r.dpo = trainer.global_sums(pairs);
    ANVIL_ENSURE(r.dpo.pairs > 0, kInvalidInput, "the eval set has no preference pair");
    r.tokens = r.dpo.pairs;
    r.loss = r.dpo.loss / static_cast<double>(r.dpo.pairs);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  r.tokens = comm ? comm->host_sum(tokens, "eval tokens") : tokens;
  ANVIL_ENSURE(r.tokens > 0, kInvalidInput, "the eval set has no target tokens");
  r.loss = (comm ? comm->host_sum(sum, "eval loss") : sum) / static_cast<double>(r.tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int64_t eval_blocks(const EvalSection& e, int64_t size) { return e.max_blocks > 0 ? std::min(e.max_blocks, size) : size; }

bool eval_due(const TrainConfig& c, int64_t step) {
  return step == c.steps || (c.eval.every > 0 && step % c.eval.every == 0);
}

int64_t evals_after(const TrainConfig& c, int64_t step) {
  if (step >= c.steps) return 0;
  if (c.eval.every == 0) return 1;
  return c.steps / c.eval.every - step / c.eval.every + (c.steps % c.eval.every != 0 ? 1 : 0);
}

EvalProgressLog::EvalProgressLog(bool on, int64_t blocks)
    : on_(on), blocks_(blocks), start_(std::chrono::steady_clock::now()), last_(start_) {}

void EvalProgressLog::update(int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (!on_ || done >= blocks_ || now - last_ < std::chrono::seconds(10)) return;
  last_ = now;
  const double spent = std::chrono::duration<double>(now - start_).count();
  log_info("eval: ", done, "/", blocks_, " blocks (", 100 * done / blocks_, "%), ETA ",
           format_hms(spent / static_cast<double>(done) * static_cast<double>(blocks_ - done)));
}

}  // namespace anvil
