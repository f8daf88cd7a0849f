// The checks phase of anvil train: see train/checks.h.
#include "train/checks.h"

#include <cmath>
#include <filesystem>

#include "comm/comm.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "io/hub.h"
#include "model/config.h"
#include "train/checkpoint_save.h"
#include "train/open_run.h"
#include "train/resolve.h"

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
  ANVIL_ENSURE(d.seq_len >= 2, kUsage, "anvil train: --seq-len must be at least 2 to pack the rows of ", d.source,
               " into sequences (0, the default, takes the length of prepared blocks; rows have none)");
  const std::string dir = !d.tokenizer.empty() ? d.tokenizer : model_dir;
  ANVIL_ENSURE(!dir.empty(), kUsage, "anvil train: --tokenizer DIR is needed to read JSONL with --preset");
  const std::string file = is_directory(dir) ? path_join(dir, "tokenizer.json") : dir;
  ANVIL_ENSURE(path_exists(file), kUsage, "anvil train: ", file, ": no such file",
               d.tokenizer.empty() ? "; the model folder has no tokenizer: give one with --tokenizer DIR" : "");
  what = cat("the tokenizer ", file);
  check_writable_dir(data_cache_dir(d), "anvil train: --data-cache");
  return Tokenizer::load(dir).vocab_size();
}

// Sequences no longer than the positions the model was trained for (max_position_embeddings,
// which already counts a RoPE scaling the model has: llama3's).
void check_positions(int64_t seq_len, const ModelConfig& cfg, const std::string& model_what, const std::string& what) {
  ANVIL_ENSURE(seq_len <= cfg.max_position_embeddings, kUsage, "anvil train: ", what, " ", seq_len,
               " is longer than the ", cfg.max_position_embeddings, " positions of ", model_what,
               " (max_position_embeddings): use --seq-len ", cfg.max_position_embeddings, " or less");
}

// Data the run can read: the tokenizer's ids (or those of prepared data) must fit the
// model's vocabulary.
void check_data(const TrainConfig& c) {
  const DataSection& d = c.data;
  check_source(d.source, d.split, "--data", d);
  const bool preset = c.model.model.empty();
  const std::string model_dir = preset ? "" : resolve_model_dir(c.model.model);
  ModelConfig cfg = preset ? preset_config(c.model.preset) : load_config(model_dir);
  const std::string model_what = preset ? cat("the preset ", c.model.preset)
                                        : cat("the model ", path_join(model_dir, "config.json"));
  if (c.model.router_aux_loss) add_router_aux_loss(cfg, model_what);
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
  const int64_t seq = kind == DataKind::kPacked && d.seq_len == 0 ? PackedDataset::open(d.source).seq_len() : d.seq_len;
  check_positions(seq, cfg, model_what, d.seq_len == 0 ? cat("the blocks of ", d.source) : std::string("--seq-len"));
}

// A hub dataset id given to --eval-data without --eval-split: its validation split, else its
// test split; never silently the training split. Refused when it has neither.
std::string held_out_split(const std::string& id, const DataSection& d) {
  std::string why;
  for (const char* split : {"validation", "test"}) {
    try {
      resolve_data_source(id, split, d.config);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kNotFound) throw;
      if (why.empty()) why = e.what();
      continue;
    }
    if (comm_options_from_env().rank == 0)
      log_info("resolved eval split ", split, ": the held-out split of ", id, " (no --eval-split given)");
    return split;
  }
  raise(ErrorKind::kUsage, "anvil train: --eval-data ", id, " has no validation or test split in the local cache (",
        why, "): name the split to evaluate with --eval-split NAME");
}

// --eval-fraction / --eval-rows: a held-out set carved from the training rows. True when asked.
bool check_carve(const TrainConfig& c) {
  const EvalSection& e = c.eval;
  ANVIL_ENSURE(e.fraction >= 0 && e.fraction < 1, kUsage, "anvil train: --eval-fraction ", e.fraction,
               " is out of range: it must be in [0, 1)");
  ANVIL_ENSURE(e.rows >= 0, kUsage, "anvil train: --eval-rows is a count of rows");
  const bool carve = e.fraction > 0 || e.rows > 0;
  if (!carve) return false;
  ANVIL_ENSURE(e.fraction == 0 || e.rows == 0, kUsage, "anvil train: give --eval-fraction or --eval-rows, not both");
  ANVIL_ENSURE(e.data.empty(), kUsage, "anvil train: --eval-fraction and --eval-rows hold out training rows instead "
               "of --eval-data: give one of them");
  ANVIL_ENSURE(data_kind(c.data.source) == DataKind::kRows, kUsage, "anvil train: --eval-fraction and --eval-rows "
               "hold out rows: --data ", c.data.source, " holds blocks (give rows: JSONL, Parquet, a hub id)");
  return true;
}

