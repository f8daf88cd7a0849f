// Every `auto` of the run's config resolved once, in one place, with the reason for each:
// the sequence length (0: the data's), the blocks' gradient dtype, the parallel mode and the
// recomputation (from the memory plan against the GPU's memory). The Trainer is built from
// the result only; rank 0 logs the reasons at the start of a run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/config.h"
#include "plan/memory_plan.h"
#include "train/config.h"

namespace anvil {

struct ResolvedConfig {
  // No auto left: mode ddp|zero2|fsdp, recompute none|selective|full, grad dtype fp32|bf16,
  // data.seq_len the blocks' length, model.device cpu|cuda.
  TrainConfig config;
  std::string mode_reason = "as asked";  // "as asked", or "auto: " and the rule's reason
  std::vector<std::string> reasons;      // one line per auto, as "mode ddp: ..."
};

// What the resolution depends on besides the config: the model, the ranks, the data's
// block length and this rank's device (its compute dtype and memory; 0 on the CPU).
struct RunFacts {
  const ModelConfig* model = nullptr;
  int world = 1;
  int64_t data_seq_len = 0;
  DType compute_dtype = DType::kF32;
  int64_t capacity = 0;
  Comm* comm = nullptr;  // every rank takes the same mode (their GPUs could differ)
  std::string fp8_unsupported;  // why the device cannot run this --fp8 (Ops::fp8_unsupported), or empty
};

// Throws kUsage when the grad dtype, --context-parallel or --offload-activations cannot hold
// here, kUnsupported for --fp8 on a device that cannot run it, kOutOfMemory when the run cannot
// fit in the GPU's memory (with the plan of every mode) or its offloaded activations in the host's.
ResolvedConfig resolve_config(const TrainConfig& c, const RunFacts& f);

}  // namespace anvil
