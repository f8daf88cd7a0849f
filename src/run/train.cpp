#include "run/train.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "comm/comm.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "data/packing.h"
#include "data/sampler.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "run/bench_step.h"
#include "run/checkpoint.h"
#include "run/trainer.h"

namespace anvil {
namespace {

// Training blocks: token ids [N, T] from a safetensors file (input_ids), or a packed block
// file made by `anvil prepare`, or JSONL prepared on the fly into the cache.
class BlockSource {
 public:
  BlockSource(const TrainOptions& o, const std::string& model_dir, Comm* comm) {
    if (o.data.size() > 12 && o.data.compare(o.data.size() - 12, 12, ".safetensors") == 0) {
      file_ = std::make_unique<SafetensorsFile>(o.data);
      const SafeTensorInfo* ids = file_->find("input_ids");
      ANVIL_ENSURE(ids, kNotFound, o.data, ": no tensor input_ids");
      ANVIL_ENSURE(ids->shape.ndim == 2 && ids->shape[1] >= 2 && ids->shape[0] >= 1, kInvalidInput, o.data,
                   ": input_ids has shape ", ids->shape.str(), ", expected [N, T] with T >= 2");
      ids_ = read_as_i64(*ids);
      n_ = ids->shape[0];
      t_ = ids->shape[1];
      return;
    }
    if (is_directory(o.data) || (o.data.size() > 4 && o.data.compare(o.data.size() - 4, 4, ".bin") == 0)) {
      packed_ = std::make_unique<PackedDataset>(PackedDataset::open(o.data));
    } else {
      PrepareOptions p;
      p.tokenizer = !o.tokenizer.empty() ? o.tokenizer : model_dir;
      ANVIL_ENSURE(!p.tokenizer.empty(), kUsage, "anvil train: --tokenizer is needed to read JSONL with --preset");
      ANVIL_ENSURE(o.seq_len >= 2, kUsage, "anvil train: --seq-len is needed to pack JSONL data");
      p.data = {o.data};
      p.seq_len = o.seq_len;
      p.assistant_only_loss = o.assistant_only_loss;
      p.skip_bad_rows = o.skip_bad_rows;
      const std::string cache = !o.data_cache.empty() ? o.data_cache
                                : !env_str("XDG_CACHE_HOME", "").empty() ? path_join(env_str("XDG_CACHE_HOME", ""), "anvil")
                                : path_join(env_str("HOME", "."), ".cache/anvil");
      // Rank 0 prepares; the others open what it wrote.
      if (!comm || comm->rank() == 0) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
      if (comm) comm->barrier("data preparation");
      if (!packed_) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
    }
    n_ = packed_->num_blocks();
    t_ = packed_->seq_len();
    ANVIL_ENSURE(n_ >= 1, kInvalidInput, o.data, ": no complete block of ", t_, " tokens");
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

}  // namespace

TrainSummary run_train(const TrainOptions& o) {
  ANVIL_ENSURE(o.model.empty() != o.preset.empty(), kUsage, "anvil train: give exactly one of --model and --preset");
  ANVIL_ENSURE(!o.data.empty(), kUsage, "anvil train: --data is required");
  ANVIL_ENSURE(o.steps >= 1 && o.micro_batch >= 1 && o.grad_accum >= 1, kUsage,
               "anvil train: --steps, --micro-batch and --grad-accum must be at least 1");
  ANVIL_ENSURE(o.save_every >= 0 && o.keep_last >= 0, kUsage, "anvil train: --save-every and --keep-last are counts");
  ANVIL_ENSURE(o.save_every == 0 || !o.ckpt_dir.empty(), kUsage, "anvil train: --save-every needs --ckpt-dir");
  const std::string device = !o.device.empty() ? o.device : (cuda_available() ? "cuda" : "cpu");
  ANVIL_ENSURE(device == "cpu" || device == "cuda", kUsage, "anvil train: --device must be cpu or cuda, got '", device, "'");
  // No GPU where one is asked for: say so before any data is prepared or weights are read.
  if (device == "cuda" && !cuda_available()) make_ops(device, 0);
  // A worker of a launcher (anvil's own, torchrun, srun...) joins its group from RANK etc.
  std::unique_ptr<Comm> comm;
  const CommOptions copt = comm_options_from_env();
  if (copt.joined) comm = make_comm(device == "cuda" ? Device::kCUDA : Device::kCPU, copt);
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  if (rank != 0) log_set_level(LogLevel::kWarn);

  ModelConfig cfg;
  std::string model_dir;
  if (!o.model.empty()) {
    model_dir = resolve_model_dir(o.model);
    cfg = load_config(model_dir);
  } else {
    cfg = preset_config(o.preset);
  }
  ParamTable table(cfg, world);
  // Resuming: the newest complete checkpoint (or --resume), validated and checked against
  // the model before its weights replace the model's.
  const std::string resume = find_resume_checkpoint(o.ckpt_dir, o.resume);
  // The Trainer reads the weights unit by unit, each rank only what it owns (fresh weights
  // of a preset are made whole first).
  ResumePoint point;
  HostUnits fresh;
  UnitReader weights;
  if (!resume.empty()) {
    point = open_checkpoint(resume, table, comm.get());
    weights = checkpoint_masters_reader(point, table);
  } else if (!model_dir.empty()) {
    weights = hf_weights_reader(model_dir, table);
  } else {
    fresh = make_host_units(table);
    init_weights(cfg, table, static_cast<uint64_t>(o.seed), fresh);
    weights = host_units_reader(fresh);
  }

  const BlockSource data(o, model_dir, comm.get());
  ANVIL_ENSURE(o.seq_len == 0 || o.seq_len == data.seq_len(), kUsage, "anvil train: --seq-len ", o.seq_len,
               " differs from the ", data.seq_len(), " tokens per block of ", o.data);
  const int64_t T = data.seq_len(), N = data.size();
  const int64_t per_step = o.micro_batch * o.grad_accum;  // per rank
  ANVIL_ENSURE(N / world >= per_step, kInvalidInput, o.data, " holds ", N, " blocks, fewer than one step's ",
               per_step * world, " (micro-batch x grad-accum x ranks)");

  TrainerSettings s;
  s.device = device;
  s.device_index = copt.local_rank;
  s.mode = o.mode;
  s.micro_batch = o.micro_batch;
  s.seq_len = T;
  s.recompute = o.recompute == "full" ? Recompute::kFull : Recompute::kNone;
  s.optim = o.optim;
  s.total_steps = o.steps;
  s.auto_recompute = o.recompute == "auto";
  s.fsdp_defer_sync = o.fsdp_defer_sync;
  s.reduce_dtype = o.reduce_dtype;
  Trainer trainer(cfg, weights, s, comm.get());  // checks the memory plan before allocating
  weights = nullptr;
  fresh.clear();
  if (!resume.empty()) restore_optimizer(point, trainer);
  log_info("training ", cfg.architecture, " (", table.total_numel(), " parameters) on ", world, " x ", device, " (",
           parallel_mode_name(trainer.mode()), ", ", trainer.mode_reason(),
           o.reduce_dtype == DType::kBF16 ? "; gradients reduced in bf16" : "", "): ", N, " blocks of ", T, " tokens, ", o.steps, " steps of ", per_step * world,
           " sequences");

  // This rank's slice of each epoch (PyTorch's DistributedSampler with set_epoch); an epoch
  // ends when a whole step no longer fits, as a DataLoader with drop_last does.
  DistributedSampler sampler(N, world, rank, static_cast<uint64_t>(o.seed), o.shuffle, true);
  const int64_t steps_per_epoch = sampler.num_samples() / per_step;
  std::vector<int64_t> mine;
  int64_t epoch = -1;
  auto block_of = [&](int64_t index) {  // the index-th block this rank reads
    const int64_t e = index / (steps_per_epoch * per_step);
    if (e != epoch) {
      epoch = e;
      sampler.set_epoch(e);
      mine = sampler.indices();
    }
    return mine[static_cast<size_t>(index % (steps_per_epoch * per_step))];
  };

  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics, std::ios::app);
    ANVIL_ENSURE(metrics.good(), kIo, o.metrics, ": cannot open for writing");
  }

