#include "data/objective.h"

#include "core/error.h"

namespace anvil {

Objective parse_objective(const std::string& name) {
  if (name == "sft") return Objective::kSft;
  if (name == "dpo") return Objective::kDpo;
  raise(ErrorKind::kUsage, "unknown objective '", name, "' (sft or dpo)");
}

const char* objective_name(Objective o) { return o == Objective::kDpo ? "dpo" : "sft"; }

}  // namespace anvil
