#include "train/loop.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <fstream>
#include <thread>

#include "comm/comm.h"
#include "core/duration.h"
#include "core/env.h"
#include "core/fault.h"
#include "core/file_lock.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "data/packing.h"
#include "data/sampler.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "io/checkpoint_files.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "train/bench_step.h"
#include "train/checkpoint.h"
#include "train/eval.h"
#include "train/open_run.h"
#include "train/save_copies.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace anvil {
namespace {

enum class DataKind { kSafetensors, kPacked, kRows };
DataKind data_kind(const std::string& data) {
  if (data.size() > 12 && data.compare(data.size() - 12, 12, ".safetensors") == 0) return DataKind::kSafetensors;
  if (is_packed_dataset(data)) return DataKind::kPacked;
  return DataKind::kRows;  // JSONL, Parquet, a folder of them, a hub dataset id (data/source.h)
}

std::string data_cache_dir(const TrainOptions& o) {
  return !o.data_cache.empty() ? o.data_cache
         : !env_str("XDG_CACHE_HOME", "").empty() ? path_join(env_str("XDG_CACHE_HOME", ""), "anvil")
                                                   : path_join(env_str("HOME", "."), ".cache/anvil");
}

// Training (or eval) blocks from `source`: token ids [N, T] from a safetensors file
// (input_ids), or a packed block file made by `anvil prepare`, or rows (JSONL, Parquet, a
// folder, a hub dataset id: data/source.h) prepared on the fly into the cache.
class BlockSource {
 public:
  BlockSource(const TrainOptions& o, const std::string& source, const std::string& split,
              const std::string& model_dir, Comm* comm) {
    if (data_kind(source) == DataKind::kSafetensors) {
      file_ = std::make_unique<SafetensorsFile>(source);
      const SafeTensorInfo* ids = file_->find("input_ids");
      ANVIL_ENSURE(ids, kNotFound, source, ": no tensor input_ids");
      ANVIL_ENSURE(ids->shape.ndim == 2 && ids->shape[1] >= 2 && ids->shape[0] >= 1, kInvalidInput, source,
                   ": input_ids has shape ", ids->shape.str(), ", expected [N, T] with T >= 2");
      ids_ = read_as_i64(*ids);
      n_ = ids->shape[0];
      t_ = ids->shape[1];
      return;
    }
    if (data_kind(source) == DataKind::kPacked) {
      packed_ = std::make_unique<PackedDataset>(PackedDataset::open(source));
    } else {
      PrepareOptions p;
      p.tokenizer = !o.tokenizer.empty() ? o.tokenizer : model_dir;
      p.data = resolve_data_source(source, split.empty() ? o.split : split, o.data_config);
      p.seq_len = o.seq_len;
      p.assistant_only_loss = o.assistant_only_loss;
      p.skip_bad_rows = o.skip_bad_rows;
      const std::string cache = data_cache_dir(o);
      // Rank 0 prepares; the others open what it wrote.
      if (!comm || comm->rank() == 0) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
      if (comm) comm->barrier("data preparation");
      if (!packed_) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
    }
    n_ = packed_->num_blocks();
    t_ = packed_->seq_len();
    ANVIL_ENSURE(n_ >= 1, kInvalidInput, source, ": no complete block of ", t_, " tokens");
  }

  int64_t size() const { return n_; }
  int64_t seq_len() const { return t_; }
  void append(int64_t block, TokenBatch& b) const {
    if (!packed_) {
      auto first = ids_.begin() + block * t_;
      b.ids.insert(b.ids.end(), first, first + t_);
      return;
    }
    const int32_t* ids = packed_->input_ids(block);
    b.ids.insert(b.ids.end(), ids, ids + t_);
    if (packed_->has_labels()) {
      const int32_t* lab = packed_->labels(block);
      b.labels.insert(b.labels.end(), lab, lab + t_);
    }
  }

