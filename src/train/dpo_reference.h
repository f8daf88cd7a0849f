// DPO's reference log-probs (train/dpo.h): each pair's chosen and rejected completion log-probs
// under the reference model, computed in one forward pass over the data before training and
// cached beside the prepared data, so that no second model is held while training.
//
// The reference is --ref-model, else the start model (the --model folder, or a preset's fresh
// weights of --seed: never a checkpoint's, so a resumed run uses the same reference). The cache
// file, ref-<key>.bin beside the data's packed.bin, is keyed by the data (its cache key, which
// hashes the rows, tokenizer and settings) and the reference (config.json's bytes and each
// weight file's name, size and modification time); a later run on the same data and reference
// reads it. Format: "ANVILREF", int64 pairs, then pairs x (chosen, rejected) float64.
#pragma once

#include <string>
#include <vector>

#include "data/blocks.h"
#include "train/config.h"
#include "train/open_run.h"

namespace anvil {

struct ReferenceLogps {
  std::vector<double> chosen, rejected;  // by pair index (PreferencePair::index)
};

// The reference log-probs of every pair of each source (the training data, then the eval
// data), read from their caches or computed by a Trainer of the reference built for the pass
// and dropped after it (every rank its share of the blocks; progress on rank 0 every 10 s),
// then cached (rank 0). Every rank of the run calls it.
std::vector<ReferenceLogps> reference_logps(const TrainConfig& c, OpenRun& run,
                                            const std::vector<const BlockSource*>& sources);

}  // namespace anvil
