// The flags bound to the fields of the run's config tree (train/config.h), one binder per
// section: each flag is declared once, with its help once, and writes its field directly; its
// default is the struct's. anvil train binds every section; anvil plan and anvil bench step
// bind the sections they share with it (the model, the shapes, the parallel section), so a
// shared flag reads the same in the three --help texts. The keys of --config FILE.toml and of
// the anvil_config.toml a run writes are the same bindings.
#pragma once

#include <cstdint>
#include <string>

#include "cli/args.h"
#include "train/config.h"

namespace anvil {

// Every flag of anvil train (after --config, before the launch flags).
void bind_train_flags(Args& a, TrainConfig& c);

// --model, --preset: what is trained.
void bind_model(Args& a, ModelSection& m);
// --device, in every command that takes it: empty (the default) is cuda when a GPU is present,
// else cpu; device_or_default resolves it and refuses another name.
void bind_device(Args& a, ModelSection& m);
Args& bind_device(Args& a, std::string* device);
std::string device_or_default(const std::string& device, const std::string& command);
// --seq-len, --micro-batch, --grad-accum: the data section's shapes.
void bind_shapes(Args& a, DataSection& d);
// --steps.
void bind_steps(Args& a, int64_t* steps);
// --num-layers (bench step, plan): the model's first N layers, as anvil init --num-layers.
Args& bind_num_layers(Args& a, int64_t* num_layers);
// The parallel section: --mode, --reduce-dtype, --grad-dtype, --fsdp-defer-sync,
// --context-parallel, --recompute, --mlp-tile, --fp8, --offload-activations,
// --no-overlap-optimizer.
void bind_parallel(Args& a, ParallelSection& p);
// The sections anvil plan and anvil bench step share with anvil train: bind_model, bind_shapes
// and bind_parallel.
void bind_shared_sections(Args& a, TrainConfig& c);
// --op-table, --bus-gbps: what the step model predicts with (plan/step_model.h).
void bind_step_model(Args& a, std::string* op_table, double* bus_gbps);

// Single flags of the sections that other commands take too.
Args& bind_fp8(Args& a, Fp8Recipe* out);
Args& bind_mlp_tile(Args& a, int64_t* out);
Args& bind_packing(Args& a, Packing* out);
// --objective and DPO's --beta, --dpo-loss, --label-smoothing (train/dpo.h).
void bind_objective(Args& a, Objective* objective, DpoSection& d);
Args& bind_objective_choice(Args& a, Objective* objective);  // --objective alone (anvil prepare)
Args& bind_max_length(Args& a, int64_t* max_length);         // --max-length: DataSection::max_length

}  // namespace anvil