 private:
  std::unique_ptr<SafetensorsFile> file_;
  std::vector<int64_t> ids_;
  std::unique_ptr<PackedDataset> packed_;
  int64_t n_ = 0, t_ = 0;
};

// A one-line progress bar with ETA, redrawn in place on a terminal (stderr a TTY, rank 0);
// log lines clear it first. Elsewhere (files, pipes, CI) only the plain log lines appear.
class Progress {
 public:
  explicit Progress(bool on) : on_(on && ::isatty(2)) {}
  void clear() {
    if (on_ && drawn_) std::fputs("\r\033[K", stderr);
    drawn_ = false;
  }
  void draw(int64_t step, int64_t steps, double loss, double seconds_left) {
    if (!on_) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(steps, 1));
    const int64_t eta = static_cast<int64_t>(seconds_left);
    std::fprintf(stderr, "\r\033[K[%.*s%.*s] %lld/%lld  loss %.4f  ETA %lld:%02lld:%02lld", filled,
                 "##############################", kWidth - filled, "..............................",
                 static_cast<long long>(step), static_cast<long long>(steps), loss, static_cast<long long>(eta / 3600),
                 static_cast<long long>(eta / 60 % 60), static_cast<long long>(eta % 60));
    std::fflush(stderr);
    drawn_ = true;
  }

 private:
  bool on_;
  bool drawn_ = false;
};

double peak_rss_gib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);
}

// The blocks each step reads on this rank: PyTorch's DistributedSampler with set_epoch; an
// epoch ends when a whole step no longer fits, as a DataLoader with drop_last does. A
// checkpoint records the epoch and the blocks (all ranks) trained on in it, so a resumed
// run skips them, with any number of ranks.
class BatchOrder {
 public:
  BatchOrder(const TrainOptions& o, int64_t blocks, int world, int rank, int64_t per_step)
      : sampler_(blocks, world, rank, static_cast<uint64_t>(o.seed), o.shuffle, true),
        world_(world),
        per_step_(per_step),
        epoch_len_(sampler_.num_samples() / per_step * per_step) {}

  // Continue after a checkpoint's data position.
  void resume_at(const DataPosition& p, int64_t step) {
    first_index_ = p.epoch * epoch_len_ + std::min(p.samples_in_epoch / world_, epoch_len_);
    start_ = step;
  }
  // The i-th block of step `step` (1-based) on this rank.
  int64_t block(int64_t step, int64_t i) {
    const int64_t index = first_index_ + (step - start_ - 1) * per_step_ + i;
    const int64_t e = index / epoch_len_;
    if (e != epoch_) {
      epoch_ = e;
      sampler_.set_epoch(e);
      mine_ = sampler_.indices();
    }
    return mine_[static_cast<size_t>(index % epoch_len_)];
  }
  // Where the data stands after `step` steps (what a checkpoint records).
  DataPosition after(int64_t step) const {
    const int64_t next = first_index_ + (step - start_) * per_step_;
    return {next / epoch_len_, (next % epoch_len_) * world_};
  }

 private:
  DistributedSampler sampler_;
  int world_;
  int64_t per_step_, epoch_len_;
  int64_t first_index_ = 0, start_ = 0, epoch_ = -1;
  std::vector<int64_t> mine_;
};

// Everything a run holds from its opening to its end.
struct TrainRun {
  FileLock ckpt_lock;  // one run per checkpoint folder
  RunSpec spec;
  OpenRun base;
  std::unique_ptr<BlockSource> data;
  std::unique_ptr<BlockSource> eval_data;  // --eval-data, packed as the training data
  ResumePoint point;  // step 0 on a fresh start
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<BatchOrder> order;
  int64_t per_step = 0;  // sequences per step on each rank
  SaveSettings save;
  std::unique_ptr<SaveCopies> copies;  // --on-save, on rank 0
  std::ofstream metrics;
};

