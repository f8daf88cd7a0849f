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

OpenRun open_run(const RunSpec& spec) {
  OpenRun run;
  run.device = resolve_device(spec.device);
  run.comm_options = comm_options_from_env();
  if (run.comm_options.joined) run.comm = make_comm(run.device == "cuda" ? Device::kCUDA : Device::kCPU, run.comm_options);
  run.world = run.comm ? run.comm->world() : 1;
  run.rank = run.comm ? run.comm->rank() : 0;
  if (run.rank != 0) log_set_level(LogLevel::kWarn);
  if (!spec.model.empty()) {
    run.model_dir = resolve_model_dir(spec.model);
    run.config = load_config(run.model_dir);
  } else {
    run.config = preset_config(spec.preset);
  }
  run.table = std::make_unique<ParamTable>(run.config, run.world);
  return run;
}

UnitReader initial_weights(const OpenRun& run, int64_t seed, HostUnits& fresh) {
  if (!run.model_dir.empty()) return hf_weights_reader(run.model_dir, *run.table);
  fresh = make_host_units(*run.table);
  init_weights(run.config, *run.table, static_cast<uint64_t>(seed), fresh);
  return host_units_reader(fresh);
}

std::unique_ptr<Trainer> make_trainer(OpenRun& run, const RunSpec& spec, int64_t seq_len, const UnitReader& weights) {
  TrainerSettings s;
  s.device = run.device;
  s.device_index = run.comm_options.local_rank;
  s.mode = spec.mode;
  s.reduce_dtype = spec.reduce_dtype;
  s.micro_batch = spec.micro_batch;
  s.grad_accum = spec.grad_accum;
  s.grad_dtype = spec.grad_dtype;
  s.seq_len = seq_len;
  s.recompute = spec.recompute;
  s.overlap_optimizer = spec.overlap_optimizer;
  s.fsdp_defer_sync = spec.fsdp_defer_sync;
  s.optim = spec.optim;
  s.total_steps = spec.total_steps;
  return std::make_unique<Trainer>(run.config, weights, s, run.comm.get());
}

}  // namespace anvil
