// Opening a run (device, group, model config, weights, Trainer): see train/open_run.h.
#include "train/open_run.h"

#include "core/error.h"
#include "core/log.h"
#include "io/hub.h"

namespace anvil {

std::string resolve_device(const std::string& device) {
  const std::string d = !device.empty() ? device : (cuda_available() ? "cuda" : "cpu");
  ANVIL_ENSURE(d == "cpu" || d == "cuda", kUsage, "--device must be cpu or cuda, got '", d, "'");
  // No GPU where one is asked for: say so before any data is prepared or weights are read.
  if (d == "cuda" && !cuda_available()) make_ops(d, 0);
  return d;
}

void add_router_aux_loss(ModelConfig& c, const std::string& what) {
  ANVIL_ENSURE(c.sparse_layers() > 0, kUsage, "--router-aux-loss: ", what, " (", c.architecture,
               ") has no experts (the load-balancing loss is a mixture-of-experts model's)");
  c.moe.output_router_logits = true;
}

void make_tables(OpenRun& run, int64_t expert_parallel) {
  run.whole = std::make_unique<ParamTable>(run.config, run.world);
  run.table = std::make_unique<ParamTable>(run.config, run.world,
                                          ExpertLayout::where_valid(run.config, expert_parallel, run.rank, run.world));
}

OpenRun open_run(const ModelSection& m, int64_t expert_parallel) {
  OpenRun run;
  run.device = m.device;
  run.comm_options = comm_options_from_env();
  if (run.comm_options.joined) run.comm = make_comm(run.device == "cuda" ? Device::kCUDA : Device::kCPU, run.comm_options);
  run.world = run.comm ? run.comm->world() : 1;
  run.rank = run.comm ? run.comm->rank() : 0;
  if (run.rank != 0) log_set_level(LogLevel::kWarn);
  if (!m.model.empty()) {
    run.model_dir = resolve_model_dir(m.model);
    run.config = load_config(run.model_dir);
  } else {
    run.config = preset_config(m.preset);
  }
  if (m.router_aux_loss) add_router_aux_loss(run.config, m.model.empty() ? "the preset " + m.preset : m.model);
  make_tables(run, expert_parallel);
  return run;
}

UnitReader initial_weights(const OpenRun& run, int64_t seed, HostUnits& fresh) {
  if (!run.model_dir.empty()) return hf_weights_reader(run.model_dir, *run.table);
  // Drawn on the whole model's table (each tensor's generators are seeded by its place there),
  // so that a rank's experts are one process's.
  fresh = make_host_units(*run.whole);
  init_weights(run.config, *run.whole, static_cast<uint64_t>(seed), fresh);
  if (run.table->expert_layout().degree == 1) return host_units_reader(fresh);
  return host_units_reader(fresh, *run.whole, *run.table);
}

std::unique_ptr<Trainer> make_trainer(const ModelConfig& model, const UnitReader& weights, const TrainConfig& config,
                                      int64_t data_seq_len, Comm* comm, int device_index) {
  std::unique_ptr<Ops> ops = make_ops(config.model.device, device_index);
  RunFacts f;
  f.model = &model;
  f.world = comm ? comm->world() : 1;
  f.data_seq_len = data_seq_len;
  f.compute_dtype = ops->compute_dtype();
  f.capacity = ops->runtime().memory_stats().capacity;
  f.comm = comm;
  f.fp8_unsupported = ops->fp8_unsupported(config.parallel.fp8);
  return std::make_unique<Trainer>(model, weights, resolve_config(config, f), comm, std::move(ops));
}

std::unique_ptr<Trainer> make_trainer(OpenRun& run, const TrainConfig& config, int64_t data_seq_len,
                                      const UnitReader& weights) {
  return make_trainer(run.config, weights, config, data_seq_len, run.comm.get(),
                      run.comm ? run.comm->gpu() : run.comm_options.local_rank);
}

}  // namespace anvil