// The optimizer's settings, in the ranges where AdamW and the schedule mean something.
void check_hyperparameters(const TrainOptions& o) {
  const OptimizerConfig& c = o.optim;
  auto in_range = [](bool ok, const char* flag, double v, const char* want) {
    ANVIL_ENSURE(ok, kUsage, "anvil train: ", flag, " ", v, " is out of range: it must be ", want);
  };
  in_range(c.lr > 0 && std::isfinite(c.lr), "--lr", c.lr, "> 0");
  in_range(c.beta1 >= 0 && c.beta1 < 1, "--beta1", c.beta1, "in [0, 1)");
  in_range(c.beta2 >= 0 && c.beta2 < 1, "--beta2", c.beta2, "in [0, 1)");
  in_range(c.eps > 0, "--eps", c.eps, "> 0");
  in_range(c.weight_decay >= 0, "--weight-decay", c.weight_decay, ">= 0");
  in_range(c.max_grad_norm >= 0, "--max-grad-norm", c.max_grad_norm, ">= 0 (0: no clipping)");
  ANVIL_ENSURE(c.warmup_steps >= 0 && c.warmup_steps <= o.steps, kUsage, "anvil train: --warmup ", c.warmup_steps,
               " is out of range: it must be between 0 and --steps ", o.steps);
}

// A source the run can read: a file or folder, or rows whose files resolve (a hub dataset
// id in the local cache: where it looked, else).
void check_source(const std::string& source, const std::string& split, const char* flag, const TrainOptions& o) {
  if (data_kind(source) != DataKind::kRows) {
    ANVIL_ENSURE(path_exists(source), kUsage, "anvil train: ", flag, " ", source, ": no such file or folder");
    return;
  }
  try {
    resolve_data_source(source, split, o.data_config);
  } catch (const Error& e) {
    raise(ErrorKind::kUsage, "anvil train: ", flag, ": ", e.what());
  }
}

// Data the run can read: JSONL needs --seq-len and a tokenizer, and the tokenizer's ids
// (or those of prepared data) must fit the model's vocabulary.
void check_data(const TrainOptions& o) {
  check_source(o.data, o.split, "--data", o);
  const bool preset = o.model.empty();
  const std::string model_dir = preset ? "" : resolve_model_dir(o.model);
  const ModelConfig cfg = preset ? preset_config(o.preset) : load_config(model_dir);
  const std::string model_what = preset ? cat("the preset ", o.preset)
                                        : cat("the model ", path_join(model_dir, "config.json"));
  int64_t vocab = 0;
  std::string vocab_what;
  const DataKind kind = data_kind(o.data);
  if (kind == DataKind::kRows) {
    ANVIL_ENSURE(o.seq_len >= 2, kUsage, "anvil train: --seq-len is needed to pack the JSONL data ", o.data);
    const std::string dir = !o.tokenizer.empty() ? o.tokenizer : model_dir;
    ANVIL_ENSURE(!dir.empty(), kUsage, "anvil train: --tokenizer DIR is needed to read JSONL with --preset");
    const std::string file = is_directory(dir) ? path_join(dir, "tokenizer.json") : dir;
    ANVIL_ENSURE(path_exists(file), kUsage, "anvil train: ", file, ": no such file",
                 o.tokenizer.empty() ? "; the model folder has no tokenizer: give one with --tokenizer DIR" : "");
    vocab = Tokenizer::load(dir).vocab_size();
    vocab_what = cat("the tokenizer ", file);
    check_writable_dir(data_cache_dir(o), "anvil train: --data-cache");
  } else if (kind == DataKind::kPacked) {
    const PackedDataset packed = PackedDataset::open(o.data);
    vocab = packed.header().value("vocab_size", int64_t{0});
    vocab_what = cat("the prepared data ", o.data, " (its tokenizer)");
  }
  ANVIL_ENSURE(vocab <= cfg.vocab_size, kUsage, "anvil train: ", vocab_what, " has ", vocab, " tokens, more than the ",
               cfg.vocab_size, " rows of the vocabulary of ", model_what, ": use the model's own tokenizer");
}

