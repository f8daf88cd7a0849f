// Evaluation: the token-weighted mean loss over a whole set of blocks, on all ranks, with
// no gradients (Trainer::forward_loss: the forward and the loss only; no gradient buffer,
// no optimizer state and no data order is touched, so training goes on bit for bit).
#pragma once

#include <cstdint>
#include <functional>

#include "comm/comm.h"
#include "train/trainer.h"

namespace anvil {

struct EvalResult {
  double loss = 0;      // global summed token loss / global count of target tokens
  int64_t tokens = 0;   // target tokens, all ranks
  int64_t blocks = 0;   // the eval set's size
  double seconds = 0;
};

// append(block, batch) appends the ids (and labels, if any) of block `block` in [0, blocks).
// Micro-batch k of rank r holds blocks [(k * world + r) * B, ... + B); every rank runs the
// same number of micro-batches (FSDP gathers weights collectively), slots past the end are
// padding blocks with no target. The sums add micro-batches in order, then ranks in rank
// order: the result is the same on every rank and repeats bit for bit.
EvalResult evaluate(Trainer& trainer, Comm* comm, int64_t blocks, int64_t micro_batch, int64_t seq_len,
                    const std::function<void(int64_t, TokenBatch&)>& append);

}  // namespace anvil
