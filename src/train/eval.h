// Evaluation: the token-weighted mean loss over a whole set of blocks, on all ranks, with
// no gradients (Trainer::forward_loss: the forward and the loss only; no gradient buffer,
// no optimizer state and no data order is touched, so training goes on bit for bit); when
// it is due, how many blocks it reads (--eval-max-blocks), and its progress lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "comm/comm.h"
#include "train/config.h"
#include "train/dpo_reference.h"
#include "train/trainer.h"

namespace anvil {

struct EvalResult {
  double loss = 0;      // global summed token loss / global count of target tokens (dpo: the mean pair loss)
  int64_t tokens = 0;   // target tokens, all ranks (dpo: pairs)
  DpoSums dpo;          // dpo: the sums over the eval set's pairs (TRL's metrics)
  int64_t blocks = 0;   // the eval set's size
  double seconds = 0;
};

// append(block, batch) appends the ids (and labels, if any) of block `block` in [0, blocks).
// Micro-batch k of rank r holds blocks [(k * world + r) * B, ... + B); every rank runs the
// same number of micro-batches (FSDP gathers weights collectively), slots past the end are
// padding blocks with no target. The sums add micro-batches in order, then ranks in rank
// order: the result is the same on every rank and repeats bit for bit.
// on_progress (optional) sees the blocks done so far (this rank's share times the ranks)
// after each round. reference (--objective dpo): the eval set's reference log-probs; the
// pairs' DPO loss and metrics are evaluated (Trainer::pair_logps) instead of token losses.
EvalResult evaluate(Trainer& trainer, Comm* comm, int64_t blocks, int64_t micro_batch, int64_t seq_len,
                    const std::function<void(int64_t, TokenBatch&)>& append,
                    const std::function<void(int64_t)>& on_progress = {}, const ReferenceLogps* reference = nullptr);

// The blocks an evaluation reads of a set of `size`: all, or the first --eval-max-blocks.
int64_t eval_blocks(const EvalSection& e, int64_t size);
// Whether step `step` ends with an evaluation (every --eval-every steps, and the last).
bool eval_due(const TrainConfig& c, int64_t step);
// How many evaluations come after step `step`.
int64_t evals_after(const TrainConfig& c, int64_t step);

// A line "eval: k/n blocks (p%), ETA h:mm:ss" every 10 seconds while an evaluation runs
// (on: rank 0).
class EvalProgressLog {
 public:
  EvalProgressLog(bool on, int64_t blocks);
  void update(int64_t done);

 private:
  bool on_;
  int64_t blocks_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace anvil
