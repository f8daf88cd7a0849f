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
#include "optim/adamw.h"
#include "parallel/mode.h"
#include "train/trainer.h"

namespace anvil {

// What a run is asked to train: the model and how.
struct RunSpec {
  std::string model, preset;  // exactly one: a folder or hub id, or a built-in shape
  std::string device;         // cpu | cuda; empty: cuda when a GPU is present
  ParallelMode mode = ParallelMode::kDdp;  // kAuto: the Trainer picks ddp when the plan fits, else fsdp
  DType reduce_dtype = DType::kF32;        // gradient reduction: F32 or BF16
  Recompute recompute = Recompute::kNone;  // kAuto: the fastest the plan fits
  bool overlap_optimizer = true;  // the update overlaps the next forward
  int64_t micro_batch = 1, grad_accum = 1;
  GradDType grad_dtype = GradDType::kAuto;  // model/params.h
  int64_t total_steps = 1;  // for the learning-rate schedule
  bool fsdp_defer_sync = false;
  OptimizerConfig optim;
};

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
  std::unique_ptr<ParamTable> table;
};

// The device, the process group (a worker of a launcher joins from RANK etc.), the model's
// config and name table. No weight is read.
OpenRun open_run(const RunSpec& spec);
// The starting weights as the Trainer reads them, unit by unit and each rank only what it
// owns: the model folder's safetensors (mapped; pages dropped after use), or for a preset
// fresh ones from `seed`, made whole in `fresh` (which must outlive the reader).
UnitReader initial_weights(const OpenRun& run, int64_t seed, HostUnits& fresh);
// The Trainer on this rank's device from `weights` (checks the memory plan before it
// allocates).
std::unique_ptr<Trainer> make_trainer(OpenRun& run, const RunSpec& spec, int64_t seq_len, const UnitReader& weights);

}  // namespace anvil
