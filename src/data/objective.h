// What the steps train: next-token cross-entropy (sft) or a preference objective on pairs of
// chosen and rejected sequences (dpo: train/dpo.h), whose rows are preference pairs.
#pragma once

#include <string>

namespace anvil {

enum class Objective { kSft, kDpo };
Objective parse_objective(const std::string& name);  // "sft" | "dpo"; kUsage otherwise
const char* objective_name(Objective o);

}  // namespace anvil