  // Where the data stands: this rank's next block index is first_index + (step - start) *
  // per_step. A checkpoint records the epoch and the blocks (all ranks) trained on in it,
  // so a resumed run skips them, with any number of ranks.
  const int64_t epoch_len = steps_per_epoch * per_step, start = point.step;
  int64_t first_index = 0;
  if (!resume.empty()) {
    first_index = point.position.epoch * epoch_len + std::min(point.position.samples_in_epoch / world, epoch_len);
    const Json& was = point.meta.value("train", Json::object());
    if (was.value("seed", o.seed) != o.seed || was.value("shuffle", o.shuffle) != o.shuffle ||
        was.value("global_batch", per_step * world) != per_step * world)
      log_warn("the checkpoint was trained with another seed, shuffle or global batch: the data order differs "
               "from an uninterrupted run");
    if (start >= o.steps) log_info("the checkpoint is at step ", start, " of --steps ", o.steps, ": nothing to train");
  }
  SaveSettings save;
  save.ckpt_dir = o.ckpt_dir;
  save.keep_last = o.keep_last;
  save.model_dir = model_dir;
  save.tokenizer_dir = o.tokenizer;
  save.train = {{"data", o.data}, {"seed", o.seed}, {"shuffle", o.shuffle}, {"steps", o.steps},
                {"micro_batch", o.micro_batch}, {"grad_accum", o.grad_accum}, {"global_batch", per_step * world},
                {"seq_len", T}, {"lr", o.optim.lr}};

