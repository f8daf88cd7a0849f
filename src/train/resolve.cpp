// The one resolution of the config's autos: see train/resolve.h.
#include "train/resolve.h"

#include <algorithm>
#include <iterator>

#include "comm/first_error.h"
#include "core/env.h"
#include "core/error.h"
#include "plan/step_target.h"
#include "sys/host_memory.h"

namespace anvil {
namespace {

// The blocks' gradients: bf16 only on a bf16 device, with one micro-batch per step.
void resolve_grad_dtype_of(ResolvedConfig& r, const RunFacts& f) {
  ParallelSection& p = r.config.parallel;
  const int64_t accum = r.config.data.grad_accum;
  const DType g = resolve_grad_dtype(p.grad_dtype, f.compute_dtype, accum);
  if (p.grad_dtype == GradDType::kAuto) {
    const std::string why = g == DType::kBF16 ? "one micro-batch per step, a bf16 device (a GPU)"
                            : f.compute_dtype != DType::kBF16 ? "an fp32 device (the CPU)"
                                                              : cat("--grad-accum ", accum, " sums micro-batches in fp32");
    r.reasons.push_back(cat("grad dtype ", g == DType::kBF16 ? "bf16" : "fp32", ": ", why));
  }
  p.grad_dtype = g == DType::kBF16 ? GradDType::kBF16 : GradDType::kF32;
}

// gate_up (tokens, 2I) of a rank's micro-batch, in MiB.
int64_t gate_up_mib(int64_t tokens, const RunFacts& f) {
  return (tokens * 2 * f.model->intermediate_size * static_cast<int64_t>(dtype_size(f.compute_dtype))) >> 20;
}

// The MLP's tile, where resolve_memory left it auto (no GPU memory to plan): untiled while the
// micro-batch's gate_up is small (model/activations.h).
void resolve_mlp_tile(ResolvedConfig& r, const RunFacts& f) {
  ParallelSection& p = r.config.parallel;
  if (p.mlp_tile != kMlpTileAuto) return;
  const int64_t tokens = r.config.data.micro_batch * r.config.data.seq_len;
  p.mlp_tile = auto_mlp_tile(*f.model, tokens, f.compute_dtype);
  r.reasons.push_back(p.mlp_tile == tokens
                          ? cat("mlp tile ", tokens, " tokens (untiled): gate_up of the micro-batch takes ",
                                gate_up_mib(tokens, f), " MiB, at most ", kMlpUntiledBytes >> 20)
                          : cat("mlp tile ", p.mlp_tile, " tokens: gate_up of the micro-batch would take ",
                                gate_up_mib(tokens, f), " MiB, a tile at most ", kMlpTileBytes >> 20));
}

// --mlp-tile auto on a GPU: the memory plan's (plan/memory_plan.h's advise: untiled where the
// plan fits, since tiles recompute gate_up in the backward).
void take_planned_mlp_tile(ResolvedConfig& r, const RunFacts& f, int64_t tile) {
  r.config.parallel.mlp_tile = tile;
  const int64_t tokens = r.config.data.micro_batch * r.config.data.seq_len / r.config.parallel.context_parallel;
  const double gib = static_cast<double>(f.capacity) / (1ll << 30);
  r.reasons.push_back(tile == tokens ? cat("mlp tile ", tokens, " tokens (untiled): the plan fits in ", gib,
                                           " GiB with gate_up of the micro-batch (", gate_up_mib(tokens, f), " MiB)")
                                     : cat("mlp tile ", tile, " tokens: untiled (gate_up of the micro-batch ",
                                           gate_up_mib(tokens, f), " MiB) the plan would not fit in ", gib,
                                           " GiB; a tile at most ", kMlpTileBytes >> 20, " MiB"));
}

// Mode, recomputation and the MLP's tile from the memory plan, as anvil plan advises (advise,
// with the step model on this machine's GPU): of the modes that fit, the faster predicted;
// recompute and mlp tile auto: the fastest setting that fits. The CPU's (host) memory is not
// planned: ddp, no recompute, the tile by size (resolve_mlp_tile).
// The mode every rank takes (their GPUs could differ): of the ranks' choices, the last in
// kRunModes, whose memory falls in that order for most models (not where fsdp's two
// gathered units, an embedding, outweigh what zero2's whole weights add).
ParallelMode agreed_mode(ParallelMode mine, Comm* comm) {
  if (!comm) return mine;
  const auto index = std::find(std::begin(kRunModes), std::end(kRunModes), mine) - std::begin(kRunModes);
  return kRunModes[static_cast<size_t>(comm->host_max(static_cast<double>(index), "mode auto"))];
}

void resolve_memory(ResolvedConfig& r, const RunFacts& f) {
  ParallelSection& p = r.config.parallel;
  const bool mode_auto = p.mode == ParallelMode::kAuto, recompute_auto = p.recompute == Recompute::kAuto;
  std::string mode_why;
  if (f.capacity > 0) {
    const PlannedRun run{*f.model, r.config.data, r.config.parallel, f.world, f.compute_dtype};
    StepTarget target = step_target(TargetFlags{}, f.world);
    skip_unmodelled(target, r.config.parallel);
    const PlanAdvice adv = advise(run, f.capacity, plan_speed(run, target));
    if (mode_auto) {
      ANVIL_ENSURE(adv.fits, kOutOfMemory, "--mode auto: no mode fits in the GPU's memory; the plan per GPU:\n",
                   plan_table(adv, run, f.capacity));
      p.mode = agreed_mode(adv.mode, f.comm);
      mode_why = p.mode == adv.mode ? adv.message : cat("another rank's GPU needs ", parallel_mode_name(p.mode));
    }
    const MemoryPlan& plan = adv.of(p.mode);
    ANVIL_ENSURE(plan_fits(plan, f.capacity), kOutOfMemory,
                 "this run does not fit in the GPU's memory; the plan per GPU:\n", plan_table(adv, run, f.capacity));
    p.recompute = plan.recompute;
    if (recompute_auto)
      r.reasons.push_back(cat("recompute ", recompute_name(p.recompute), ": the fastest setting whose plan fits in ",
                              static_cast<double>(f.capacity) / (1ll << 30), " GiB"));
    if (p.mlp_tile == kMlpTileAuto) take_planned_mlp_tile(r, f, plan.mlp_tile);
  } else {
    if (mode_auto) {
      p.mode = ParallelMode::kDdp;
      mode_why = "host memory is not planned, so ddp";
    }
    if (recompute_auto) {
      p.recompute = Recompute::kNone;
      r.reasons.push_back("recompute none: host memory is not planned");
    }
  }
  if (!mode_auto) return;
  r.mode_reason = "auto: " + mode_why;
  r.reasons.push_back(cat("mode ", parallel_mode_name(p.mode), ": ", mode_why));
}

// --offload-activations: the checkpoints of --recompute full (auto resolves to it).
void resolve_offload(ResolvedConfig& r) {
  ParallelSection& p = r.config.parallel;
  check_offload(p.recompute, p.offload_activations);
  if (!p.offload_activations || p.recompute != Recompute::kAuto) return;
  p.recompute = Recompute::kFull;
  r.reasons.push_back("recompute full: --offload-activations moves its checkpoints to host memory");
}

// The offloaded activations (and asynchronous saves' snapshot) in this machine's host memory,
// for every rank on it.
void check_offload_host_memory(const ResolvedConfig& r, const RunFacts& f) {
  if (!r.config.parallel.offload_activations) return;
  const MemoryPlan plan = plan_memory({*f.model, r.config.data, r.config.parallel, f.world, f.compute_dtype});
  const CheckpointSection& k = r.config.checkpoint;
  const int local_ranks = static_cast<int>(env_int("LOCAL_WORLD_SIZE", 1));
  const std::string refusal = first_error(
      f.comm, host_memory_refusal(plan, k.save_every > 0 && !k.sync_save, local_ranks, host_memory()),
      "offload memory");
  ANVIL_ENSURE(refusal.empty(), kOutOfMemory, refusal);
}

// --context-parallel P: the rule (plan/parallel_section.h), and what it makes of the run.
void resolve_context_parallel(ResolvedConfig& r, const RunFacts& f) {
  const int64_t P = r.config.parallel.context_parallel, T = r.config.data.seq_len;
  const int64_t H = f.model->num_heads, KV = f.model->num_kv_heads;
  check_context_parallel(P, f.world, *f.model, T, "--nproc-per-node");
  if (P == 1) return;
  r.reasons.push_back(cat("context parallel ", P, ": each rank holds ", T / P, " tokens of every sequence; attention "
                          "runs all ", T, " of ", H / P, " query and ", KV / P, " key/value heads"));
}

// --expert-parallel N (model/expert_parallel.h): N divides the experts and the ranks; kUsage.
void resolve_expert_parallel(ResolvedConfig& r, const RunFacts& f) {
  const int64_t N = r.config.parallel.expert_parallel, E = f.model->moe.num_experts;
  if (N == 1) return;
  ANVIL_ENSURE(N >= 1, kUsage, "--expert-parallel must be at least 1, got ", N);
  ANVIL_ENSURE(f.model->sparse_layers() > 0, kUsage, "--expert-parallel ", N,
               ": the model has no mixture-of-experts layers (use --expert-parallel 1)");
  ANVIL_ENSURE(E % N == 0, kUsage, "--expert-parallel ", N, " must divide the model's ", E, " experts");
  ANVIL_ENSURE(f.world % N == 0, kUsage, "--expert-parallel ", N, " must divide the ranks (", f.world,
               "; --nproc-per-node)");
  ANVIL_ENSURE(r.config.parallel.context_parallel == 1, kUsage,
               "--expert-parallel with --context-parallel is not supported yet (use one of them)");
  ANVIL_ENSURE(r.config.data.objective != Objective::kDpo, kUsage,
               "--expert-parallel with --objective dpo is not supported yet (its reference pass is not in step)");
  r.reasons.push_back(cat("expert parallel ", N, ": each rank holds ", E / N, " of every sparse layer's ", E,
                          " experts; ", f.world / N, " rank(s) hold each share"));
}

// --fp8: refused where the device cannot run it; said in the log where it is on.
void check_fp8(ResolvedConfig& r, const RunFacts& f) {
  const Fp8Recipe fp8 = r.config.parallel.fp8;
  if (fp8 == Fp8Recipe::kOff) return;
  ANVIL_ENSURE(f.fp8_unsupported.empty(), kUnsupported, "--fp8 ", fp8_recipe_name(fp8), ": ", f.fp8_unsupported,
               fp8 == Fp8Recipe::kRowwise ? " (use --fp8 tensorwise, or off)" : " (use --fp8 off)");
  r.reasons.push_back(cat("fp8 ", fp8_recipe_name(fp8), ": the blocks' linear layers' GEMMs on ",
                          fp8_format_name(kFp8Format), " operands, scaled ",
                          fp8 == Fp8Recipe::kRowwise ? "per row" : "per tensor", " from their amax"));
}

}  // namespace

ResolvedConfig resolve_config(const TrainConfig& c, const RunFacts& f) {
  ANVIL_ENSURE(c.data.grad_accum >= 1, kInternal, "grad_accum ", c.data.grad_accum);
  ResolvedConfig r;
  r.config = c;
  if (c.data.seq_len == 0) {
    r.config.data.seq_len = f.data_seq_len;
    r.reasons.push_back(cat("seq_len ", f.data_seq_len, ": the data's blocks"));
  }
  resolve_context_parallel(r, f);
  resolve_expert_parallel(r, f);
  resolve_grad_dtype_of(r, f);
  check_fp8(r, f);
  resolve_offload(r);
  resolve_memory(r, f);
  resolve_mlp_tile(r, f);
  check_offload_host_memory(r, f);
  return r;
}

}  // namespace anvil
