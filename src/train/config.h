// The run's config: one tree, one documented struct per concern (as torchtitan's
// job_config), each section's struct in the lowest layer that reads it: the data's in
// data/blocks.h, the parallel section's in plan/parallel_section.h (the memory plan reads it),
// the optimizer's in optim/schedule.h, the rest here. Defaults live in these structs only. The
// flags of anvil train, anvil plan and anvil bench step bind to these fields, one binder per
// section (cli/config_flags.h), and so do the keys of --config FILE.toml and of the
// anvil_config.toml a run writes. Every `auto` is resolved once, by resolve_config
// (train/resolve.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/blocks.h"
#include "optim/schedule.h"
#include "plan/parallel_section.h"
#include "train/dpo.h"

namespace anvil {

// What is trained: exactly one of a model folder (or hub id) and a built-in shape.
struct ModelSection {
  std::string model;   // folder or hub id
  std::string preset;  // or a built-in shape with fresh weights (benchmarks, the demo)
  std::string device;  // cpu | cuda; empty: cuda when a GPU is present, else cpu
  bool router_aux_loss = false;  // Qwen3-MoE: the load-balancing loss whatever config.json says (train/open_run.h)
  bool operator==(const ModelSection&) const = default;
};

// Checkpoints (train/checkpoint_save.h): every save_every steps into dir, keeping the newest
// keep_last (0: all). A run resumes from `resume`, else from the newest complete checkpoint
// in dir.
struct CheckpointSection {
  int64_t save_every = 0;
  std::string dir;
  int64_t keep_last = 0;
  std::string resume;
  std::string on_save;  // run in the background on each complete checkpoint (train/save_copies.h)
  bool sync_save = false;  // write in the foreground, no host snapshot (else train/checkpoint_async.h)
  bool skip_busy = false;  // skip a save due while the last one is still being written (else wait)
  bool keep_best = false;  // keep the checkpoint of the lowest eval loss beside the newest keep_last
  bool operator==(const CheckpointSection&) const = default;
};

// Held-out blocks (any source --data takes, packed the same way unless `packing` says
// otherwise): evaluated every `every` steps (0: only at the end) and at the end, the first
// max_blocks of them (0: all). split: for hub dataset ids (empty: the dataset's validation or
// test split). Instead of data, a fraction or a count of the training rows, chosen by the
// run's seed.
struct EvalSection {
  std::string data, split;
  std::string packing = "same";  // same (as --packing) | bfd-split | bfd | wrapped
  int64_t every = 0;
  int64_t max_blocks = 0;
  double fraction = 0;  // or carve a held-out set from the training rows (data/holdout.h)
  int64_t rows = 0;
  bool operator==(const EvalSection&) const = default;
};

struct LogSection {
  int64_t every = 10;   // the loss line every N steps (and the first and the last)
  std::string metrics;  // JSON lines: a header record, then one per logged step
  bool metrics_append = false;  // add a new run to a --metrics file that holds another
  std::string tensorboard;      // a folder for TensorBoard event files
  bool operator==(const LogSection&) const = default;
};

// A Hugging Face model folder written at the end.
struct ExportSection {
  std::string dir;
  std::string dtype = "bf16";  // bf16 | fp32
  bool operator==(const ExportSection&) const = default;
};

struct TrainConfig {
  ModelSection model;
  DataSection data;
  ParallelSection parallel;
  OptimSection optim;
  CheckpointSection checkpoint;
  EvalSection eval;
  LogSection log;
  ExportSection export_;
  DpoSection dpo;  // --objective dpo (data.objective): its loss and reference (train/dpo.h)
  int64_t steps = 40;  // optimizer steps (the schedule's length)
  int64_t seed = 0;    // of the data order and of fresh weights
  bool operator==(const TrainConfig&) const = default;
};

// The training settings recorded in a checkpoint's meta.json ("train"), from the resolved
// config (its seq_len is the data's) on `world` ranks. The global batch counts a
// context-parallel group's sequences once.
Json train_record(const TrainConfig& c, int world);
// The recorded settings whose change makes a resumed run differ from an uninterrupted one,
// each as "name old -> new"; empty when none changed (keys missing from `was`, written by an
// older anvil, are not compared). One list, in train/config.cpp, makes both.
std::vector<std::string> continuation_changes(const Json& was, const Json& now);
// The recorded settings a resume may not change (the objective and DPO's loss, beta and
// reference: the run would train another objective), as continuation_changes names them.
std::vector<std::string> refused_changes(const Json& was, const Json& now);

}  // namespace anvil