void check_eval(TrainConfig& c) {
  EvalSection& e = c.eval;
  ANVIL_ENSURE(e.every >= 0, kUsage, "anvil train: --eval-every is a count of steps");
  ANVIL_ENSURE(e.max_blocks >= 0, kUsage, "anvil train: --eval-max-blocks is a count of blocks (0: all)");
  const bool carve = check_carve(c);
  ANVIL_ENSURE(e.every == 0 || !e.data.empty() || carve, kUsage, "anvil train: --eval-every needs --eval-data "
               "(or --eval-fraction)");
  ANVIL_ENSURE(e.split.empty() || !e.data.empty(), kUsage,
               "anvil train: --eval-split needs --eval-data (the hub dataset id whose split is evaluated)");
  const bool hub_id = data_kind(e.data) == DataKind::kRows && !path_exists(e.data);
  ANVIL_ENSURE(e.split.empty() || hub_id, kUsage, "anvil train: --eval-split: a split applies to hub dataset ids; "
               "--eval-data ", e.data, " is a file or folder");
  if (e.data.empty()) return;
  if (hub_id && e.split.empty()) e.split = held_out_split(e.data, c.data);
  check_source(e.data, e.split.empty() ? c.data.split : e.split, "--eval-data", c.data);
}

// --export's folder: never the --model folder it starts from, and, when it holds files, an
// earlier export (its anvil_config.toml, which every export writes, and no checkpoint's
// meta.json): the export replaces files of those names, so any other folder would be mixed.
void check_export_dir(const TrainConfig& c) {
  const std::string& dir = c.export_.dir;
  check_writable_dir(dir, "anvil train: --export");
  // Links resolved where they can be; a path that cannot be compares as written.
  const auto canonical = [](const std::string& p) {
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec), real = std::filesystem::weakly_canonical(a, ec);
    return (ec ? a.lexically_normal() : real).string();
  };
  std::error_code ec;
  if (!c.model.model.empty())
    ANVIL_ENSURE(canonical(dir) != canonical(resolve_model_dir(c.model.model)), kUsage, "anvil train: --export ", dir,
                 " is the --model folder: the export would overwrite the weights the run starts from; give a new "
                 "folder");
  if (!is_directory(dir) || std::filesystem::is_empty(dir, ec)) return;
  ANVIL_ENSURE(path_exists(path_join(dir, "anvil_config.toml")) && !path_exists(path_join(dir, "meta.json")), kUsage,
               "anvil train: --export ", dir, " holds files and is not an earlier export (no anvil_config.toml): "
               "give an empty or new folder");
}

// Writable outputs; the checkpoint folder locked by rank 0 (or the only process) for the run.
void check_outputs(const TrainConfig& c, FileLock& ckpt_lock) {
  if (!c.export_.dir.empty()) check_export_dir(c);
  if (!c.log.metrics.empty()) check_writable_file(c.log.metrics, "anvil train: --metrics");
  if (!c.log.tensorboard.empty()) check_writable_dir(c.log.tensorboard, "anvil train: --tensorboard");
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
  ANVIL_ENSURE(d.seq_len == 0 || d.seq_len >= 2, kUsage, "anvil train: --seq-len ", d.seq_len,
               " is out of range: a sequence holds at least 2 tokens (0, the default: the data's blocks' length)");
  const CheckpointSection& k = c.checkpoint;
  ANVIL_ENSURE(k.save_every >= 0 && k.keep_last >= 0, kUsage, "anvil train: --save-every and --keep-last are counts");
  ANVIL_ENSURE(k.save_every == 0 || !k.dir.empty(), kUsage, "anvil train: --save-every needs --ckpt-dir");
  ANVIL_ENSURE(k.on_save.empty() || !k.dir.empty(), kUsage, "anvil train: --on-save needs --ckpt-dir");
  ANVIL_ENSURE(k.keep_last == 0 || !k.dir.empty(), kUsage,
               "anvil train: --keep-last needs --ckpt-dir (and --save-every N: the checkpoints it keeps)");
  ANVIL_ENSURE(!k.keep_best || (k.save_every > 0 && c.eval.every > 0 && k.save_every % c.eval.every == 0), kUsage,
               "anvil train: --keep-best needs --save-every N and --eval-data with --eval-every M, M dividing N "
               "(each checkpoint's step then has an eval loss)");
  check_optimizer(c.optim, c.steps, "anvil train");
  c.model.device = resolve_device(c.model.device);
  // A check before data is packed: the grad dtype against the device and accumulation
  // (resolve_config resolves it once the Trainer's device is open).
  resolve_grad_dtype(c.parallel.grad_dtype, c.model.device == "cuda" ? DType::kBF16 : DType::kF32, d.grad_accum);
  check_context_parallel_world(c.parallel.context_parallel, comm_options_from_env().world, "--nproc-per-node");
  check_data(c);
  check_eval(c);
  check_outputs(c, ckpt_lock);
}

}  // namespace anvil
