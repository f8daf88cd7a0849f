// The checks phase of anvil train: see train/checks.h.
#include "train/checks.h"

#include <cmath>

#include "comm/comm.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "io/hub.h"
#include "model/config.h"
#include "train/checkpoint.h"
#include "train/open_run.h"

namespace anvil {
namespace {

// A source the run can read: a file or folder, or rows whose files resolve (a hub dataset
// id in the local cache: where it looked, else).
void check_source(const std::string& source, const std::string& split, const char* flag, const DataSection& d) {
  if (data_kind(source) != DataKind::kRows) {
    ANVIL_ENSURE(path_exists(source), kUsage, "anvil train: ", flag, " ", source, ": no such file or folder");
    return;
  }
  try {
    resolve_data_source(source, split, d.config);
  } catch (const Error& e) {
    raise(ErrorKind::kUsage, "anvil train: ", flag, ": ", e.what());
  }
}

// The vocabulary size of rows' tokenizer (JSONL needs --seq-len and a tokenizer), with
// what it is, for the message when it exceeds the model's.
int64_t rows_vocab(const DataSection& d, const std::string& model_dir, std::string& what) {
  ANVIL_ENSURE(d.seq_len >= 2, kUsage, "anvil train: --seq-len is needed to pack the JSONL data ", d.source);
  const std::string dir = !d.tokenizer.empty() ? d.tokenizer : model_dir;
  ANVIL_ENSURE(!dir.empty(), kUsage, "anvil train: --tokenizer DIR is needed to read JSONL with --preset");
  const std::string file = is_directory(dir) ? path_join(dir, "tokenizer.json") : dir;
  ANVIL_ENSURE(path_exists(file), kUsage, "anvil train: ", file, ": no such file",
               d.tokenizer.empty() ? "; the model folder has no tokenizer: give one with --tokenizer DIR" : "");
  what = cat("the tokenizer ", file);
  check_writable_dir(data_cache_dir(d), "anvil train: --data-cache");
  return Tokenizer::load(dir).vocab_size();
}

// Data the run can read: the tokenizer's ids (or those of prepared data) must fit the
// model's vocabulary.
void check_data(const TrainConfig& c) {
  const DataSection& d = c.data;
  check_source(d.source, d.split, "--data", d);
  const bool preset = c.model.model.empty();
  const std::string model_dir = preset ? "" : resolve_model_dir(c.model.model);
  const ModelConfig cfg = preset ? preset_config(c.model.preset) : load_config(model_dir);
  const std::string model_what = preset ? cat("the preset ", c.model.preset)
                                        : cat("the model ", path_join(model_dir, "config.json"));
  int64_t vocab = 0;
  std::string vocab_what;
  const DataKind kind = data_kind(d.source);
  if (kind == DataKind::kRows) {
    vocab = rows_vocab(d, model_dir, vocab_what);
  } else if (kind == DataKind::kPacked) {
    const PackedDataset packed = PackedDataset::open(d.source);
    vocab = packed.header().value("vocab_size", int64_t{0});
    vocab_what = cat("the prepared data ", d.source, " (its tokenizer)");
  }
  ANVIL_ENSURE(vocab <= cfg.vocab_size, kUsage, "anvil train: ", vocab_what, " has ", vocab, " tokens, more than the ",
               cfg.vocab_size, " rows of the vocabulary of ", model_what, ": use the model's own tokenizer");
}

void check_eval(const TrainConfig& c) {
  const EvalSection& e = c.eval;
  ANVIL_ENSURE(e.every >= 0, kUsage, "anvil train: --eval-every is a count of steps");
  ANVIL_ENSURE(e.every == 0 || !e.data.empty(), kUsage, "anvil train: --eval-every needs --eval-data");
  ANVIL_ENSURE(e.split.empty() || (data_kind(e.data) == DataKind::kRows && !path_exists(e.data)), kUsage,
               "anvil train: --eval-split: a split applies to hub dataset ids; --eval-data ", e.data,
               " is a file or folder");
  if (!e.data.empty()) check_source(e.data, e.split.empty() ? c.data.split : e.split, "--eval-data", c.data);
}

// Writable outputs; the checkpoint folder locked by rank 0 (or the only process) for the run.
void check_outputs(const TrainConfig& c, FileLock& ckpt_lock) {
  if (!c.export_.dir.empty()) check_writable_dir(c.export_.dir, "anvil train: --export");
  if (!c.log.metrics.empty()) check_writable_file(c.log.metrics, "anvil train: --metrics");
  const std::string& dir = c.checkpoint.dir;
  if (dir.empty()) return;
  check_writable_dir(dir, "anvil train: --ckpt-dir");
  if (comm_options_from_env().rank == 0) {
    make_directories(dir);
    ckpt_lock = FileLock::acquire(path_join(dir, "anvil.lock"), cat("--ckpt-dir ", dir));
    remove_temporary_files(dir);
  }
}

}  // namespace

void check_optimizer(const OptimSection& o, int64_t steps, const char* command) {
  const OptimizerConfig& c = o.adamw;
  const ScheduleConfig& s = o.schedule;
  auto in_range = [command](bool ok, const char* flag, double v, const char* want) {
    ANVIL_ENSURE(ok, kUsage, command, ": ", flag, " ", v, " is out of range: it must be ", want);
  };
  in_range(s.lr > 0 && std::isfinite(s.lr), "--lr", s.lr, "> 0");
  in_range(c.beta1 >= 0 && c.beta1 < 1, "--beta1", c.beta1, "in [0, 1)");
  in_range(c.beta2 >= 0 && c.beta2 < 1, "--beta2", c.beta2, "in [0, 1)");
  in_range(c.eps > 0, "--eps", c.eps, "> 0");
  in_range(c.weight_decay >= 0, "--weight-decay", c.weight_decay, ">= 0");
  in_range(c.max_grad_norm >= 0, "--max-grad-norm", c.max_grad_norm, ">= 0 (0: no clipping)");
  ANVIL_ENSURE(s.warmup_steps >= 0 && s.warmup_steps <= steps, kUsage, command, ": --warmup ", s.warmup_steps,
               " is out of range: it must be between 0 and --steps ", steps);
  in_range(s.lr_min >= 0 && s.lr_min <= s.lr, "--lr-min", s.lr_min, "in [0, --lr]");
  ANVIL_ENSURE(s.lr_min == 0 || s.decay == "cosine", kUsage, command, ": --lr-min ", s.lr_min,
               " is the floor of the cosine decay: it needs --schedule cosine");
}

void check_train(TrainConfig& c, FileLock& ckpt_lock) {
  const DataSection& d = c.data;
  ANVIL_ENSURE(c.model.model.empty() != c.model.preset.empty(), kUsage,
               "anvil train: give exactly one of --model and --preset");
  ANVIL_ENSURE(!d.source.empty(), kUsage, "anvil train: --data is required");
  ANVIL_ENSURE(c.steps >= 1, kUsage, "anvil train: --steps must be at least 1, got ", c.steps);
  ANVIL_ENSURE(d.micro_batch >= 1, kUsage, "anvil train: --micro-batch must be at least 1, got ", d.micro_batch);
  ANVIL_ENSURE(d.grad_accum >= 1, kUsage, "anvil train: --grad-accum must be at least 1, got ", d.grad_accum);
  const CheckpointSection& k = c.checkpoint;
  ANVIL_ENSURE(k.save_every >= 0 && k.keep_last >= 0, kUsage, "anvil train: --save-every and --keep-last are counts");
  ANVIL_ENSURE(k.save_every == 0 || !k.dir.empty(), kUsage, "anvil train: --save-every needs --ckpt-dir");
  ANVIL_ENSURE(k.on_save.empty() || !k.dir.empty(), kUsage, "anvil train: --on-save needs --ckpt-dir");
  check_optimizer(c.optim, c.steps, "anvil train");
  c.model.device = resolve_device(c.model.device);
  // A check before data is packed: the grad dtype against the device and accumulation
  // (resolve_config resolves it once the Trainer's device is open).
  resolve_grad_dtype(c.parallel.grad_dtype, c.model.device == "cuda" ? DType::kBF16 : DType::kF32, d.grad_accum);
  check_data(c);
  check_eval(c);
  check_outputs(c, ckpt_lock);
}

}  // namespace anvil
