// anvil train's phases and its loop: see train/loop.h.
#include "train/loop.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/comm.h"
#include "core/duration.h"
#include "core/fault.h"
#include "core/log.h"
#include "model/export.h"
#include "train/checkpoint_schedule.h"
#include "train/checks.h"
#include "train/eval.h"
#include "train/stop_signal.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

// The eval loss over the eval set (its first --eval-max-blocks blocks when set; every rank
// takes part), logged on rank 0 with progress lines while it runs.
EvalResult evaluate_and_log(TrainRun& run, int64_t step) {
  const TrainConfig& c = run.config();
  const BlockSource& ev_data = *run.eval_data;
  const int64_t blocks = eval_blocks(c.eval, ev_data.size());
  if (run.base.rank == 0)
    log_info("step ", step, "/", c.steps, "  evaluating ", blocks, " blocks",
             blocks < ev_data.size() ? cat(" of ", ev_data.size(), " (--eval-max-blocks)") : std::string());
  EvalProgressLog progress(run.base.rank == 0, blocks);
  const bool dpo = run.reference.size() > 1;  // the eval set's reference log-probs
  const EvalResult ev = evaluate(*run.trainer, run.base.comm.get(), blocks, c.data.micro_batch, ev_data.seq_len(),
                                 [&](int64_t block, TokenBatch& b) { ev_data.append(block, b); },
                                 [&](int64_t done) { progress.update(done); }, dpo ? &run.reference[1] : nullptr);
  char line[200];
  std::snprintf(line, sizeof line, "step %lld/%lld  eval loss %.4f  (%lld blocks, %lld %s, %.1f s)",
                static_cast<long long>(step), static_cast<long long>(c.steps), ev.loss,
                static_cast<long long>(ev.blocks), static_cast<long long>(ev.tokens), dpo ? "pairs" : "tokens",
                ev.seconds);
  log_info(line);
  return ev;
}