  // MFU: model FLOPs per token (no recomputation counted) over the GPU's dense bf16 rate.
  const double peak_tflops = device == "cuda" ? gpu_peak_tflops(trainer.ops().name()) : 0;
  const double flops_per_token = model_flops_per_token(cfg, T);
  auto mfu_of = [&](double tokens_per_s) {
    return peak_tflops > 0 ? Json(tokens_per_s * flops_per_token / world / (peak_tflops * 1e12)) : Json(nullptr);
  };
  auto peak_mem_gib = [&] {
    return device == "cuda" ? static_cast<double>(trainer.ops().memory_stats().peak) / (1ll << 30) : peak_rss_gib();
  };
  Progress progress(rank == 0);
  const auto run_start = std::chrono::steady_clock::now();

  TrainSummary summary;
  double timed_s = 0;
  int64_t timed_tokens = 0;
  const int64_t warm = o.steps > 10 ? 10 : 0;  // as the reference: the first 10 steps are not timed
  for (int64_t step = start + 1; step <= o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t index = first_index + (step - start - 1) * per_step;
    std::vector<TokenBatch> micro(static_cast<size_t>(o.grad_accum));
    for (int64_t a = 0; a < o.grad_accum; ++a)
      for (int64_t b = 0; b < o.micro_batch; ++b) {
        data.append(block_of(index + a * o.micro_batch + b), micro[static_cast<size_t>(a)]);
      }
    const StepStats st = trainer.step(micro);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.losses.push_back(st.loss);
    if (step > warm) {
      timed_s += dt;
      timed_tokens += per_step * world * T;
    }
    if (rank == 0 && (step % o.log_every == 0 || step == o.steps || step == 1)) {
      const double tps = static_cast<double>(per_step * world * T) / dt;
      char line[256];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f tok/s",
                    static_cast<long long>(step), static_cast<long long>(o.steps), st.loss, st.grad_norm, st.lr, tps);
      progress.clear();
      log_info(line);
      if (metrics.is_open()) {
        Json m = {{"step", step}, {"loss", st.loss}, {"grad_norm", st.grad_norm}, {"lr", st.lr},
                  {"tokens_per_s", tps}, {"mfu", mfu_of(tps)}, {"peak_mem_gib", peak_mem_gib()}};
        metrics << m.dump() << "\n";
        metrics.flush();
      }
    }
    if (o.save_every > 0 && step % o.save_every == 0) {
      const int64_t next = index + per_step;  // this rank's next block
      progress.clear();
      save_checkpoint(trainer, comm.get(), save, {next / epoch_len, (next % epoch_len) * world});
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    progress.draw(step, o.steps, st.loss, elapsed / static_cast<double>(step - start) * static_cast<double>(o.steps - step));
  }
  progress.clear();
  summary.tokens_per_s = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0;
  summary.peak_host_gib = peak_rss_gib();
  char done[256];
  std::snprintf(done, sizeof done, "done: %lld steps, %.0f tokens/s%s", static_cast<long long>(o.steps),
                summary.tokens_per_s, warm ? " (first 10 steps excluded)" : "");
  std::string tail;
  if (device == "cuda") {
    const Json mfu = mfu_of(summary.tokens_per_s);
    const Ops::MemoryStats mem = trainer.ops().memory_stats();
    char m[200];
    if (!mfu.is_null()) {
      std::snprintf(m, sizeof m, ", MFU %.1f%%", 100.0 * mfu.get<double>());
      tail += m;
    }
    std::snprintf(m, sizeof m, ", peak GPU memory %.2f GiB allocated (planned %.2f GiB, recompute %s)",
                  static_cast<double>(mem.peak) / (1ll << 30), static_cast<double>(trainer.plan().total()) / (1ll << 30),
                  trainer.recompute() == Recompute::kFull ? "full" : "none");
    tail += m;
  }
  char host[64];
  std::snprintf(host, sizeof host, ", peak host memory %.2f GiB", summary.peak_host_gib);
  log_info(done, tail, host);

  if (!o.export_dir.empty()) {
    const HostUnits final_w = trainer.masters();  // a collective in FSDP: every rank
    if (rank != 0) return summary;
    HfExportSettings ex;
    ex.out_dir = o.export_dir;
    ex.dtype = o.export_dtype == "fp32" ? DType::kF32 : DType::kBF16;
    ex.source_dirs = {model_dir, o.tokenizer};
    export_hf_folder(cfg, table, final_w, ex);
  }
  return summary;
}

}  // namespace anvil
