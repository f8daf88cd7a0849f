#include "run/train.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "core/env.h"
#include "core/json.h"
#include "core/log.h"
#include "io/hub.h"
#include "comm/comm.h"
#include "io/safetensors.h"
#include "run/trainer.h"

namespace anvil {
namespace {

// Token blocks from a safetensors file, read through the mapping.
struct BlockSource {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<int64_t> ids;  // N * T
  int64_t n = 0, t = 0;
};

BlockSource open_blocks(const std::string& path) {
  BlockSource s;
  s.file = std::make_unique<SafetensorsFile>(path);
  const SafeTensorInfo* ids = s.file->find("input_ids");
  ANVIL_ENSURE(ids, kNotFound, path, ": no tensor input_ids");
  ANVIL_ENSURE(ids->shape.ndim == 2 && ids->shape[1] >= 2 && ids->shape[0] >= 1, kInvalidInput, path,
               ": input_ids has shape ", ids->shape.str(), ", expected [N, T] with T >= 2");
  s.ids = read_as_i64(*ids);
  s.n = ids->shape[0];
  s.t = ids->shape[1];
  return s;
}

// DistributedSampler(shuffle, seed, drop_last=True) with set_epoch(epoch): rank r reads
// positions r, r + world, ... of the epoch's order, cut to a multiple of world.
std::vector<int64_t> sampler_indices(int64_t n, int world, int rank, int64_t epoch, int64_t seed, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003ull + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  const int64_t per_rank = n / world;
  std::vector<int64_t> mine(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < per_rank; ++i) mine[static_cast<size_t>(i)] = order[static_cast<size_t>(i * world + rank)];
  return mine;
}

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
  const std::string device = !o.device.empty() ? o.device : (cuda_available() ? "cuda" : "cpu");
  // A worker of a launcher (anvil's own, torchrun, srun...) joins its group from RANK etc.
  std::unique_ptr<Comm> comm;
  const CommOptions copt = comm_options_from_env();
  if (env_rank() >= 0) comm = make_comm(device == "cuda" ? Device::kCUDA : Device::kCPU, copt);
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
  HostUnits weights = make_host_units(table);
  if (!model_dir.empty()) load_hf_weights(model_dir, table, weights);
  else init_weights(cfg, table, static_cast<uint64_t>(o.seed), weights);

  BlockSource data = open_blocks(o.data);
  ANVIL_ENSURE(o.seq_len == 0 || o.seq_len == data.t, kUsage, "anvil train: --seq-len ", o.seq_len, " differs from the ",
               data.t, " tokens per block of ", o.data);
  const int64_t per_step = o.micro_batch * o.grad_accum;  // per rank
  ANVIL_ENSURE(data.n / world >= per_step, kInvalidInput, o.data, " holds ", data.n, " blocks, fewer than one step's ",
               per_step * world, " (micro-batch x grad-accum x ranks)");

  TrainerSettings s;
  s.device = device;
  s.device_index = copt.local_rank;
  s.mode = parse_parallel_mode(o.mode);
  s.micro_batch = o.micro_batch;
  s.seq_len = data.t;
  s.recompute = o.recompute == "full" ? Recompute::kFull : Recompute::kNone;
  s.optim = o.optim;
  s.total_steps = o.steps;
  Trainer trainer(cfg, weights, s, comm.get());
  weights.clear();
  log_info("training ", cfg.architecture, " (", table.total_numel(), " parameters) on ", world, " x ", device, " (",
           o.mode, "): ", data.n, " blocks of ", data.t, " tokens, ", o.steps, " steps of ", per_step * world,
           " sequences");

  // This rank's slice of each epoch; an epoch ends when a whole step no longer fits.
  const int64_t steps_per_epoch = (data.n / world) / per_step;
  std::vector<int64_t> mine;
  int64_t epoch = -1;
  auto block_of = [&](int64_t index) {  // index-th block this rank reads
    const int64_t e = index / (steps_per_epoch * per_step);
    if (e != epoch) {
      epoch = e;
      mine = sampler_indices(data.n, world, rank, e, o.seed, o.shuffle);
    }
    return mine[static_cast<size_t>(index % (steps_per_epoch * per_step))];
  };

  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics, std::ios::app);
    ANVIL_ENSURE(metrics.good(), kIo, o.metrics, ": cannot open for writing");
  }
  TrainSummary summary;
  double timed_s = 0;
  int64_t timed_tokens = 0;
  const int64_t warm = o.steps > 10 ? 10 : 0;  // as the reference: the first 10 steps are not timed
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<TokenBatch> micro(static_cast<size_t>(o.grad_accum));
    for (int64_t a = 0; a < o.grad_accum; ++a)
      for (int64_t b = 0; b < o.micro_batch; ++b) {
        const int64_t blk = block_of((step - 1) * per_step + a * o.micro_batch + b);
        auto first = data.ids.begin() + blk * data.t;
        micro[static_cast<size_t>(a)].ids.insert(micro[static_cast<size_t>(a)].ids.end(), first, first + data.t);
      }
    const StepStats st = trainer.step(micro);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    summary.losses.push_back(st.loss);
    if (step > warm) {
      timed_s += dt;
      timed_tokens += per_step * world * data.t;
    }
    if (rank == 0 && (step % o.log_every == 0 || step == o.steps || step == 1)) {
      const double tps = static_cast<double>(per_step * world * data.t) / dt;
      char line[256];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f tok/s",
                    static_cast<long long>(step), static_cast<long long>(o.steps), st.loss, st.grad_norm, st.lr, tps);
      log_info(line);
      if (metrics.is_open()) {
        Json m = {{"step", step}, {"loss", st.loss}, {"grad_norm", st.grad_norm}, {"lr", st.lr},
                  {"tokens_per_s", tps}, {"peak_mem_gib", peak_rss_gib()}};
        metrics << m.dump() << "\n";
        metrics.flush();
      }
    }
  }
  summary.tokens_per_s = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0;
  summary.peak_host_gib = peak_rss_gib();
  log_info("done: ", o.steps, " steps, ", static_cast<int64_t>(summary.tokens_per_s), " tokens/s",
           warm ? " (first 10 steps excluded)" : "", ", peak host memory ", summary.peak_host_gib, " GiB");

  if (!o.export_dir.empty()) {
    const HostUnits final_w = trainer.masters();  // a collective in FSDP: every rank
    if (rank != 0) return summary;
    make_directories(o.export_dir);
    Json j = cfg.raw.is_object() ? cfg.raw : config_to_json(cfg);
    j["dtype"] = "bfloat16";
    json_write_file(path_join(o.export_dir, "config.json"), j);
    save_hf_weights(path_join(o.export_dir, "model.safetensors"), table, final_w, DType::kBF16);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                          "special_tokens_map.json", "vocab.json", "merges.txt"})
      if (!model_dir.empty() && path_exists(path_join(model_dir, f)))
        write_file_atomic(path_join(o.export_dir, f), read_file(path_join(model_dir, f)));
    log_info("exported ", o.export_dir, " (bf16 safetensors)");
  }
  return summary;
}

}  // namespace anvil