// ANVIL_FAULT hang_at_step: this rank stops answering (until a signal) before `step`.
void hang_if_armed(const TrainRun& run, int64_t step) {
  if (!fault_armed(Fault::kHangAtStep, step, run.base.rank, run.base.world)) return;
  log_error("fault hang_at_step (ANVIL_FAULT): rank ", run.base.rank, " stops answering before step ", step);
  while (StopOnSignal::requested() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The micro-batches of step `step` on this rank.
std::vector<TokenBatch> step_batches(TrainRun& run, int64_t step) {
  const DataSection& d = run.config().data;
  std::vector<TokenBatch> micro(static_cast<size_t>(d.grad_accum));
  for (int64_t a = 0; a < d.grad_accum; ++a)
    for (int64_t b = 0; b < d.micro_batch; ++b)
      run.data->append(run.order->block(step, a * d.micro_batch + b), micro[static_cast<size_t>(a)]);
  return micro;
}

// The real tokens (padding excluded) of a step's micro-batches, all ranks: wrapped blocks have
// no padding, so only bfd blocks need the ranks' sum. The ranks of a context-parallel group
// read the same blocks: counted once.
int64_t step_real_tokens(const TrainRun& run, const std::vector<TokenBatch>& micro) {
  int64_t mine = 0;
  for (const TokenBatch& b : micro) mine += b.real_tokens();
  const int64_t cp = run.config().parallel.context_parallel;
  if (run.data->packing() == Packing::kWrapped || !run.base.comm) return mine * run.base.world / cp;
  return run.base.comm->host_sum(mine, "real tokens") / cp;
}

// A step. One that diverges (a non-finite loss or gradient norm) leaves its record and the
// reason in --metrics before the error stops the run.
StepStats run_step(TrainRun& run, int64_t step, const std::vector<TokenBatch>& micro) {
  try {
    return run.trainer->step(micro);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNumerics && run.metrics)
      run.metrics->write(Json{{"run_id", run.run_id}, {"step", step}, {"diverged", e.what()}});
    throw;
  }
}

// The signal that stops every rank after this step (0: none): the signal may reach them at
// different times.
int agreed_stop(const TrainRun& run) {
  const int sig = StopOnSignal::requested();
  return run.base.comm ? static_cast<int>(run.base.comm->host_max(static_cast<double>(sig), "stop signal")) : sig;
}

// 3. The loop: steps from the resumed one to --steps, a checkpoint every --save-every.
TrainSummary train_loop(TrainRun& run) {
  const TrainConfig& c = run.config();
  Progress progress(run.base.rank == 0);
  const StopOnSignal signals(run.base.rank == 0);
  const auto run_start = Clock::now();
  const int64_t start = run.point.step;
  TrainSummary summary;
  double eval_s = 0, last_eval_s = 0;
  for (int64_t step = start + 1; step <= c.steps; ++step) {
    hang_if_armed(run, step);
    const auto t0 = Clock::now();
    const std::vector<TokenBatch> micro = step_batches(run, step);
    const StepStats st = run_step(run, step, micro);
    const double dt = seconds_since(t0);
    const int64_t tokens = step_real_tokens(run, micro);
    summary.losses.push_back(st.loss);
    Json eval_loss = nullptr;
    std::vector<std::pair<std::string, double>> eval_metrics;
    if (run.eval_data && eval_due(c, step)) {
      progress.clear();
      const EvalResult ev = evaluate_and_log(run, step);
      eval_loss = ev.loss;
      if (ev.dpo.pairs > 0) eval_metrics = ev.dpo.means();
      summary.eval_losses.push_back(ev.loss);
      eval_s += ev.seconds;
      last_eval_s = ev.seconds;
    }
    // The ETA: the steps left at the training steps' pace, and the evaluations left at the last one's.
    const double elapsed = seconds_since(run_start);
    const double eta = (elapsed - eval_s) / static_cast<double>(step - start) * static_cast<double>(c.steps - step) +
                       static_cast<double>(evals_after(c, step)) * last_eval_s;
    progress.clear();
    log_step(run, step, st, tokens, dt, elapsed, eta, eval_loss, eval_metrics);
    save_if_due(run, step, eval_loss);
    if (run.copies) run.copies->report_finished();
    if (const int sig = agreed_stop(run); sig != 0) {
      progress.clear();
      stop_at(run, step, sig);
      summary.stop_signal = sig;
      break;
    }
    progress.draw(step, c.steps, st.loss, eta);
  }
  progress.clear();
  summary.tokens_per_s = run.throughput.tokens_per_s();  // log_step counted each step
  return summary;
}

// The Hugging Face folder of the final weights (--export).
void export_final(TrainRun& run) {
  const TrainConfig& c = run.config();
  const HostUnits final_w = run.trainer->whole_masters(*run.base.whole);  // a collective in FSDP: every rank
  if (run.base.rank != 0) return;
  HfExportSettings ex;
  ex.out_dir = c.export_.dir;
  ex.dtype = c.export_.dtype == "fp32" ? DType::kF32 : DType::kBF16;
  ex.source_dirs = {run.base.model_dir, c.data.tokenizer};
  ex.config_toml = run.command.config_toml;
  export_model(run.base.config, *run.base.whole, final_w, ex);
}

// 4. Finish: the summary line, the export, the copies off the machine.
void finish_train(TrainRun& run, TrainSummary& summary) {
  summary.peak_host_gib = peak_rss_gib();
  if (summary.stop_signal != 0) {
    finish_copies(run);
    return;
  }
  log_done(run, summary);
  if (!run.config().export_.dir.empty()) export_final(run);
  finish_copies(run);
}

}  // namespace

TrainSummary run_train(const TrainConfig& config, const TrainCommand& command) {
  const auto begin = Clock::now();
  TrainConfig checked = config;
  TrainRun run;
  run.command = command;
  check_train(checked, run.ckpt_lock);  // 1. the checks
  open_train(checked, run);             // 2. the run opened, every auto resolved
  prepare_saves(run);
  TrainSummary summary = train_loop(run);
  finish_train(run, summary);
  if (summary.stop_signal == 0 && run.base.rank == 0) log_last_line(run.config(), summary, seconds_since(begin));
  return summary;
}

}  // namespace anvil
