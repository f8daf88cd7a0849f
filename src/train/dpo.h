// DPO (--objective dpo): the preference loss of TRL's DPOTrainer on pairs of chosen and
// rejected completions, their log-probs summed over each completion's tokens, against a
// reference model's log-probs of the same completions computed once before training.
//
// How the gradient is made without logits (model/transformer.h, TokenWeighting): the head runs
// the loss forward-only, giving each token's -log p; the host sums them per completion, takes
// each pair's loss and its derivatives by the two log-probs (dpo_pair_loss), and writes them
// back as per-token weights (every token of a completion weighs minus that completion's
// derivative over the global pair count); the head's fused cross-entropy then runs its forward
// and backward with those weights. One model function, every backend, the logits never held.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/blocks.h"

namespace anvil {

// TRL's loss_type: sigmoid (-log sigmoid(beta * delta)), ipo ((delta per completion token -
// 1 / (2 beta))^2) and robust (TRL's label-smoothed sigmoid: (-(1 - e) log sigmoid(beta delta) +
// e log sigmoid(-beta delta)) / (1 - 2e)). TRL 1.16's sigmoid reads no label smoothing; robust
// is its loss that does, so label_smoothing is refused elsewhere.
enum class DpoLoss { kSigmoid, kIpo, kRobust };
DpoLoss parse_dpo_loss(const std::string& name);
const char* dpo_loss_name(DpoLoss l);

struct DpoSection {
  double beta = 0.1;
  DpoLoss loss = DpoLoss::kSigmoid;
  double label_smoothing = 0;  // robust only
  std::string ref_model;       // the reference's folder; empty: the start model
  bool operator==(const DpoSection&) const = default;
};

// kUsage naming the flag when the settings are out of range.
void check_dpo(const DpoSection& s);

// One pair's log-probs summed over its completions, the policy's and the reference's, and the
// completions' token counts (ipo's normalisation).
struct PairLogps {
  double chosen = 0, rejected = 0, ref_chosen = 0, ref_rejected = 0;
  int64_t chosen_tokens = 0, rejected_tokens = 0;
};

// A pair's loss and its derivatives by the policy's chosen and rejected log-probs.
struct PairLoss {
  double loss = 0, d_chosen = 0, d_rejected = 0;
};
PairLoss dpo_pair_loss(const DpoSection& s, const PairLogps& p);

// Sums over pairs of the loss and TRL's metrics (means once summed over micro-batches and ranks).
struct DpoSums {
  double loss = 0, rewards_chosen = 0, rewards_rejected = 0, accuracies = 0, margins = 0, logps_chosen = 0,
         logps_rejected = 0;
  int64_t pairs = 0;
  void add(const DpoSection& s, const PairLogps& p, double loss);
  std::vector<double> values() const;  // the sums in the order of the fields, pairs last
  // The means under TRL's names (rewards/chosen, ...), loss excluded.
  std::vector<std::pair<std::string, double>> means() const;
};

// A pair's completion log-probs from the token losses of its micro-batch (token t's loss is
// -log p of the token after it: a document of n tokens has n - 1 of them), with its reference's.
PairLogps pair_logps(const std::vector<float>& token_losses, const TokenBatch& batch, const PreferencePair& pair,
                     double ref_chosen, double ref_rejected);

}  // namespace anvil
