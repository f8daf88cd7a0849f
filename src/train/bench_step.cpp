#include "train/bench_step.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "model/expert_parallel.h"
#include "model/init.h"
#include "plan/step_model.h"
#include "train/open_run.h"

namespace anvil {

double model_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  // The input embedding is a lookup, not a product; a tied matrix is used as the output
  // projection, an untied output layer is a product of its own. A token of a MoE model meets
  // the router and top_k of the num_experts experts in each sparse layer: the other experts'
  // gate, up and down projections (3 x hidden x moe_intermediate each) are not its products.
  const double idle_experts = static_cast<double>(c.sparse_layers()) *
                              static_cast<double>(c.moe.num_experts - c.moe.top_k) * 3.0 *
                              static_cast<double>(c.hidden_size * c.moe.intermediate);
  const double matmul_params = static_cast<double>(c.num_parameters()) - idle_experts -
                               (c.tie_word_embeddings ? 0.0 : static_cast<double>(c.vocab_size * c.hidden_size));
  return 6.0 * matmul_params + 6.0 * static_cast<double>(c.num_layers * seq_len * c.q_dim());
}

double gpu_peak_tflops(const std::string& name) {
  const GpuSpec* g = find_gpu_spec(name);
  return g ? g->peak_tflops : 0;
}

double gpu_peak_fp8_tflops(const std::string& name) {
  const GpuSpec* g = find_gpu_spec(name);
  return g ? g->peak_fp8_tflops : 0;
}

