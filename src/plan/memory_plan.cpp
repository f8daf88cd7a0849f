// The memory plan's formulas (plan/memory_plan.h), the advice of the rule, and its table.
#include "plan/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/units.h"
#include "model/expert_parallel.h"
#include "model/params.h"
#include "ops/attention_scratch.h"
#include "parallel/store_pool.h"

namespace anvil {
namespace {


// When neither mode fits: whether --recompute full with --offload-activations would.
std::string offload_advice(const PlannedRun& run, int64_t gpu_bytes) {
  if (run.parallel.offload_activations) return "";
  ParallelSection x = run.parallel;
  x.offload_activations = true;
  x.recompute = Recompute::kFull;
  for (ParallelMode mode : kRunModes) {
    x.mode = mode;
    const MemoryPlan p = plan_memory({run.model, run.data, x, run.world, run.compute_dtype});
    if (plan_fits(p, gpu_bytes))
      return "; " + std::string(parallel_mode_name(mode)) + " fits with --recompute full --offload-activations (" +
             gib(p.total()) + " GiB planned; the checkpoints take " + gib(p.host_activations) +
             " GiB of pinned host memory per rank)";
  }
  return "";
}

}  // namespace

int64_t host_snapshot_bytes(const ParamTable& table) {
  int64_t sliced = 0;
  for (const UnitInfo& u : table.units()) sliced += u.shard();
  return 12 * sliced;
}

namespace {

// params, grads, optimizer and weights: the units as parallel/param_store.cpp holds them.
// Masters take 4 bytes per element, whole or split (their bf16 high halves are the compute
// weights: DDP holds no other copy, FSDP gathers them, zero2 holds them whole and owns a
// slice of them: cd bytes per element whole, 4 - cd per owned element). Across ranks the
// store's pool (parallel/store_pool.h: FSDP's gathers in weights; the full-unit gradients
// and wire copies in grads) and, sharded, the reduce-scatter's outputs (parallel/grad_reducer.h:
// the largest shard in F32, and in BF16 on a bf16 wire). Expert parallel: the rank's table
// (model/params.h, ExpertLayout; every rank's experts are the same size), whose experts units
// are held whole in every mode (masters, the blocks' gradient dtype, AdamW state), outside the
// pool and the reduce-scatter.
void plan_model_states(const PlannedRun& run, MemoryPlan& p) {
  const bool sharded = shards_state(run.parallel.mode) && run.world > 1;
  const bool zero2 = sharded && run.parallel.mode == ParallelMode::kZero2;
  const ParamTable table(run.model, run.world,
                         ExpertLayout::where_valid(run.model, run.parallel.expert_parallel, 0, run.world));
  const int64_t cd = static_cast<int64_t>(dtype_size(run.compute_dtype));
  int64_t largest_shard = 0;
  for (size_t i = 0; i < table.units().size(); ++i) {
    const UnitInfo& u = table.units()[i];
    const bool shard = sharded && !u.experts;
    const int64_t mine = shard ? u.shard() : u.padded;
    const bool once = table.grads_written_once(static_cast<int>(i));
    const int64_t g = static_cast<int64_t>(dtype_size(once ? blocks_grad_dtype(run.parallel) : DType::kF32));
    p.params += zero2 && !u.experts ? cd * u.padded + (4 - cd) * mine : 4 * mine;
    p.optimizer += 8 * mine;
    p.grads += mine * (shard ? 4 : g);  // sharded: F32 owned shards
    if (!u.experts) largest_shard = std::max(largest_shard, u.shard());
  }
  // The snapshot is a rank's slice of the table it trains (an experts unit's: its replica's).
  p.host_snapshot = host_snapshot_bytes(table);
  const ParallelSection& par = run.parallel;
  const PooledBytes pooled = replay_pool(table, {par.mode, run.compute_dtype, blocks_grad_dtype(par), par.reduce_dtype,
                                                 par.fsdp_defer_sync, run.data.grad_accum});
  p.weights = pooled.gathers;
  p.grads += pooled.grads;
  if (sharded) p.grads += largest_shard * (4 + (par.reduce_dtype == DType::kBF16 ? 2 : 0));
  const int degree = table.expert_layout().degree;
  if (degree > 1)
    p.exchange = expert_parallel_bytes(
        run.model, degree, planned_expert_rows(run.model, run.data.micro_batch * run.data.seq_len, degree),
        run.compute_dtype);
}

// The backend's workspace table for the plan's micro-batch (ops/workspace.h: the CPU's F32
// compute, CUDA's BF16), and three I32 per token and two F32 (the trainer's ids, targets and
// positions, its loss sum and the gradient norm's scalar); with --objective dpo two F32 per
// token and one more (the per-token losses and weights, their weighted sum). Context parallel
// over P: a rank's ids and targets cover its n / P tokens.
int64_t workspace_bytes(const PlannedRun& run) {
  const DataSection& d = run.data;
  const int64_t n = d.micro_batch * d.seq_len, P = run.parallel.context_parallel;
  const Device backend = run.compute_dtype == DType::kF32 ? Device::kCPU : Device::kCUDA;
  const int64_t table = workspace_total(
      workspace_table(backend, workspace_shape(run.model, d.micro_batch, d.seq_len, P, run.parallel.fp8)));
  const int64_t dpo = d.objective == Objective::kDpo ? 4 * (2 * n + 1) : 0;
  return table + 4 * (2 * n / P + n) + 2 * 4 + dpo;
}

// The workspace's attention part, when its bound is the kernel's (ops/attention_scratch.h).
std::string attention_note(const PlannedRun& run) {
  const ModelConfig& c = run.model;
  const int64_t B = run.data.micro_batch, T = run.data.seq_len, P = run.parallel.context_parallel;
  const int64_t H = c.num_heads / P, KV = c.num_kv_heads / P;
  if (cudnn_backward_within_bound(B, T, H)) return "";
  return "attention: the backward runs cuDNN's non-deterministic algorithm (anvil's kernel with "
         "ANVIL_ATTENTION=cudnn-deterministic), its scratch " +
         gib(attention_scratch_bytes(B, T, H, KV, c.head_dim)) +
         " GiB of the workspace; cuDNN's deterministic backward would keep dP, " +
         gib(cudnn_dp_bytes(B, T, H)) + " GiB, over its bound of " +
         gib(kCudnnDpBound) + " GiB\n";
}

}  // namespace

// Context parallel over P: a rank's attention covers every token of its share of the heads,
// its linear layers and loss its n / P tokens. The block linears: a dense MLP's only where the
// model has a dense layer (the router's and the experts' GEMMs are bf16 under --fp8).
WorkspaceShape workspace_shape(const ModelConfig& c, int64_t micro_batch, int64_t seq_len, int64_t context_parallel,
                               Fp8Recipe fp8) {
  WorkspaceShape s;
  s.batch = micro_batch;
  s.seq = seq_len;
  s.tokens = micro_batch * seq_len / context_parallel;
  s.heads = c.num_heads / context_parallel;
  s.kv_heads = c.num_kv_heads / context_parallel;
  s.head_dim = c.head_dim;
  s.vocab = c.vocab_size;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  s.linears = {{c.qkv_dim(), C}, {C, c.q_dim()}};
  if (c.has_dense_mlp()) s.linears.insert(s.linears.end(), {{2 * I, C}, {C, I}});  // sparse layers' are bf16
  s.fp8 = fp8;
  return s;
}

MemoryPlan plan_memory(const PlannedRun& run) {
  const ParallelSection& par = run.parallel;
  const DataSection& d = run.data;
  ANVIL_ENSURE(par.mode != ParallelMode::kAuto, kInternal, "plan_memory: the mode is not resolved");
  MemoryPlan p;
  p.mode = par.mode;
  p.recompute = par.recompute;
  plan_model_states(run, p);
  const int64_t P = par.context_parallel;
  p.mlp_tile = effective_mlp_tile(run.model, d.micro_batch * d.seq_len / P, run.compute_dtype, par.mlp_tile);
  const std::vector<ActivationBuffer> acts =
      activation_buffers(run.model, d.micro_batch, d.seq_len, par.recompute, run.compute_dtype, p.mlp_tile,
                         blocks_grad_dtype(par), P, par.offload_activations, par.fp8);
  p.activations = activation_bytes(acts);
  p.host_activations = host_activation_bytes(acts);
  p.workspace = workspace_bytes(run);
  return p;
}

bool plan_fits(const MemoryPlan& p, int64_t gpu_bytes) { return p.total() + kPlanReserve <= gpu_bytes; }

namespace {

// The plan of `x` on `world` ranks. --mlp-tile auto: untiled where that fits (tiles recompute
// gate_up in the backward), else auto_mlp_tile's tiles.
MemoryPlan tiled_plan(const PlannedRun& run, ParallelSection x, int world, int64_t gpu_bytes) {
  auto plan = [&] { return plan_memory({run.model, run.data, x, world, run.compute_dtype}); };
  if (x.mlp_tile != kMlpTileAuto) return plan();
  x.mlp_tile = run.data.micro_batch * run.data.seq_len / x.context_parallel;
  const MemoryPlan untiled = plan();
  if (plan_fits(untiled, gpu_bytes)) return untiled;
  x.mlp_tile = kMlpTileAuto;
  return plan();
}

// The plan of `mode` on `world` ranks; recompute auto: the fastest setting that fits (none,
// then selective, then full; offloading only full), else full.
MemoryPlan mode_plan(const PlannedRun& run, ParallelMode mode, int world, int64_t gpu_bytes) {
  ParallelSection x = run.parallel;
  x.mode = mode;
  if (x.recompute != Recompute::kAuto) return tiled_plan(run, x, world, gpu_bytes);
  MemoryPlan p;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {  // fastest first
    if (x.offload_activations && r != Recompute::kFull) continue;
    x.recompute = r;
    p = tiled_plan(run, x, world, gpu_bytes);
    if (plan_fits(p, gpu_bytes)) break;
  }
  return p;
}

std::string train_flags(const MemoryPlan& p) {
  return cat("--mode ", parallel_mode_name(p.mode), " --recompute ", recompute_name(p.recompute));
}

// The fewest GPUs on which fsdp fits (its shards shrink with more), or 0 when none up to
// kMostGpus does or the run's ranks are fixed (context parallelism spans every rank).
constexpr int kMostGpus = 1024;
int fsdp_gpus_needed(const PlannedRun& run, int64_t gpu_bytes) {
  if (run.parallel.context_parallel > 1) return 0;
  for (int w = run.world + 1; w <= kMostGpus; ++w)
    if (plan_fits(mode_plan(run, ParallelMode::kFsdp, w, gpu_bytes), gpu_bytes)) return w;
  return 0;
}

// Neither mode fits: what would. The model states (the plan without its activations) too
// large for the GPU: fsdp over more GPUs; the activations the cause: recomputation,
// offloading, a shorter sequence or micro-batch.
std::string not_fitting_advice(const PlannedRun& run, const MemoryPlan& fsdp, int64_t gpu_bytes) {
  std::string m = cat("no mode fits in ", gib(gpu_bytes), " GiB per GPU on ", run.world, " GPU(s)");
  const int64_t states = fsdp.total() - fsdp.activations;
  if (!plan_fits(fsdp, gpu_bytes + fsdp.activations)) {
    m += cat(": the model states alone (weights, gradients, AdamW state, workspace) take ", gib(states), " GiB");
    if (const int gpus = fsdp_gpus_needed(run, gpu_bytes)) {
      const MemoryPlan p = mode_plan(run, ParallelMode::kFsdp, gpus, gpu_bytes);
      return m + cat("; fsdp fits on ", gpus, " GPUs: --nproc ", gpus, " ", train_flags(p), " (", gib(p.total()),
                     " GiB per GPU)");
    }
    return m + cat("; fsdp would not fit on ", kMostGpus, " GPUs of this size either");
  }
  const Recompute r = run.parallel.recompute;
  m += cat(": the activations take ", gib(fsdp.activations), " GiB");
  if (r != Recompute::kFull && r != Recompute::kAuto) m += "; try --recompute full";
  m += offload_advice(run, gpu_bytes);
  if (const int gpus = fsdp_gpus_needed(run, gpu_bytes)) m += cat("; fsdp fits on ", gpus, " GPUs (--nproc ", gpus, ")");
  return m + "; or a shorter --seq-len or smaller --micro-batch";
}

}  // namespace

const MemoryPlan& PlanAdvice::of(ParallelMode m) const {
  ANVIL_ENSURE(m != ParallelMode::kAuto, kInternal, "the plan of mode auto");
  return m == ParallelMode::kDdp ? ddp : m == ParallelMode::kZero2 ? zero2 : fsdp;
}

namespace {

// "ddp", "ddp and fsdp", "ddp, zero2 and fsdp".
std::string mode_list(const std::vector<ParallelMode>& modes) {
  std::string s;
  for (size_t i = 0; i < modes.size(); ++i)
    s += cat(i == 0 ? "" : i + 1 == modes.size() ? " and " : ", ", parallel_mode_name(modes[i]));
  return s;
}

// Why the first mode that fits, when nothing predicts which is faster (or only it fits).
std::string first_fitting_reason(ParallelMode mode, const std::vector<ParallelMode>& fitting, int world) {
  if (world == 1) return "one GPU holds the whole model, its gradients and AdamW state";
  const std::string others = fitting.size() > 1 ? cat(mode_list(fitting), " fit; no step prediction here, so ") : "";
  if (mode == ParallelMode::kDdp)
    return others.empty() ? "ddp fits: every GPU holds the whole model, its gradients and AdamW state"
                          : others + "ddp, which gathers no weights";
  const std::string not_fitting = mode == ParallelMode::kZero2 ? "ddp does not fit" : "neither ddp nor zero2 fits";
  const std::string held = mode == ParallelMode::kZero2
                               ? cat("each GPU holds the weights whole and 1/", world, " of the gradients and AdamW state")
                               : cat("each GPU holds 1/", world, " of the weights, gradients and AdamW state");
  return cat(not_fitting, "; ", parallel_mode_name(mode), " does: ", held);
}

}  // namespace

PlanAdvice advise(const PlannedRun& run, int64_t gpu_bytes, const PlanSpeed& speed) {
  PlanAdvice a;
  a.ddp = mode_plan(run, ParallelMode::kDdp, run.world, gpu_bytes);
  a.zero2 = mode_plan(run, ParallelMode::kZero2, run.world, gpu_bytes);
  a.fsdp = mode_plan(run, ParallelMode::kFsdp, run.world, gpu_bytes);
  std::vector<ParallelMode> fitting;
  for (ParallelMode m : kRunModes)
    if (plan_fits(a.of(m), gpu_bytes)) fitting.push_back(m);
  a.fits = !fitting.empty();
  if (!a.fits) {
    a.message = not_fitting_advice(run, a.fsdp, gpu_bytes) + ".";
    return a;
  }
  a.mode = fitting.front();
  if (fitting.size() > 1 && run.world > 1 && speed) {
    std::vector<double> tps;
    for (ParallelMode m : fitting) tps.push_back(speed(a.of(m)));
    const size_t best = static_cast<size_t>(std::max_element(tps.begin(), tps.end()) - tps.begin());  // the first on a tie
    a.mode = fitting[best];
    a.message = cat(mode_list(fitting), " fit; ", parallel_mode_name(a.mode), " is predicted fastest: ",
                    format_count(tps[best]), " tokens/s against ");
    for (size_t i = 0, said = 0; i < fitting.size(); ++i) {
      if (i == best) continue;
      a.message += cat(said++ == 0 ? "" : ", ", format_count(tps[i]), " for ", parallel_mode_name(fitting[i]));
    }
  } else {
    a.message = first_fitting_reason(a.mode, fitting, run.world);
  }
  a.flags = train_flags(a.of(a.mode));
  return a;
}

std::string plan_table(const PlanAdvice& a, const PlannedRun& run, int64_t gpu_bytes) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%s: %lld parameters, %d GPU(s), sequence %lld x micro-batch %lld, %s GiB per GPU\n",
                run.model.architecture.c_str(), static_cast<long long>(run.model.num_parameters()), run.world,
                static_cast<long long>(run.data.seq_len), static_cast<long long>(run.data.micro_batch),
                gib(gpu_bytes).c_str());
  s += line;
  // One row: its name, then each mode's cell.
  auto row = [&](const char* name, const std::function<std::string(const MemoryPlan&)>& cell) {
    std::snprintf(line, sizeof line, "%-12s %16s %16s %16s\n", name, cell(a.ddp).c_str(), cell(a.zero2).c_str(),
                  cell(a.fsdp).c_str());
    s += line;
  };
  auto bytes = [&](const char* name, int64_t MemoryPlan::*field) {
    row(name, [&](const MemoryPlan& p) { return gib(p.*field); });
  };
  row("GiB per GPU", [](const MemoryPlan& p) { return std::string(parallel_mode_name(p.mode)); });
  bytes("parameters", &MemoryPlan::params);
  bytes("gradients", &MemoryPlan::grads);
  bytes("optimizer", &MemoryPlan::optimizer);
  bytes("weights", &MemoryPlan::weights);
  bytes("activations", &MemoryPlan::activations);
  bytes("workspace", &MemoryPlan::workspace);
  if (run.parallel.expert_parallel > 1) bytes("exchange", &MemoryPlan::exchange);  // model/expert_parallel.h
  row("total", [](const MemoryPlan& p) { return gib(p.total()); });
  row("recompute", [](const MemoryPlan& p) { return std::string(recompute_name(p.recompute)); });
  row("mlp tile", [](const MemoryPlan& p) { return std::to_string(p.mlp_tile); });
  // "yes (selective)": it fits with that recomputation (--recompute selective).
  row("fits", [&](const MemoryPlan& p) {
    return plan_fits(p, gpu_bytes) ? cat("yes (", recompute_name(p.recompute), ")") : std::string("no");
  });
  s += a.fits ? cat("advice: ", a.flags, " (", a.message, ")\n") : cat("advice: ", a.message, "\n");
  s += attention_note(run);
  // Host memory per rank, each mode's.
  auto host = [&](const char* what, int64_t MemoryPlan::*field) {
    s += cat("host memory per rank for ", what, ": ", gib(a.ddp.*field), " GiB (ddp), ", gib(a.zero2.*field),
             " GiB (zero2), ", gib(a.fsdp.*field), " GiB (fsdp)\n");
  };
  host("the snapshot of asynchronous saves", &MemoryPlan::host_snapshot);
  if (run.parallel.offload_activations) host("the offloaded activations (pinned)", &MemoryPlan::host_activations);
  return s;
}

std::string host_memory_refusal(const MemoryPlan& p, bool async_saves, int local_ranks, const HostMemory& m) {
  const int64_t per_rank = p.host_activations + (async_saves ? p.host_snapshot : 0);
  if (p.host_activations == 0 || per_rank * local_ranks <= m.available) return "";
  return "the offloaded activations take " + gib(p.host_activations) + " GiB of pinned host memory per rank" +
         (async_saves ? " and the snapshot of asynchronous saves " + gib(p.host_snapshot) + " GiB" : "") +
         ", " + gib(per_rank * local_ranks) + " GiB for the " + std::to_string(local_ranks) +
         " rank(s) of this machine, but " + gib(m.available) + " GiB of its " + gib(m.total) + " GiB are available (" +
         m.source + "); drop --offload-activations" + (async_saves ? " or save with --sync-save" : "") +
         ", use a shorter --seq-len or --micro-batch, or spread the sequence with --context-parallel";
}

}  // namespace anvil
