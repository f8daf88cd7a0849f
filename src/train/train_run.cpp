// Opening a training run: see train/train_run.h.
#include "train/train_run.h"

#include "comm/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/units.h"
#include "io/checkpoint_files.h"

namespace anvil {
namespace {

// --eval-fraction / --eval-rows: one side of the training rows' split by the run's seed.
RowHoldout holdout_side(const TrainConfig& c, bool held_out) {
  return {c.eval.fraction, c.eval.rows, static_cast<uint64_t>(c.seed), held_out};
}

// The group, the model's config, the training data and the eval data (packed as it, or as
// --eval-packing says; --eval-data, or the held-out rows of --data).
void open_data(const TrainConfig& c, TrainRun& run) {
  run.base = open_run(c.model, c.parallel.expert_parallel);
  const OpenRun& b = run.base;
  Comm* comm = b.comm.get();
  PrepareTurn turn;
  turn.first = b.rank == 0;
  if (comm) turn.barrier = [comm] { comm->barrier("data preparation"); };
  run.data = std::make_unique<BlockSource>(c.data, c.data.source, "", b.model_dir, turn, holdout_side(c, false));
  const BlockSource& data = *run.data;
  ANVIL_ENSURE(c.data.seq_len == 0 || c.data.seq_len == data.seq_len(), kUsage, "anvil train: --seq-len ",
               c.data.seq_len, " differs from the ", data.seq_len(), " tokens per block of ", c.data.source);
  if (!c.eval.data.empty() || holdout_side(c, true).any()) {
    DataSection packed_as = c.data;
    packed_as.seq_len = data.seq_len();
    packed_as.packing = c.eval.packing == "same" ? data.packing() : parse_packing(c.eval.packing);
    const bool carved = c.eval.data.empty();  // the held-out rows of --data
    run.eval_data = std::make_unique<BlockSource>(packed_as, carved ? c.data.source : c.eval.data,
                                                  carved ? "" : c.eval.split, b.model_dir, turn, holdout_side(c, true));
    ANVIL_ENSURE(run.eval_data->seq_len() == data.seq_len(), kUsage, "anvil train: --eval-data ", c.eval.data,
                 " holds blocks of ", run.eval_data->seq_len(), " tokens, the training data ", data.seq_len());
  }
  run.per_step = c.data.micro_batch * c.data.grad_accum;
  const int64_t groups = b.world / c.parallel.context_parallel;  // the ranks with blocks of their own (checks.h)
  ANVIL_ENSURE(data.size() / groups >= run.per_step, kInvalidInput, c.data.source, " holds ", data.size(),
               " blocks, fewer than one step's ", run.per_step * groups,
               " (micro-batch x grad-accum x ranks, a context-parallel group counted once)");
}

// The Trainer from the checkpoint's masters (resume.path()) or the model's own weights; then
// the checkpoint's optimizer state. False when the checkpoint failed its checks
// (run.point.failed: sizes or headers before the Trainer is built, checksums after; a
// failure that cannot fall back is thrown), the Trainer then dropped.
bool load_trainer(const TrainConfig& c, TrainRun& run, const ResumeChoice& resume) {
  const OpenRun& b = run.base;
  // The Trainer reads the weights unit by unit, each rank only what it owns (a preset's
  // fresh weights are made whole first).
  HostUnits fresh;
  UnitReader weights;
  if (!resume.path().empty()) {
    run.point = open_checkpoint(resume, *b.whole, b.comm.get());  // the whole model's names
    if (!run.point.failed.empty()) return false;
    weights = checkpoint_masters_reader(run.point, *b.table);
  } else {
    weights = initial_weights(b, c.seed, fresh);
  }
  run.trainer = make_trainer(run.base, c, run.data->seq_len(), weights);  // checks the memory plan first
  if (resume.path().empty()) return true;
  restore_optimizer(run.point, resume, *run.trainer);
  if (run.point.failed.empty()) return true;
  run.trainer.reset();
  return false;
}

// The Trainer, from the newest checkpoint of the choice that passes its checks: each one of
// --ckpt-dir that fails is skipped for the next older one, loaded from the start on every
// rank, and set aside once one has loaded.
void open_trainer(const TrainConfig& c, TrainRun& run, ResumeChoice& resume) {
  while (!load_trainer(c, run, resume)) resume.fall_back(run.point.failed, run.base.rank);
  if (run.base.rank == 0) resume.set_aside_failed();
}

// The start lines (rank 0): what is trained, where and how, and why for each auto.
void log_start(const TrainRun& run) {
  const OpenRun& b = run.base;
  const TrainConfig& c = run.config();
  const BlockSource& data = *run.data;
  for (const std::string& reason : run.trainer->settings().reasons) log_info("resolved ", reason);
  log_info("training ", b.config.architecture, " (", b.whole->total_numel(), " parameters) on ", b.world, " x ",
           b.device, " (", parallel_mode_name(run.trainer->mode()), ", ", run.trainer->settings().mode_reason,
           c.parallel.reduce_dtype == DType::kBF16 ? "; gradients reduced in bf16" : "",
           run.trainer->grad_dtype() == DType::kBF16 ? "; the blocks' gradients in bf16" : "", "): ",
           count_of(data.size(), "block"), " of ", data.seq_len(), " tokens, ", count_of(c.steps, "step"), " of ",
           count_of(run.per_step * run.trainer->data_world(), "sequence"));
  log_info("data: ", data.summary());
  if (run.eval_data) log_info("eval data: ", run.eval_data->summary());
}

// The metrics file's first record: the run's id, what it trains and its resolved settings.
Json metrics_header(const TrainRun& run, bool resumed) {
  const TrainConfig& c = run.config();
  Json settings = run.save.train;
  settings["mode"] = parallel_mode_name(run.trainer->mode());
  settings["recompute"] = recompute_name(run.trainer->recompute());
  settings["grad_dtype"] = run.trainer->grad_dtype() == DType::kBF16 ? "bf16" : "fp32";
  settings["device"] = run.base.device;
  return Json{{"run_id", run.run_id}, {"model", c.model.preset.empty() ? c.model.model : "preset " + c.model.preset},
              {"data", c.data.source}, {"seed", c.seed}, {"resumed_at_step", resumed ? run.point.step : 0},
              {"config", settings}, {"config_toml", run.command.config_toml}};
}

// The run id a checkpoint was saved under: "" when it has none (saved before run ids) or its
// meta.json cannot be read (opening the checkpoint then says why).
std::string checkpoint_run_id(const std::string& ckpt) {
  try {
    return read_checkpoint_meta(ckpt).value("train", Json::object()).value("run_id", "");
  } catch (const Error&) {
    return "";
  }
}

// The run's first line (rank 0): its id (the resumed checkpoints' when it continues one: the
// newest whose meta.json reads, so that one failing its checks still names the run), model,
// data, mode and seed; then a --metrics file holding another run is refused.
void name_run(const TrainConfig& c, TrainRun& run, const ResumeChoice& resume) {
  for (const std::string& ckpt : resume.candidates())
    if (!(run.run_id = checkpoint_run_id(ckpt)).empty()) break;
  if (run.run_id.empty()) run.run_id = new_run_id();
  if (comm_options_from_env().rank != 0) return;
  log_info("anvil train: run ", run.run_id, resume.path().empty() ? "" : " (resumed)", ": ",
           c.model.preset.empty() ? "model " + c.model.model : "preset " + c.model.preset, ", data ", c.data.source,
           ", mode ", parallel_mode_name(c.parallel.mode), ", seed ", c.seed);
  if (!c.log.metrics.empty()) check_metrics_file(c.log.metrics, run.run_id, c.log.metrics_append);
}

// The data order (after the checkpoint's position), the metrics file, the checkpoints'
// settings (and a warning when the checkpoint was trained with other ones), the copies.
void open_outputs(TrainRun& run, bool resumed) {
  const OpenRun& b = run.base;
  const TrainConfig& c = run.config();
  const int cp = static_cast<int>(c.parallel.context_parallel);  // a group's ranks read the same blocks
  run.order = std::make_unique<BatchOrder>(c.data, c.seed, *run.data, b.world / cp, b.rank / cp);
  if (resumed) {
    run.order->resume_at(run.point.position, run.point.step);
    if (run.point.step >= c.steps)
      log_info("the checkpoint is at step ", run.point.step, " of --steps ", c.steps, ": nothing to train");
  }
  if (run.command.settings_toml) run.command.config_toml = run.command.settings_toml(c);
  SaveSettings& save = run.save;
  save.model_dir = b.model_dir;
  save.tokenizer_dir = c.data.tokenizer;
  save.train = train_record(c, b.world);
  save.train["run_id"] = run.run_id;
  run.throughput = Throughput(c.steps);
  if (!c.log.metrics.empty() && b.rank == 0)
    run.metrics = std::make_unique<MetricsFile>(c.log.metrics, metrics_header(run, resumed), c.log.metrics_append);
  if (!c.log.tensorboard.empty() && b.rank == 0)
    run.tensorboard = std::make_unique<TensorBoardWriter>(c.log.tensorboard);
  save.config_toml = run.command.config_toml;
  if (resumed) {
    std::string refused;
    for (const std::string& ch : refused_changes(run.point.meta.value("train", Json::object()), save.train))
      refused += (refused.empty() ? "" : ", ") + ch;
    ANVIL_ENSURE(refused.empty(), kUsage, "the checkpoint was trained with ", refused,
                 ": resuming it would train another objective (start a new run from its export instead)");
    std::string changed;
    for (const std::string& ch : continuation_changes(run.point.meta.value("train", Json::object()), save.train))
      changed += (changed.empty() ? "" : ", ") + ch;
    if (!changed.empty())
      log_warn("the checkpoint was trained with other settings (", changed,
               "): the run does not continue as an uninterrupted one would");
  }
  if (!c.checkpoint.on_save.empty() && b.rank == 0) run.copies = std::make_unique<SaveCopies>(c.checkpoint.on_save);
}

}  // namespace

void open_train(const TrainConfig& c, TrainRun& run) {
  ResumeChoice resume(c.checkpoint.dir, c.checkpoint.resume);
  name_run(c, run, resume);
  open_data(c, run);
  check_snapshot_memory(c.checkpoint, *run.base.table, run.base.comm.get());  // before any weight is read
  if (c.data.objective == Objective::kDpo) {  // the reference's pass, before the policy is loaded
    check_dpo(c.dpo);
    std::vector<const BlockSource*> sources = {run.data.get()};
    if (run.eval_data) sources.push_back(run.eval_data.get());
    run.reference = reference_logps(c, run.base, sources);
  }
  open_trainer(c, run, resume);
  if (!run.reference.empty()) run.trainer->set_reference(run.reference[0].chosen, run.reference[0].rejected);
  log_start(run);
  open_outputs(run, !resume.path().empty());
}

}  // namespace anvil
