// anvil grad: loss, logits and every parameter gradient of one batch, written to a
// safetensors file under Hugging Face names: the parity tool against PyTorch.
#pragma once

#include <cstdint>
#include <string>

#include "data/blocks.h"
#include "ops/fp8_recipe.h"
#include "train/dpo.h"

namespace anvil {

struct GradOptions {
  std::string model;   // folder or hub id
  std::string tokens;  // safetensors with input_ids I64 [B, T], and position_ids I64 [B, T] for packed documents
  std::string out;     // output safetensors
  std::string device = "cpu";
  int64_t mlp_tile = 0;  // tokens per MLP tile (model/activations.h); 0: auto
  Fp8Recipe fp8 = Fp8Recipe::kOff;  // the blocks' linear layers in FP8 (ops/fp8_recipe.h)
  Objective objective = Objective::kSft;
  DpoSection dpo;                   // --objective dpo's loss
  bool router_aux_loss = false;     // Qwen3-MoE: the load-balancing loss whatever config.json says
};

// Returns the loss. Writes loss F32 [1], logits F32 [B, T, V], grad.<name> F32.
// --objective dpo: the tokens file also holds labels I64 [B, T] (-100 outside the
// completions), position_ids (row k: pair k's chosen sequence, then its rejected one, then
// padding, each a document) and ref_chosen_logps, ref_rejected_logps F64 [B]; written: loss
// (the mean pair loss), logps_chosen and logps_rejected F64 [B] (the model's, by the forward
// the reference pass runs) and grad.<name>, no logits.
double run_grad(const GradOptions& o);

}  // namespace anvil
