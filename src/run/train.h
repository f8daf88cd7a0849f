// anvil train: the training loop around the Trainer: data, steps, logging, metrics,
// checkpoints (save and resume), export.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/params.h"
#include "optim/adamw.h"

namespace anvil {

struct TrainOptions {
  std::string model;   // folder or hub id
  std::string preset;  // or a built-in shape with fresh weights (benchmarks, the demo)
  std::string data;    // safetensors (input_ids [N, T]), a prepared block file/folder, or JSONL
  std::string tokenizer;   // for JSONL: folder with tokenizer.json (default: the model's)
  std::string data_cache;  // where JSONL is prepared (default: ~/.cache/anvil)
  bool assistant_only_loss = false;
  bool skip_bad_rows = false;
  std::string device;  // cpu | cuda; empty: cuda when a GPU is present, else cpu
  ParallelMode mode = ParallelMode::kAuto;  // auto: ddp when the plan fits, else fsdp
  int64_t seq_len = 0;  // 0: from the data
  int64_t steps = 40;
  int64_t micro_batch = 1;
  int64_t grad_accum = 1;
  bool fsdp_defer_sync = false;
  DType reduce_dtype = DType::kF32;  // gradient reduction: F32 or BF16
  std::string recompute = "none";  // none | full | auto
  OptimizerConfig optim;
  int64_t seed = 0;
  bool shuffle = true;
  int64_t log_every = 10;
  std::string metrics;  // JSON lines, one per logged step
  std::string export_dir;
  std::string export_dtype = "bf16";
  // Checkpoints (run/checkpoint.h): every save_every steps into ckpt_dir, keeping the
  // newest keep_last (0: all). A run resumes from `resume`, else from the newest complete
  // checkpoint in ckpt_dir.
  int64_t save_every = 0;
  std::string ckpt_dir;
  int64_t keep_last = 0;
  std::string resume;
};

struct TrainSummary {
  std::vector<double> losses;
  double tokens_per_s = 0;
  double peak_host_gib = 0;
};

TrainSummary run_train(const TrainOptions& o);

}  // namespace anvil