// 1. Everything that can be checked before any weight is read or data packed: usage,
// hyperparameters, data and tokenizer, writable outputs; then the checkpoint folder is
// locked for this run and cleared of what interrupted saves left.
RunSpec check_train(const TrainOptions& o, FileLock& ckpt_lock) {
  ANVIL_ENSURE(o.model.empty() != o.preset.empty(), kUsage, "anvil train: give exactly one of --model and --preset");
  ANVIL_ENSURE(!o.data.empty(), kUsage, "anvil train: --data is required");
  ANVIL_ENSURE(o.steps >= 1 && o.micro_batch >= 1 && o.grad_accum >= 1, kUsage,
               "anvil train: --steps, --micro-batch and --grad-accum must be at least 1");
  ANVIL_ENSURE(o.save_every >= 0 && o.keep_last >= 0, kUsage, "anvil train: --save-every and --keep-last are counts");
  ANVIL_ENSURE(o.save_every == 0 || !o.ckpt_dir.empty(), kUsage, "anvil train: --save-every needs --ckpt-dir");
  ANVIL_ENSURE(o.on_save.empty() || !o.ckpt_dir.empty(), kUsage, "anvil train: --on-save needs --ckpt-dir");
  check_hyperparameters(o);
  RunSpec spec;
  spec.model = o.model;
  spec.preset = o.preset;
  spec.device = resolve_device(o.device);
  // The rank count is checked again by the Trainer; the device and accumulation here, before data is packed.
  resolve_grad_dtype(o.grad_dtype, spec.device == "cuda" ? DType::kBF16 : DType::kF32, 1, o.grad_accum);
  spec.mode = o.mode;
  spec.reduce_dtype = o.reduce_dtype;
  spec.recompute = o.recompute;
  spec.overlap_optimizer = o.overlap_optimizer;
  spec.micro_batch = o.micro_batch;
  spec.grad_accum = o.grad_accum;
  spec.grad_dtype = o.grad_dtype;
  spec.total_steps = o.steps;
  spec.fsdp_defer_sync = o.fsdp_defer_sync;
  spec.optim = o.optim;
  check_data(o);
  ANVIL_ENSURE(o.eval_every >= 0, kUsage, "anvil train: --eval-every is a count of steps");
  ANVIL_ENSURE(o.eval_every == 0 || !o.eval_data.empty(), kUsage, "anvil train: --eval-every needs --eval-data");
  ANVIL_ENSURE(o.eval_split.empty() || (data_kind(o.eval_data) == DataKind::kRows && !path_exists(o.eval_data)),
               kUsage, "anvil train: --eval-split: a split applies to hub dataset ids; --eval-data ", o.eval_data,
               " is a file or folder");
  if (!o.eval_data.empty()) check_source(o.eval_data, o.eval_split.empty() ? o.split : o.eval_split, "--eval-data", o);
  if (!o.export_dir.empty()) check_writable_dir(o.export_dir, "anvil train: --export");
  if (!o.metrics.empty()) check_writable_file(o.metrics, "anvil train: --metrics");
  if (!o.ckpt_dir.empty()) {
    check_writable_dir(o.ckpt_dir, "anvil train: --ckpt-dir");
    if (comm_options_from_env().rank == 0) {  // rank 0 (or the only process) holds the folder for the run
      make_directories(o.ckpt_dir);
      ckpt_lock = FileLock::acquire(path_join(o.ckpt_dir, "anvil.lock"), cat("--ckpt-dir ", o.ckpt_dir));
      remove_temporary_files(o.ckpt_dir);
    }
  }
  return spec;
}