namespace {

// `steps` steps with every op timed: per step, each op's calls, device and host milliseconds
// (by op and shape, the largest device time first) and the main queue's span.
Json time_ops(Trainer& trainer, const std::vector<std::vector<TokenBatch>>& batches, size_t& next, int64_t steps) {
  std::vector<Runtime::OpTime> sum;
  std::map<std::string, size_t> row;
  double span = 0;
  for (int64_t k = 0; k < steps; ++k) {
    trainer.ops().runtime().set_op_timing(true);
    trainer.step(batches[next++]);
    trainer.ops().runtime().set_op_timing(false);
    const Runtime::OpTimes t = trainer.ops().runtime().take_op_times();
    span += t.span_ms;
    for (const Runtime::OpTime& op : t.ops) {
      auto [it, fresh] = row.emplace(op.op, sum.size());
      if (fresh) sum.push_back({op.op, 0, 0, 0});
      Runtime::OpTime& s = sum[it->second];
      s.calls += op.calls;
      s.device_ms += op.device_ms;
      s.host_ms += op.host_ms;
    }
  }
  std::stable_sort(sum.begin(), sum.end(),
                   [](const Runtime::OpTime& a, const Runtime::OpTime& b) { return a.device_ms > b.device_ms; });
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  Json ops = Json::array();
  for (const Runtime::OpTime& op : sum)
    ops.push_back(Json{{"op", op.op},
                       {"calls", static_cast<double>(op.calls) / n},
                       {"device_ms", op.device_ms / n},
                       {"host_ms", op.host_ms / n}});
  return Json{{"steps", steps}, {"span_ms", span / n}, {"ops", ops}};
}

// Random tokens for every step the benchmark runs, different on each rank.
std::vector<std::vector<TokenBatch>> random_batches(const TrainConfig& c, int64_t vocab, int rank, size_t steps) {
  std::mt19937_64 rng(static_cast<uint64_t>(c.seed) + 17 * static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<std::vector<TokenBatch>> batches(steps);
  for (auto& micro : batches) {
    micro.resize(static_cast<size_t>(c.data.grad_accum));
    for (auto& b : micro) {
      b.ids.resize(static_cast<size_t>(c.data.micro_batch * c.data.seq_len));
      for (auto& id : b.ids) id = token(rng);
    }
  }
  return batches;
}

// The sums of `steps` more steps' phases, with the device synchronised at each boundary.
StepTiming time_phases(Trainer& trainer, const std::vector<std::vector<TokenBatch>>& batches, size_t& next,
                       int64_t steps) {
  trainer.enable_timing(true);
  StepTiming sum;
  for (int64_t k = 0; k < steps; ++k) {
    trainer.step(batches[next++]);
    const StepTiming& t = trainer.last_timing();
    sum.forward += t.forward;
    sum.backward += t.backward;
    sum.communication += t.communication;
    sum.optimizer += t.optimizer;
  }
  trainer.enable_timing(false);
  return sum;
}

// The real tokens (padding excluded) of batches [first, last), one rank's.
int64_t real_tokens(const std::vector<std::vector<TokenBatch>>& batches, int64_t first, int64_t last) {
  int64_t n = 0;
  for (int64_t s = first; s < last; ++s)
    for (const TokenBatch& b : batches[static_cast<size_t>(s)]) n += b.real_tokens();
  return n;
}

// What measure() timed: the throughput's steps and their real tokens (all ranks), and the
// phases' sums over phase_steps.
struct Timings {
  double timed = 0;
  int64_t timed_steps = 0, timed_tokens = 0, phase_steps = 0;
  StepTiming phases;
};

// The JSON line of the run: tokens/s, the step and its phases in ms, MFU, memory.
Json result_json(Trainer& trainer, const OpenRun& run, const BenchStepOptions& o, const Timings& t) {
  const TrainConfig& c = trainer.settings().config;
  const double tps = static_cast<double>(t.timed_tokens) / t.timed;
  const double n = static_cast<double>(t.timed_steps), np = static_cast<double>(std::max<int64_t>(t.phase_steps, 1));
  const ModelConfig& cfg = run.config;
  const std::string dev_name = trainer.ops().runtime().name();
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : gpu_peak_tflops(dev_name);
  const Runtime::MemoryStats mem = trainer.ops().runtime().memory_stats();
  const double flops = model_flops_per_token(cfg, c.data.seq_len);
  Json j = {{"bench", "step"},
            {"model", c.model.model.empty() ? c.model.preset : c.model.model},
            {"params", cfg.num_parameters()},
            {"num_layers", cfg.num_layers},
            {"device", dev_name},
            {"world", run.world},
            {"mode", parallel_mode_name(trainer.mode())},
            {"reduce_dtype", c.parallel.reduce_dtype == DType::kBF16 ? "bf16" : "fp32"},
            {"grad_dtype", trainer.grad_dtype() == DType::kBF16 ? "bf16" : "fp32"},
            {"recompute", recompute_name(trainer.recompute())},
            {"mlp_tile", c.parallel.mlp_tile},
            {"offload_activations", c.parallel.offload_activations},
            {"host_activations_gib", static_cast<double>(trainer.plan().host_activations) / (1ll << 30)},
            {"seq_len", c.data.seq_len},
            {"micro_batch", c.data.micro_batch},
            {"grad_accum", c.data.grad_accum},
            {"context_parallel", c.parallel.context_parallel},
            {"expert_parallel", c.parallel.expert_parallel},
            {"overlap_optimizer", c.parallel.overlap_optimizer},
            {"tokens_per_s", tps},
            {"step_ms", 1e3 * t.timed / n},
            {"forward_ms", 1e3 * t.phases.forward / np},
            {"backward_ms", 1e3 * t.phases.backward / np},
            {"communication_ms", 1e3 * t.phases.communication / np},
            {"optimizer_ms", 1e3 * t.phases.optimizer / np},
            {"flops_per_token", flops},
            {"peak_allocated_gib", static_cast<double>(mem.peak) / (1ll << 30)},
            {"planned_gib", static_cast<double>(trainer.plan().total()) / (1ll << 30)}};
  if (const ExpertParallel* x = trainer.expert_parallel()) {
    j["expert_rows_max"] = x->most().local;  // this rank's, received for its experts
    j["expert_rows_planned"] = x->planned().local;
  }
    j["mfu"] = peak > 0 ? Json(tps * flops / run.world / (peak * 1e12)) : Json(nullptr);
  j["peak_tflops"] = peak > 0 ? Json(peak) : Json(nullptr);
  // With FP8 block linears also against the FP8 peak (the GEMMs outside the blocks stay bf16,
  // so the truth lies between the two).
  j["fp8"] = fp8_recipe_name(c.parallel.fp8);
  if (c.parallel.fp8 != Fp8Recipe::kOff) {
    const double peak8 = gpu_peak_fp8_tflops(dev_name);
    j["mfu_fp8"] = peak8 > 0 ? Json(tps * flops / run.world / (peak8 * 1e12)) : Json(nullptr);
    j["peak_fp8_tflops"] = peak8 > 0 ? Json(peak8) : Json(nullptr);
  }
  return j;
}

// The setting the trainer runs (every auto resolved), as the step model reads it.
PlannedRun planned(Trainer& trainer, const OpenRun& run) {
  const TrainConfig& c = trainer.settings().config;
  return {run.config, c.data, c.parallel, run.world, trainer.ops().compute_dtype()};
}

// The step model's figures for this setting on this GPU (null on a GPU it does not know, with
// context parallelism, whose all-to-alls it does not price, and with FP8 where the
// table has no FP8 linear rates).
Json predicted_json(Trainer& trainer, const OpenRun& run, const BenchStepOptions& o) {
  const GpuSpec* gpu = find_gpu_spec(trainer.ops().runtime().name());
  const ParallelSection& ps = trainer.settings().config.parallel;
  if (!gpu || ps.context_parallel > 1) return Json(nullptr);  // not modelled
  const OpCostTable table = OpCostTable::load(o.op_table);
  if (ps.fp8 != Fp8Recipe::kOff && !table.why_not_fp8(*gpu).empty()) return Json(nullptr);
  const double bus = o.bus_gbps > 0 ? o.bus_gbps : gpu->bus_gbps;
  const StepPrediction p = predict_step(planned(trainer, run), table, *gpu, bus);
  return Json{{"tokens_per_s", p.tokens_per_s}, {"step_ms", 1e3 * p.step_s},
              {"forward_ms", 1e3 * p.forward_s}, {"backward_ms", 1e3 * p.backward_s},
              {"optimizer_ms", 1e3 * p.optimizer_s}, {"communication_ms", 1e3 * p.comm_s},
              {"exposed_ms", 1e3 * p.exposed_s},
              {"slowed_ms", 1e3 * p.slowed_s}, {"comm_overlap_cost", table.comm_overlap_cost},
              {"op_table_measured", table.measured}, {"bus_gbps", run.world > 1 ? Json(bus) : Json(nullptr)}};
}

// --write-op-table: the op-cost table fitted to the timed ops of this step, whose untimed
// time is the throughput's (plan/op_costs.h, fit_op_table), merged into the file's table
// when it holds an earlier fit of this GPU (another shape's sizes), else into the built-in
// one. Only a step whose ops ran alone on the GPU prices them: one process, the optimizer not
// overlapped.
void write_op_table(Trainer& trainer, const OpenRun& run, const BenchStepOptions& o, const Json& op_times,
                    double step_ms) {
  const GpuSpec* gpu = find_gpu_spec(trainer.ops().runtime().name());
  ANVIL_ENSURE(gpu, kUsage, "anvil bench step: --write-op-table needs a GPU the step model knows (",
               known_gpu_names(), "); this is ", trainer.ops().runtime().name());
  std::vector<Runtime::OpTime> measured;
  for (const Json& op : op_times.at("ops"))
    measured.push_back({op.at("op").get<std::string>(), static_cast<int64_t>(op.at("calls").get<double>() + 0.5),
                        op.at("device_ms").get<double>(), op.at("host_ms").get<double>()});
  const TrainConfig& c = trainer.settings().config;
  const std::string source =
      cat("measured by anvil bench step --op-times on ", trainer.ops().runtime().name(), ": ",
          c.model.model.empty() ? c.model.preset : c.model.model, ", seq ", c.data.seq_len, ", micro-batch ",
          c.data.micro_batch, ", recompute ", recompute_name(trainer.recompute()),
          c.parallel.fp8 == Fp8Recipe::kOff ? "" : cat(", fp8 ", fp8_recipe_name(c.parallel.fp8)));
  const OpCostTable fit = fit_op_table(step_program(planned(trainer, run)), measured, step_ms, *gpu, source);
  const OpCostTable base = path_exists(o.write_op_table) ? OpCostTable::load(o.write_op_table) : OpCostTable::builtin();
  json_write_file(o.write_op_table, merge_op_tables(fit, base).to_json());
}

// Throughput (the timed steps back to back, the device synchronised only around them), the
// phases of up to 3 more steps, and with op_times each op's time over up to 3 more.
Json measure(Trainer& trainer, const OpenRun& run, const BenchStepOptions& o) {
  const TrainConfig& c = trainer.settings().config;
  const int64_t phase_steps = std::min<int64_t>(3, c.steps - o.warmup);
  const auto batches = random_batches(c, run.config.vocab_size, trainer.data_rank(),
                                      static_cast<size_t>(c.steps + (o.op_times ? 2 : 1) * phase_steps));
  size_t next = 0;
  for (int64_t step = 1; step <= o.warmup; ++step) trainer.step(batches[next++]);
  trainer.ops().runtime().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = o.warmup + 1; step <= c.steps; ++step) trainer.step(batches[next++]);
  trainer.ops().runtime().synchronize();
  Timings t;
  t.timed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.timed_steps = c.steps - o.warmup;
  t.timed_tokens = real_tokens(batches, o.warmup, c.steps) * trainer.data_world();
  t.phase_steps = phase_steps;
  t.phases = time_phases(trainer, batches, next, phase_steps);
  const Json op_times = o.op_times ? time_ops(trainer, batches, next, phase_steps) : Json(nullptr);
  Json j = result_json(trainer, run, o, t);
  j["predicted"] = predicted_json(trainer, run, o);
  if (o.op_times) j["op_times"] = op_times;
  if (!o.write_op_table.empty() && run.rank == 0)
    write_op_table(trainer, run, o, op_times, 1e3 * t.timed / static_cast<double>(t.timed_steps));
  return j;
}

// --num-layers: the first n layers of the preset or of the folder's config, with fresh weights;
// the config is anvil init --num-layers's (model/init.h).
void shorten(OpenRun& run, const ModelSection& m, int64_t n, int64_t expert_parallel) {
  run.config = init_config(run.model_dir.empty() ? "" : path_join(run.model_dir, "config.json"), m.preset, n);
  if (m.router_aux_loss) add_router_aux_loss(run.config, m.model.empty() ? "the preset " + m.preset : m.model);
  make_tables(run, expert_parallel);
  run.model_dir.clear();  // initial_weights: fresh ones
}

}  // namespace

