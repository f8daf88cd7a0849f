// The flags of anvil train bound to the fields of the run's config tree (train/config.h):
// each flag writes its field directly, and the keys of --config FILE.toml and of the
// anvil_config.toml a run writes are the same bindings. anvil bench step and anvil plan bind
// the flags they share to a tree too, through the same choice helpers.
#pragma once

#include <string>
#include <vector>

#include "cli/args.h"
#include "train/config.h"

namespace anvil {

// Every flag of anvil train (after --config, before the launch flags).
void bind_train_flags(Args& a, TrainConfig& c);

// The choices held in enums: --mode, --reduce-dtype, --grad-dtype, --recompute, --packing.
Args& bind_mode(Args& a, ParallelMode* out, const std::string& help,
                std::vector<std::string> choices = {"auto", "ddp", "fsdp"});
Args& bind_reduce_dtype(Args& a, DType* out, const std::string& help);
Args& bind_grad_dtype(Args& a, GradDType* out, const std::string& help);
Args& bind_recompute(Args& a, Recompute* out, const std::string& help);
// --mlp-tile N (0: auto), as model/activations.h's mlp_tile.
Args& bind_mlp_tile(Args& a, int64_t* out);
Args& bind_fp8(Args& a, Fp8Recipe* out, const std::string& help);
// --offload-activations, as model/activations.h's offload.
Args& bind_offload(Args& a, bool* out);
Args& bind_packing(Args& a, Packing* out, const std::string& help);

}  // namespace anvil