// 2. Open the run: process group and model config, the data, then the weights (the
// newest checkpoint's, validated and checked against the model, or the model's own), the
// Trainer and the optimizer state.
void open_train(const TrainOptions& o, TrainRun& run) {
  run.base = open_run(run.spec);
  const OpenRun& b = run.base;
  run.data = std::make_unique<BlockSource>(o, o.data, "", b.model_dir, b.comm.get());
  const BlockSource& data = *run.data;
  ANVIL_ENSURE(o.seq_len == 0 || o.seq_len == data.seq_len(), kUsage, "anvil train: --seq-len ", o.seq_len,
               " differs from the ", data.seq_len(), " tokens per block of ", o.data);
  if (!o.eval_data.empty()) {
    TrainOptions eo = o;
    eo.seq_len = data.seq_len();  // packed as the training data
    run.eval_data = std::make_unique<BlockSource>(eo, o.eval_data, o.eval_split, b.model_dir, b.comm.get());
    ANVIL_ENSURE(run.eval_data->seq_len() == data.seq_len(), kUsage, "anvil train: --eval-data ", o.eval_data,
                 " holds blocks of ", run.eval_data->seq_len(), " tokens, the training data ", data.seq_len());
  }
  run.per_step = o.micro_batch * o.grad_accum;
  ANVIL_ENSURE(data.size() / b.world >= run.per_step, kInvalidInput, o.data, " holds ", data.size(),
               " blocks, fewer than one step's ", run.per_step * b.world, " (micro-batch x grad-accum x ranks)");

  const std::string resume = find_resume_checkpoint(o.ckpt_dir, o.resume);
  {
    // The Trainer reads the weights unit by unit, each rank only what it owns (a preset's
    // fresh weights are made whole first).
    HostUnits fresh;
    UnitReader weights;
    if (!resume.empty()) {
      run.point = open_checkpoint(resume, *b.table, b.comm.get());
      weights = checkpoint_masters_reader(run.point, *b.table);
    } else {
      weights = initial_weights(b, o.seed, fresh);
    }
    run.trainer = make_trainer(run.base, run.spec, data.seq_len(), weights);  // checks the memory plan first
  }
  if (!resume.empty()) restore_optimizer(run.point, *run.trainer);
  log_info("training ", b.config.architecture, " (", b.table->total_numel(), " parameters) on ", b.world, " x ",
           b.device, " (", parallel_mode_name(run.trainer->mode()), ", ", run.trainer->mode_reason(),
           o.reduce_dtype == DType::kBF16 ? "; gradients reduced in bf16" : "",
           run.trainer->grad_dtype() == DType::kBF16 ? "; the blocks' gradients in bf16" : "", "): ", data.size(),
           " blocks of ",
           data.seq_len(), " tokens, ", o.steps, " steps of ", run.per_step * b.world, " sequences");

  run.order = std::make_unique<BatchOrder>(o, data.size(), b.world, b.rank, run.per_step);
  if (!resume.empty()) {
    run.order->resume_at(run.point.position, run.point.step);
    if (run.point.step >= o.steps)
      log_info("the checkpoint is at step ", run.point.step, " of --steps ", o.steps, ": nothing to train");
  }
  if (!o.metrics.empty()) {
    run.metrics.open(o.metrics, std::ios::app);
    ANVIL_ENSURE(run.metrics.good(), kIo, o.metrics, ": cannot open for writing");
  }
  SaveSettings& save = run.save;
  save.ckpt_dir = o.ckpt_dir;
  save.keep_last = o.keep_last;
  save.model_dir = b.model_dir;
  save.tokenizer_dir = o.tokenizer;
  save.train = {{"data", o.data}, {"seed", o.seed}, {"shuffle", o.shuffle}, {"steps", o.steps},
                {"micro_batch", o.micro_batch}, {"grad_accum", o.grad_accum},
                {"global_batch", run.per_step * b.world}, {"seq_len", data.seq_len()}, {"lr", o.optim.lr},
                {"warmup", o.optim.warmup_steps}, {"schedule", o.optim.schedule},
                {"weight_decay", o.optim.weight_decay}, {"beta1", o.optim.beta1}, {"beta2", o.optim.beta2},
                {"eps", o.optim.eps}, {"max_grad_norm", o.optim.max_grad_norm},
                {"assistant_only_loss", o.assistant_only_loss}};
  save.config_toml = o.config_toml;
  if (!resume.empty()) {
    std::string changed;
    for (const std::string& c : continuation_changes(run.point.meta.value("train", Json::object()), save.train))
      changed += (changed.empty() ? "" : ", ") + c;
    if (!changed.empty())
      log_warn("the checkpoint was trained with other settings (", changed,
               "): the run does not continue as an uninterrupted one would");
  }
  if (!o.on_save.empty() && b.rank == 0) run.copies = std::make_unique<SaveCopies>(o.on_save);
}