Json run_bench_step(const BenchStepOptions& options) {
  TrainConfig c = options.config;
  ANVIL_ENSURE(c.steps > options.warmup && options.warmup >= 0, kUsage,
               "anvil bench step: --steps must exceed --warmup");
  ANVIL_ENSURE(options.write_op_table.empty() || (options.op_times && !c.parallel.overlap_optimizer), kUsage,
               "anvil bench step: --write-op-table fits the timed ops of steps whose ops run alone: add --op-times "
               "--no-overlap-optimizer");
  ANVIL_ENSURE(c.model.model.empty() != c.model.preset.empty(), kUsage,
               "anvil bench step: give exactly one of --model and --preset");
  c.model.device = resolve_device(c.model.device);
  OpenRun run = open_run(c.model, c.parallel.expert_parallel);
  if (options.num_layers != 0) shorten(run, c.model, options.num_layers, c.parallel.expert_parallel);
  ANVIL_ENSURE(options.write_op_table.empty() || run.world == 1, kUsage,
               "anvil bench step: --write-op-table measures one GPU's ops: run it without --nproc-per-node");
  std::unique_ptr<Trainer> trainer;
  {
    HostUnits fresh;
    // The random blocks are the data: kSeqLenWithoutData tokens unless --seq-len says.
    trainer = make_trainer(run, c, kSeqLenWithoutData, initial_weights(run, c.seed, fresh));  // checks the plan first
  }
  return measure(*trainer, run, options);
}

}  // namespace anvil
