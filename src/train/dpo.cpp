// DPO's loss, its derivatives and TRL's metrics: see train/dpo.h.
#include "train/dpo.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
double sigmoid(double x) { return std::exp(log_sigmoid(x)); }

// The completion tokens of a document: its labels other than -100 (TRL's completion_mask sum).
int64_t completion_tokens(const TokenBatch& b, int64_t begin, int64_t length) {
  int64_t n = 0;
  for (int64_t i = begin; i < begin + length; ++i) n += b.labels[static_cast<size_t>(i)] != -100;
  return n;
}

// -(sum of the losses of the document's tokens that predict its next one): its completion's log-prob.
double document_logp(const std::vector<float>& token_losses, int64_t begin, int64_t length) {
  double s = 0;
  for (int64_t i = begin; i + 1 < begin + length; ++i) s += token_losses[static_cast<size_t>(i)];
  return -s;
}

}  // namespace

DpoLoss parse_dpo_loss(const std::string& name) {
  if (name == "sigmoid") return DpoLoss::kSigmoid;
  if (name == "ipo") return DpoLoss::kIpo;
  if (name == "robust") return DpoLoss::kRobust;
  raise(ErrorKind::kUsage, "--dpo-loss: unknown loss '", name, "' (sigmoid, ipo or robust)");
}

const char* dpo_loss_name(DpoLoss l) {
  switch (l) {
    case DpoLoss::kSigmoid: return "sigmoid";
    case DpoLoss::kIpo: return "ipo";
    case DpoLoss::kRobust: return "robust";
  }
  return "?";
}

void check_dpo(const DpoSection& s) {
  ANVIL_ENSURE(s.beta > 0 && std::isfinite(s.beta), kUsage, "--beta must be positive, got ", s.beta);
  ANVIL_ENSURE(s.label_smoothing == 0 || s.loss == DpoLoss::kRobust, kUsage,
               "--label-smoothing applies to --dpo-loss robust (TRL's label-smoothed sigmoid; its sigmoid and ipo "
               "read none), got it with ", dpo_loss_name(s.loss));
  ANVIL_ENSURE(s.label_smoothing >= 0 && s.label_smoothing < 0.5, kUsage,
               "--label-smoothing must lie in [0, 0.5), got ", s.label_smoothing);
}

PairLoss dpo_pair_loss(const DpoSection& s, const PairLogps& p) {
  const double beta = s.beta, eps = s.label_smoothing;
  const double chosen = p.chosen - p.ref_chosen, rejected = p.rejected - p.ref_rejected;
  PairLoss r;
  if (s.loss == DpoLoss::kIpo) {
    const double nc = static_cast<double>(std::max<int64_t>(p.chosen_tokens, 1));
    const double nr = static_cast<double>(std::max<int64_t>(p.rejected_tokens, 1));
    const double gap = chosen / nc - rejected / nr - 1 / (2 * beta);
    r.loss = gap * gap;
    r.d_chosen = 2 * gap / nc;
    r.d_rejected = -2 * gap / nr;
    return r;
  }
  const double x = beta * (chosen - rejected);
  double d_delta = 0;  // d loss / d (chosen - rejected)
  if (s.loss == DpoLoss::kSigmoid) {
    r.loss = -log_sigmoid(x);
    d_delta = -beta * sigmoid(-x);
  } else {
    r.loss = (-(1 - eps) * log_sigmoid(x) + eps * log_sigmoid(-x)) / (1 - 2 * eps);
    d_delta = (-(1 - eps) * beta * sigmoid(-x) - eps * beta * sigmoid(x)) / (1 - 2 * eps);
  }
  r.d_chosen = d_delta;
  r.d_rejected = -d_delta;
  return r;
}

void DpoSums::add(const DpoSection& s, const PairLogps& p, double pair_loss) {
  const double rc = s.beta * (p.chosen - p.ref_chosen), rr = s.beta * (p.rejected - p.ref_rejected);
  loss += pair_loss;
  rewards_chosen += rc;
  rewards_rejected += rr;
  accuracies += rc > rr ? 1 : 0;
  margins += rc - rr;
  logps_chosen += p.chosen;
  logps_rejected += p.rejected;
  ++pairs;
}

std::vector<double> DpoSums::values() const {
  return {loss, rewards_chosen, rewards_rejected, accuracies, margins, logps_chosen, logps_rejected,
          static_cast<double>(pairs)};
}

std::vector<std::pair<std::string, double>> DpoSums::means() const {
  const double n = static_cast<double>(std::max<int64_t>(pairs, 1));
  return {{"rewards/chosen", rewards_chosen / n},     {"rewards/rejected", rewards_rejected / n},
          {"rewards/accuracies", accuracies / n},     {"rewards/margins", margins / n},
          {"logps/chosen", logps_chosen / n},         {"logps/rejected", logps_rejected / n}};
}

PairLogps pair_logps(const std::vector<float>& token_losses, const TokenBatch& b, const PreferencePair& pair,
                     double ref_chosen, double ref_rejected) {
  PairLogps p;
  p.chosen = document_logp(token_losses, pair.chosen_begin, pair.chosen_length);
  p.rejected = document_logp(token_losses, pair.rejected_begin, pair.rejected_length);
  p.ref_chosen = ref_chosen;
  p.ref_rejected = ref_rejected;
  p.chosen_tokens = completion_tokens(b, pair.chosen_begin, pair.chosen_length);
  p.rejected_tokens = completion_tokens(b, pair.rejected_begin, pair.rejected_length);
  return p;
}

}  // namespace anvil