// MFU: model FLOPs per token (no recomputation counted) over the GPU's dense bf16 rate.
Json mfu_of(const TrainRun& run, double tokens_per_s) {
  const double peak_tflops = run.base.device == "cuda" ? gpu_peak_tflops(run.trainer->ops().name()) : 0;
  const double flops = model_flops_per_token(run.base.config, run.data->seq_len());
  return peak_tflops > 0 ? Json(tokens_per_s * flops / run.base.world / (peak_tflops * 1e12)) : Json(nullptr);
}

double peak_mem_gib(const TrainRun& run) {
  return run.base.device == "cuda" ? static_cast<double>(run.trainer->ops().memory_stats().peak) / (1ll << 30)
                                   : peak_rss_gib();
}

// The step's line (rank 0, every --log-every steps, the first and the last) and metrics.
// With an evaluation at this step, its loss goes into the line's metrics too.
void log_step(const TrainOptions& o, TrainRun& run, int64_t step, const StepStats& st, double seconds,
              double elapsed, double eta, const Json& eval_loss) {
  if (run.base.rank != 0 || !(step % o.log_every == 0 || step == o.steps || step == 1 || !eval_loss.is_null())) return;
  const double tps = static_cast<double>(run.per_step * run.base.world * run.data->seq_len()) / seconds;
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f tok/s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(o.steps), st.loss, st.grad_norm, st.lr, tps,
                format_hms(eta).c_str());
  log_info(line);
  if (run.metrics.is_open()) {
    // The plan of the device's memory; on the CPU, whose memory is not planned, none.
    const Json planned = run.base.device == "cuda"
                             ? Json(static_cast<double>(run.trainer->plan().total()) / (1ll << 30)) : Json(nullptr);
    Json m = {{"step", step}, {"loss", st.loss}, {"grad_norm", st.grad_norm}, {"lr", st.lr},
              {"tokens_per_s", tps}, {"mfu", mfu_of(run, tps)}, {"peak_mem_gib", peak_mem_gib(run)},
              {"planned_mem_gib", planned}, {"elapsed_s", elapsed}};
    if (!eval_loss.is_null()) m["eval_loss"] = eval_loss;
    run.metrics << m.dump() << "\n";
    run.metrics.flush();
  }
}

void save(TrainRun& run, int64_t step) {
  if (run.copies) {
    run.copies->report_finished();
    run.save.pinned = run.copies->pinned();
  }
  const SaveReport r = save_checkpoint(*run.trainer, run.base.comm.get(), run.save, run.order->after(step));
  if (run.copies) run.copies->start(r.path);
}

// The same command line without --resume: it resumes from the newest checkpoint.
std::string resume_command(const TrainOptions& o) {
  std::string cmd = "anvil train";
  for (size_t i = 0; i < o.args.size(); ++i) {
    const std::string& a = o.args[i];
    if (a == "--resume") {
      ++i;
      continue;
    }
    if (a.rfind("--resume=", 0) == 0) continue;
    const bool plain = a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
                       std::string::npos;
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " " + (plain && !a.empty() ? a : quoted + "'");
  }
  return cmd;
}

