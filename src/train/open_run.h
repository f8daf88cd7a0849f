// Opening a run, the setup that anvil train and anvil bench step share: the device, the
// process group (when a launcher started this process), the model's config and name table,
// its starting weights, and the Trainer built from them.
//
// train opens the run in two halves around its data (packing errors surface before any
// weight is read): open_run() (device, group, config; cheap), then the weights and
// make_trainer(). bench step calls them back to back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/comm.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weights.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anvil {

// "cpu" or "cuda" from --device (empty: cuda when a GPU is present); throws kUsage on
// anything else, kNoDevice when a GPU is asked for and none is there.
std::string resolve_device(const std::string& device);

struct OpenRun {
  std::string device;
  CommOptions comm_options;
  std::unique_ptr<Comm> comm;  // null for a single process
  int world = 1, rank = 0;
  std::string model_dir;  // empty for a preset
  ModelConfig config;
  std::unique_ptr<ParamTable> table;  // this rank's (with expert parallel: its experts only)
  std::unique_ptr<ParamTable> whole;  // the whole model's on these ranks (the same as table without expert parallel)
};

// --router-aux-loss (anvil train, anvil grad): Qwen3-MoE's load-balancing loss added whatever
// config.json's output_router_logits says (it is set); kUsage naming `what` (the model) where
// the model has no experts.
void add_router_aux_loss(ModelConfig& c, const std::string& what);

// On m.device (resolved: cpu or cuda), the process group (a worker of a launcher joins from
// RANK etc.), the model's config (with m.router_aux_loss: add_router_aux_loss) and name tables:
// this rank's share of the experts under --expert-parallel (a degree that does not divide the
// ranks and experts is left to resolve_config to refuse: the table then holds every expert).
// No weight is read.
OpenRun open_run(const ModelSection& m, int64_t expert_parallel = 1);
// run.whole and run.table of run.config (open_run's; again after the config changes).
void make_tables(OpenRun& run, int64_t expert_parallel);
// The starting weights as the Trainer reads them, unit by unit and each rank only what it
// owns: the model folder's safetensors (mapped; pages dropped after use), or for a preset
// fresh ones from `seed`, made whole in `fresh` (which must outlive the reader).
UnitReader initial_weights(const OpenRun& run, int64_t seed, HostUnits& fresh);
// The Trainer of `config` on this rank's device (device_index) from `weights`: the device's
// ops made, then every auto resolved (train/resolve.h, which checks the memory plan before
// anything is allocated) against the data's blocks of data_seq_len tokens.
std::unique_ptr<Trainer> make_trainer(const ModelConfig& model, const UnitReader& weights, const TrainConfig& config,
                                      int64_t data_seq_len, Comm* comm, int device_index);
// The same for an opened run.
std::unique_ptr<Trainer> make_trainer(OpenRun& run, const TrainConfig& config, int64_t data_seq_len,
                                      const UnitReader& weights);

}  // namespace anvil
