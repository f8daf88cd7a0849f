// anvil train: the training loop around the Trainer: data, steps, logging, metrics,
// checkpoints (save and resume), export. In four phases: everything checked (usage,
// hyperparameters, data and tokenizer, writable outputs, the checkpoint folder's lock)
// before any weight is read or data packed; the run opened (train/open_run.h, shared with
// bench step); the loop (a SIGINT or SIGTERM stops it after the step in flight, with a
// checkpoint); the finish (summary, export, waiting for --on-save copies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/params.h"
#include "model/transformer.h"
#include "optim/adamw.h"
#include "parallel/mode.h"

namespace anvil {

struct TrainOptions {
  std::string model;   // folder or hub id
  std::string preset;  // or a built-in shape with fresh weights (benchmarks, the demo)
  std::string data;    // safetensors (input_ids [N, T]), a prepared block file/folder, or rows (data/source.h)
  std::string split = "train";  // hub dataset ids: the split and config read
  std::string data_config;
  std::string tokenizer;   // for JSONL: folder with tokenizer.json (default: the model's)
  std::string data_cache;  // where JSONL is prepared (default: ~/.cache/anvil)
  // Held-out blocks (any source --data takes, packed the same way): evaluated every
  // eval_every steps (0: only at the end) and at the end. eval_split: for hub dataset ids.
  std::string eval_data, eval_split;
  int64_t eval_every = 0;
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
  GradDType grad_dtype = GradDType::kAuto;  // the blocks' gradients (model/params.h)
  bool overlap_optimizer = true;  // AdamW beside the next forward (parallel/param_store.h)
  Recompute recompute = Recompute::kNone;
  OptimizerConfig optim;
  int64_t seed = 0;
  bool shuffle = true;
  int64_t log_every = 10;
  std::string metrics;  // JSON lines, one per logged step
  std::string export_dir;
  std::string export_dtype = "bf16";
  // Checkpoints (train/checkpoint.h): every save_every steps into ckpt_dir, keeping the
  // newest keep_last (0: all). A run resumes from `resume`, else from the newest complete
  // checkpoint in ckpt_dir.
  int64_t save_every = 0;
  std::string ckpt_dir;
  int64_t keep_last = 0;
  std::string resume;
  std::string on_save;  // run in the background on each complete checkpoint (train/save_copies.h)
  std::vector<std::string> args;  // the command line as given (for the resume hint)
  // The resolved settings as TOML (Args::to_toml), written as anvil_config.toml into each
  // checkpoint and the export folder.
  std::string config_toml;
};

struct TrainSummary {
  std::vector<double> losses;
  std::vector<double> eval_losses;
  double tokens_per_s = 0;
  double peak_host_gib = 0;
  int stop_signal = 0;  // SIGINT or SIGTERM when a signal stopped the run early
};

TrainSummary run_train(const TrainOptions& o);

}  // namespace anvil