// A stop asked by SIGINT or SIGTERM, after `step`: the checkpoint (unless this step's was
// just written) and what to run to go on.
void stop_at(const TrainOptions& o, TrainRun& run, int64_t step, int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (o.ckpt_dir.empty()) {
    log_warn("stopped by ", name, " after step ", step, " of ", o.steps,
             ": nothing saved (without --ckpt-dir a stopped run keeps nothing)");
    return;
  }
  if (!(o.save_every > 0 && step % o.save_every == 0)) save(run, step);
  log_info("stopped by ", name, " after step ", step, " of ", o.steps, ": saved ",
           path_join(o.ckpt_dir, checkpoint_name(step)));
  log_info("to resume: ", resume_command(o));
}

// The eval loss over the whole eval set (every rank takes part), logged on rank 0.
double evaluate_and_log(const TrainOptions& o, TrainRun& run, int64_t step) {
  const BlockSource& ev_data = *run.eval_data;
  const EvalResult ev = evaluate(*run.trainer, run.base.comm.get(), ev_data.size(), o.micro_batch, ev_data.seq_len(),
                                 [&](int64_t block, TokenBatch& b) { ev_data.append(block, b); });
  char line[200];
  std::snprintf(line, sizeof line, "step %lld/%lld  eval loss %.4f  (%lld blocks, %lld tokens, %.1f s)",
                static_cast<long long>(step), static_cast<long long>(o.steps), ev.loss,
                static_cast<long long>(ev.blocks), static_cast<long long>(ev.tokens), ev.seconds);
  log_info(line);
  return ev.loss;
}

