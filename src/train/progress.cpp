// Progress bar, step lines, metrics and the summary lines: see train/progress.h.
#include "train/progress.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include "core/duration.h"
#include "core/log.h"
#include "core/units.h"
#include "model/expert_parallel.h"
#include "train/bench_step.h"

namespace anvil {
namespace {

// MFU: model FLOPs per token (no recomputation counted) over the GPU's dense bf16 rate.
Json mfu_of(const TrainRun& run, double tokens_per_s) {
  const double peak_tflops = run.base.device == "cuda" ? gpu_peak_tflops(run.trainer->ops().runtime().name()) : 0;
  const double flops = model_flops_per_token(run.base.config, run.data->seq_len());
  return peak_tflops > 0 ? Json(tokens_per_s * flops / run.base.world / (peak_tflops * 1e12)) : Json(nullptr);
}

double peak_mem_gib(const TrainRun& run) {
  return run.base.device == "cuda" ? static_cast<double>(run.trainer->ops().runtime().memory_stats().peak) / (1ll << 30)
                                   : peak_rss_gib();
}

// The step's record into --metrics and its scalars into --tensorboard.
void write_metrics(TrainRun& run, int64_t step, const StepStats& st, double tps, double elapsed,
                   const Json& eval_loss, const std::vector<std::pair<std::string, double>>& eval_metrics) {
  // The plan of the device's memory; on the CPU, whose memory is not planned, none.
  const Json planned = run.base.device == "cuda"
                           ? Json(static_cast<double>(run.trainer->plan().total()) / (1ll << 30)) : Json(nullptr);
  Json m = {{"step", step}, {"loss", st.loss}, {"grad_norm", st.grad_norm}, {"lr", st.lr},
            {"tokens_per_s", tps}, {"mean_tokens_per_s", run.throughput.tokens_per_s()},
            {"mfu", mfu_of(run, tps)}, {"peak_mem_gib", peak_mem_gib(run)},
            {"planned_mem_gib", planned}, {"elapsed_s", elapsed}, {"run_id", run.run_id}};
  if (!eval_loss.is_null()) m["eval_loss"] = eval_loss;
  std::vector<std::pair<std::string, double>> extra;  // dpo: TRL's metrics of the step and of the evaluation
  if (st.dpo.pairs > 0) extra = st.dpo.means();
  for (const auto& metric : st.router.metrics()) extra.push_back(metric);  // Qwen3-MoE's routing
  for (const auto& [name, value] : eval_metrics) extra.emplace_back("eval_" + name, value);
  for (const auto& [name, value] : extra) m[name] = value;
  if (run.metrics) run.metrics->write(m);
  if (!run.tensorboard) return;
  std::vector<std::pair<std::string, double>> scalars;
  for (const char* key : {"loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "mfu", "peak_mem_gib"})
    if (m.contains(key) && m[key].is_number()) scalars.emplace_back(key, m[key].get<double>());
  scalars.insert(scalars.end(), extra.begin(), extra.end());
  run.tensorboard->scalars(step, scalars);
}

}  // namespace

Progress::Progress(bool on) : on_(on && ::isatty(2)) {}

void Progress::clear() {
  if (on_ && drawn_) std::fputs("\r\033[K", stderr);
  drawn_ = false;
}

void Progress::draw(int64_t step, int64_t steps, double loss, double seconds_left) {
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

double peak_rss_gib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);
}

void log_step(TrainRun& run, int64_t step, const StepStats& st, int64_t tokens, double seconds, double elapsed,
              double eta, const Json& eval_loss, const std::vector<std::pair<std::string, double>>& eval_metrics) {
  const TrainConfig& c = run.config();
  run.throughput.add(step, tokens, seconds);
  if (run.base.rank != 0 || !(step % c.log.every == 0 || step == c.steps || step == 1 || !eval_loss.is_null())) return;
  const double tps = static_cast<double>(tokens) / seconds;
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  %.0f %s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(c.steps), st.loss, st.grad_norm, st.lr, tps,
                run.data->packing() == Packing::kWrapped ? "tok/s" : "real tok/s", format_hms(eta).c_str());
  std::string dpo;  // TRL's reward metrics, after the loss
  for (const auto& [name, value] : st.dpo.means()) {
    if (st.dpo.pairs == 0 || name.rfind("rewards/", 0) != 0) continue;
    char part[64];
    std::snprintf(part, sizeof part, "  %s %.4f", name.c_str(), value);
    dpo += part;
  }
  std::string router;  // Qwen3-MoE: an expert's smallest and largest share of a layer's assignments, the aux loss
  if (!st.router.empty()) {
    char part[96];
    std::snprintf(part, sizeof part, "  router share %.3f-%.3f  aux %.4f", st.router.fraction_min(),
                  st.router.fraction_max(), st.router.aux_loss());
    router = part;
  }
  log_info(line, dpo, router);
  if (run.metrics || run.tensorboard) write_metrics(run, step, st, tps, elapsed, eval_loss, eval_metrics);
}

void log_done(const TrainRun& run, const TrainSummary& summary) {
  if (run.base.rank != 0) return;  // the run's summary, said once
  const int64_t steps = run.config().steps;
  if (summary.losses.empty()) {
    log_result("done: nothing left to train (the checkpoint is at step ", run.point.step, " of --steps ", steps, ")");
    return;
  }
  char done[256];
  const char* real = run.data->packing() == Packing::kWrapped ? "" : "; real tokens: padding excluded, in MFU too";
  std::snprintf(done, sizeof done, "done: %lld steps, %s tokens/s (tokens over step time%s%s)",
                static_cast<long long>(steps), format_count(summary.tokens_per_s).c_str(),
                run.throughput.warm_excluded() ? ", first 10 steps excluded" : "", real);
  std::string tail;
  if (run.base.device == "cuda") {
    const Json mfu = mfu_of(run, summary.tokens_per_s);
    const Runtime::MemoryStats mem = run.trainer->ops().runtime().memory_stats();
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
  if (const ExpertParallel* x = run.trainer->expert_parallel()) {
    char m[200];
    std::snprintf(m, sizeof m, ", expert exchange on rank 0: at most %lld rows received (planned %lld)",
                  static_cast<long long>(x->most().local), static_cast<long long>(x->planned().local));
    tail += m;
  }
  char host[64];
  std::snprintf(host, sizeof host, ", peak host memory %.2f GiB", summary.peak_host_gib);
  log_result(done, tail, host);
}

void log_last_line(const TrainConfig& c, const TrainSummary& summary, double seconds) {
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
  last += c.export_.dir.empty() ? ", no export (--export DIR writes one)" : ", model exported to " + c.export_.dir;
  log_result(last);
}

}  // namespace anvil