// 3. The loop: steps from the resumed one to --steps, a checkpoint every --save-every.
TrainSummary train_loop(const TrainOptions& o, TrainRun& run) {
  Progress progress(run.base.rank == 0);
  const StopOnSignal signals(run.base.rank == 0);
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t start = run.point.step, T = run.data->seq_len();
  TrainSummary summary;
  double timed_s = 0;
  int64_t timed_tokens = 0;
  const int64_t warm = o.steps > 10 ? 10 : 0;  // as the reference: the first 10 steps are not timed
  for (int64_t step = start + 1; step <= o.steps; ++step) {
    if (fault_armed(Fault::kHangAtStep, step, run.base.rank, run.base.world)) {
      log_error("fault hang_at_step (ANVIL_FAULT): rank ", run.base.rank, " stops answering before step ", step);
      while (StopOnSignal::requested() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<TokenBatch> micro(static_cast<size_t>(o.grad_accum));
    for (int64_t a = 0; a < o.grad_accum; ++a)
      for (int64_t b = 0; b < o.micro_batch; ++b)
        run.data->append(run.order->block(step, a * o.micro_batch + b), micro[static_cast<size_t>(a)]);
    const StepStats st = run.trainer->step(micro);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.losses.push_back(st.loss);
    if (step > warm) {
      timed_s += dt;
      timed_tokens += run.per_step * run.base.world * T;
    }
    Json eval_loss = nullptr;
    if (run.eval_data && (step == o.steps || (o.eval_every > 0 && step % o.eval_every == 0))) {
      progress.clear();
      eval_loss = evaluate_and_log(o, run, step);
      summary.eval_losses.push_back(eval_loss.get<double>());
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    const double eta = elapsed / static_cast<double>(step - start) * static_cast<double>(o.steps - step);
    progress.clear();
    log_step(o, run, step, st, dt, elapsed, eta, eval_loss);
    if (o.save_every > 0 && step % o.save_every == 0) save(run, step);
    if (run.copies) run.copies->report_finished();
    // Every rank stops after the same step: the signal may reach them at different times.
    int sig = StopOnSignal::requested();
    if (run.base.comm) sig = static_cast<int>(run.base.comm->host_max(static_cast<double>(sig), "stop signal"));
    if (sig != 0) {
      progress.clear();
      stop_at(o, run, step, sig);
      summary.stop_signal = sig;
      break;
    }
    progress.draw(step, o.steps, st.loss, eta);
  }
  progress.clear();
  summary.tokens_per_s = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0;
  return summary;
}

// The copies off the machine: wait for them, then keep_last applies to what they pinned.
void finish_copies(const TrainOptions& o, TrainRun& run) {
  if (!run.copies) return;
  const int failed = run.copies->wait_all();
  prune_checkpoints(o.ckpt_dir, o.keep_last, run.copies->pinned());
  if (failed > 0) log_warn("--on-save: ", failed, " cop", failed == 1 ? "y" : "ies", " failed (see above)");
}

// 4. Finish: the summary line, the export, the copies off the machine.
void finish_train(const TrainOptions& o, TrainRun& run, TrainSummary& summary) {
  summary.peak_host_gib = peak_rss_gib();
  if (summary.stop_signal != 0) {
    finish_copies(o, run);
    return;
  }
  char done[256];
  std::snprintf(done, sizeof done, "done: %lld steps, %.0f tokens/s%s", static_cast<long long>(o.steps),
                summary.tokens_per_s, o.steps > 10 ? " (first 10 steps excluded)" : "");
  std::string tail;
  if (run.base.device == "cuda") {
    const Json mfu = mfu_of(run, summary.tokens_per_s);
    const Ops::MemoryStats mem = run.trainer->ops().memory_stats();
    char m[200];
    if (!mfu.is_null()) {
      std::snprintf(m, sizeof m, ", MFU %.1f%%", 100.0 * mfu.get<double>());
      tail += m;
    }
    std::snprintf(m, sizeof m, ", peak GPU memory %.2f GiB allocated (planned %.2f GiB, recompute %s)",
                  static_cast<double>(mem.peak) / (1ll << 30),
                  static_cast<double>(run.trainer->plan().total()) / (1ll << 30),
                  recompute_name(run.trainer->recompute()));
    tail += m;
  }
  char host[64];
  std::snprintf(host, sizeof host, ", peak host memory %.2f GiB", summary.peak_host_gib);
  log_info(done, tail, host);

  if (!o.export_dir.empty()) {
    const HostUnits final_w = run.trainer->masters();  // a collective in FSDP: every rank
    if (run.base.rank == 0) {
      HfExportSettings ex;
      ex.out_dir = o.export_dir;
      ex.dtype = o.export_dtype == "fp32" ? DType::kF32 : DType::kBF16;
      ex.source_dirs = {run.base.model_dir, o.tokenizer};
      ex.config_toml = o.config_toml;
      export_model(run.base.config, *run.base.table, final_w, ex);
    }
  }
  finish_copies(o, run);
}

// The last line: the final losses, the time taken and where the model went.
void log_last_line(const TrainOptions& o, const TrainSummary& summary, double seconds) {
  std::string last = "finished";
  char part[160];
  if (!summary.losses.empty()) {
    std::snprintf(part, sizeof part, ": final loss %.4f", summary.losses.back());
    last += part;
    if (!summary.eval_losses.empty()) {
      std::snprintf(part, sizeof part, ", eval loss %.4f", summary.eval_losses.back());
      last += part;
    }
  }
  last += (summary.losses.empty() ? ": " : ", ") + std::string("elapsed ") + format_hms(seconds);
  last += o.export_dir.empty() ? ", no export (--export DIR writes one)" : ", model exported to " + o.export_dir;
  log_info(last);
}

}  // namespace

TrainSummary run_train(const TrainOptions& o) {
  const auto begin = std::chrono::steady_clock::now();
  TrainRun run;
  run.spec = check_train(o, run.ckpt_lock);
  open_train(o, run);
  TrainSummary summary = train_loop(o, run);
  finish_train(o, run, summary);
  if (summary.stop_signal == 0)
    log_last_line(o, summary, std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  return summary;
}

}  // namespace anvil
