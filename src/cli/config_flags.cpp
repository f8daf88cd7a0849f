// The config tree's flags, one binder per section: see cli/config_flags.h.
#include "cli/config_flags.h"

#include "core/error.h"
#include "ops/ops.h"

namespace anvil {
namespace {

// A choice held in an enum: `parse` reads one of `choices`, `name` writes it back.
template <typename E>
Args& enum_choice(Args& a, const std::string& flag, E* out, std::vector<std::string> choices,
                  const std::string& help, E (*parse)(const std::string&), const char* (*name)(E)) {
  return a.choice(flag, std::move(choices), help, [out, parse](const std::string& v) { *out = parse(v); },
                  [out, name] { return std::string(name(*out)); });
}

DType parse_reduce_dtype(const std::string& v) { return v == "bf16" ? DType::kBF16 : DType::kF32; }
const char* reduce_dtype_name(DType d) { return d == DType::kBF16 ? "bf16" : "fp32"; }

// Where the rows come from and how they are packed, and the loss they train on.
void bind_data(Args& a, DataSection& d) {
  a.opt("--data", &d.source, "FILE|DIR|ID",
        "chat or text rows: JSONL (plain, .gz, .zst), .parquet, a folder of them, or a hub dataset id in the local "
        "cache (packed on the fly and cached); or a folder made by anvil prepare, or safetensors holding "
        "input_ids I64 [N, T]",
        true)
      .opt("--split", &d.split, "NAME", "the split of a hub dataset id")
      .opt("--data-config", &d.config, "NAME", "the config (subset) of a hub dataset id")
      .opt("--tokenizer", &d.tokenizer, "DIR",
           "tokenizer.json folder for rows (JSONL, Parquet) [default: the model's]")
      .opt("--data-cache", &d.cache, "DIR", "where row data is packed [default: ~/.cache/anvil]");
  bind_packing(a, &d.packing)
      .flag("--assistant-only-loss", &d.assistant_only_loss, "train only on the assistant turns of chats")
      .flag_off("--no-completion-only-loss", &d.completion_only_loss,
                "train prompt-completion rows on the prompt too (by default, as TRL, only on the completion)")
      .opt("--columns", &d.columns, "FIELD=COLUMN,...",
           "read a field from another column, e.g. messages=dialog,text=body (ShareGPT's conversations needs none)")
      .flag("--skip-bad-rows", &d.skip_bad_rows, "skip and count malformed rows instead of stopping")
      .flag_off("--no-shuffle", &d.shuffle, "read the blocks in file order")
      .flag("--reset-data-position", &d.reset_position,
            "on resuming, read the blocks from the start instead of after the checkpoint's position (needed to "
            "resume with another --packing)")
      .once();
}

void bind_eval(Args& a, EvalSection& e) {
  a.opt("--eval-data", &e.data, "SOURCE",
        "held-out data (what --data takes, packed the same way): its token-weighted mean loss, all ranks, no "
        "gradients, every --eval-every steps and at the end")
      .opt("--eval-split", &e.split, "NAME", "--eval-data's hub split [default: validation or test]")
      .opt("--eval-every", &e.every, "N", "evaluate every N steps (0: only at the end)")
      .choice("--eval-packing", &e.packing, {"same", "bfd-split", "bfd", "wrapped"},
              "how --eval-data rows are packed (same: as --packing)")
      .opt("--eval-max-blocks", &e.max_blocks, "N", "evaluate the first N blocks of the eval set (0: all)")
      .opt("--eval-fraction", &e.fraction, "F", "hold out this fraction of the rows (by --seed) to evaluate")
      .opt("--eval-rows", &e.rows, "N", "hold out N rows to evaluate (as --eval-fraction)");
}

void bind_optim(Args& a, OptimSection& o) {
  OptimizerConfig& w = o.adamw;
  ScheduleConfig& s = o.schedule;
  a.opt("--lr,--learning-rate", &s.lr, "LR", "peak learning rate")
      .opt("--weight-decay", &w.weight_decay, "WD", "AdamW decoupled weight decay")
      .opt("--beta1", &w.beta1, "B1", "AdamW beta1")
      .opt("--beta2", &w.beta2, "B2", "AdamW beta2")
      .opt("--eps", &w.eps, "EPS", "AdamW epsilon")
      .opt("--max-grad-norm", &w.max_grad_norm, "X", "clip the global gradient norm to X (0: off)")
      .opt("--warmup", &s.warmup_steps, "N", "linear warm-up steps")
      .choice("--schedule", &s.decay, {"constant", "cosine"}, "learning-rate schedule after warm-up")
      .opt("--lr-min", &s.lr_min, "LR", "cosine: the last step's learning rate (0 to --lr)");
}

void bind_log(Args& a, LogSection& l) {
  a.opt("--log-every", &l.every, "N", "print the loss every N steps")
      .opt("--metrics", &l.metrics, "FILE",
           "JSON lines: the run's header (run id, settings), then one per logged step; a file holding another "
           "run is refused unless this run resumes it")
      .flag("--metrics-append", &l.metrics_append, "add this run to a --metrics file holding another run")
      .opt("--tensorboard", &l.tensorboard, "DIR", "write TensorBoard event files (the metrics' scalars) into DIR");
}

void bind_export(Args& a, ExportSection& e) {
  a.opt("--export", &e.dir, "DIR",
        "write a Hugging Face model folder at the end: a new or empty folder, or an earlier export "
        "(never the --model folder)")
      .choice("--export-dtype", &e.dtype, {"bf16", "fp32"}, "dtype of the exported weights");
}

void bind_checkpoint(Args& a, CheckpointSection& k) {
  a.opt("--save-every", &k.save_every, "N", "write a checkpoint every N steps into --ckpt-dir")
      .opt("--ckpt-dir", &k.dir, "DIR",
           "checkpoint folder; a run resumes from the newest complete checkpoint found there, and "
           "saves its last step there")
      .opt("--keep-last", &k.keep_last, "K", "keep only the newest K checkpoints (0: all)")
      .flag("--keep-best", &k.keep_best,
            "also keep the checkpoint of the lowest eval loss (each save step must be an --eval-every step)")
      .opt("--resume", &k.resume, "PATH",
           "resume from this checkpoint (any rank count or mode), or from the newest complete one of a "
           "--ckpt-dir")
      .once()
      .opt("--on-save", &k.on_save, "CMD",
           "after each complete checkpoint, run CMD <checkpoint folder> in the background (copies off the "
           "machine); --keep-last keeps what a copy still needs")
      .flag("--sync-save", &k.sync_save, "save in the foreground, not from a snapshot in the background")
      .flag("--save-skip-busy", &k.skip_busy, "skip a save due while the last is still being written (else wait)");
}

}  // namespace

void bind_train_flags(Args& a, TrainConfig& c) {
  bind_model(a, c.model);
  bind_device(a, c.model);
  a.flag("--router-aux-loss", &c.model.router_aux_loss, "MoE: add the load-balancing loss though config.json doesn't");
  bind_data(a, c.data);
  bind_objective(a, &c.data.objective, c.dpo);
  bind_max_length(a, &c.data.max_length);
  a.opt("--ref-model", &c.dpo.ref_model, "DIR|ID", "dpo: the reference model [default: the start model]");
  bind_eval(a, c.eval);
  bind_shapes(a, c.data);
  bind_steps(a, &c.steps);
  bind_parallel(a, c.parallel);
  bind_optim(a, c.optim);
  a.opt("--seed", &c.seed, "N", "seed of the data order and of fresh weights");
  bind_log(a, c.log);
  bind_export(a, c.export_);
  bind_checkpoint(a, c.checkpoint);
}

void bind_model(Args& a, ModelSection& m) {
  a.opt("--model", &m.model, "DIR|ID", "model folder, or a hub id in the local Hugging Face cache")
      .opt("--preset", &m.preset, "NAME", "a built-in shape with fresh weights, instead of --model");
}

void bind_device(Args& a, ModelSection& m) { bind_device(a, &m.device); }

Args& bind_device(Args& a, std::string* device) {
  return a.opt("--device", device, "cpu|cuda", "where to run [default: cuda when a GPU is present, else cpu]");
}

std::string device_or_default(const std::string& device, const std::string& command) {
  const std::string d = !device.empty() ? device : cuda_available() ? "cuda" : "cpu";
  ANVIL_ENSURE(d == "cpu" || d == "cuda", kUsage, "anvil ", command, ": --device must be cpu or cuda, got '", d, "'");
  return d;
}

void bind_shapes(Args& a, DataSection& d) {
  a.opt("--seq-len", &d.seq_len, "T",
        "tokens per sequence: rows are packed into sequences of T tokens (row data needs it), blocks made before "
        "must be T long [default: the data's blocks' length; without data (anvil plan, anvil bench step's random "
        "tokens) 2048]")
      .opt("--micro-batch", &d.micro_batch, "B", "sequences per micro-batch and GPU")
      .opt("--grad-accum", &d.grad_accum, "K", "micro-batches per optimizer step (their gradients summed)");
}

void bind_steps(Args& a, int64_t* steps) { a.opt("--steps", steps, "N", "optimizer steps"); }

Args& bind_num_layers(Args& a, int64_t* num_layers) {
  return a.opt("--num-layers", num_layers, "N",
               "the model's (or preset's) first N layers only (fresh weights), as anvil init --num-layers writes "
               "them");
}

void bind_parallel(Args& a, ParallelSection& p) {
  enum_choice(a, "--mode", &p.mode, {"auto", "ddp", "zero2", "fsdp"},
              "replicated (ddp), ZeRO stage 2 (zero2: weights whole on every rank; masters, AdamW state and "
              "gradients sharded) or sharded (fsdp) parameters; auto: of the modes whose memory plan fits the GPU, "
              "the one predicted fastest (the first that fits of ddp, zero2, fsdp where nothing is predicted), as "
              "anvil plan advises",
              parse_parallel_mode, parallel_mode_name);
  enum_choice(a, "--reduce-dtype", &p.reduce_dtype, {"fp32", "bf16"},
              "dtype of the gradient all-reduce (ddp) / reduce-scatter (zero2, fsdp). bf16 halves the bytes sent, but "
              "rounds each rank's gradient (8 significant bits) before the sum, as NCCL may its partial sums: the "
              "sum carries about 3 significant digits (masters, AdamW state and the norm stay fp32)",
              parse_reduce_dtype, reduce_dtype_name);
  enum_choice(a, "--grad-dtype", &p.grad_dtype, {"auto", "fp32", "bf16"},
              "where the gradients of the blocks and the final norm are kept. auto: bf16 on a GPU with --grad-accum "
              "1, else fp32; bf16 rounds each gradient once (as PyTorch's autocast and FSDP2 do for the weights' "
              "bf16 copies) and halves its memory and bytes moved; the embedding's and output layer's stay fp32",
              parse_grad_dtype, grad_dtype_name);
  a.flag("--fsdp-defer-sync", &p.fsdp_defer_sync,
         "fsdp, zero2: reduce-scatter gradients once per step, not per micro-batch (keeps the whole model's fp32 "
         "gradient; PyTorch's set_requires_gradient_sync(False))")
      .opt("--context-parallel", &p.context_parallel, "N",
           "split each sequence over all N ranks: each holds seq-len/N tokens; attention trades them for heads by "
           "all-to-all (Ulysses; N divides the key/value heads and --seq-len)")
      .opt("--expert-parallel", &p.expert_parallel, "N", "MoE: each rank holds 1/N of each sparse layer's experts");
  enum_choice(a, "--recompute", &p.recompute, {"none", "selective", "full", "auto"},
              "activation recomputation in the backward: selective recomputes the norms and RoPE, full every block "
              "from its input; auto: the fastest setting whose memory plan fits the GPU (none wherever none fits), "
              "none without a GPU",
              parse_recompute, recompute_name);
  bind_mlp_tile(a, &p.mlp_tile);
  bind_fp8(a, &p.fp8);
  a.flag("--offload-activations", &p.offload_activations,
         "with --recompute full (auto resolves to it): keep the blocks' checkpoints (the residual stream between "
         "blocks) in pinned host memory, copied beside the compute, two on the GPU (the same results)")
      .flag_off("--no-overlap-optimizer", &p.overlap_optimizer,
                "run the optimizer after the backward (the same results)");
}

void bind_shared_sections(Args& a, TrainConfig& c) {
  bind_model(a, c.model);
  bind_shapes(a, c.data);
  bind_parallel(a, c.parallel);
}

void bind_step_model(Args& a, std::string* op_table, double* bus_gbps) {
  a.opt("--op-table", op_table, "FILE",
        "the step model's op costs (fitted by anvil bench step --write-op-table) [default: the built-in H200 "
        "table]")
      .opt("--bus-gbps", bus_gbps, "GB/s",
           "the step model's all-reduce bus bandwidth between the GPUs (anvil bench's busbw) [default: anvil plan "
           "without --gpu: the links anvil topo finds, else the GPU's usual link; anvil bench step: the GPU's usual "
           "link]");
}

Args& bind_mlp_tile(Args& a, int64_t* out) {
  return a.opt("--mlp-tile", out, "N",
               "run each block's MLP (gate/up, SwiGLU, down, and their backward) over N tokens at a time, "
               "recomputing gate_up in the backward, so that its buffers hold one tile (0, auto: untiled where the "
               "memory plan fits so, else tiles of at most 256 MiB; without a GPU, untiled while the micro-batch's "
               "gate_up takes at most 512 MiB; N >= the micro-batch's tokens: untiled)");
}

Args& bind_fp8(Args& a, Fp8Recipe* out) {
  return enum_choice(a, "--fp8", out, {"off", "tensorwise", "rowwise"},
                     "the blocks' seven linear layers (q/k/v, o, gate/up, down) in FP8 with scales from each "
                     "tensor's amax: one per tensor, or one per row as torchao's rowwise; every operand E4M3; needs "
                     "compute capability 8.9 or newer on a GPU, emulated exactly on the CPU",
                     parse_fp8_recipe, fp8_recipe_name);
}

Args& bind_packing(Args& a, Packing* out) {
  return enum_choice(a, "--packing", out, {"bfd-split", "bfd", "wrapped"},
                     "how rows are packed into sequences of --seq-len: bfd-split, whole rows in best-fit-decreasing "
                     "bins (TRL's bfd), a row longer than --seq-len split into pieces packed like rows; bfd, the "
                     "same with a longer row cut at --seq-len (the rest dropped); wrapped, all rows concatenated and "
                     "cut every --seq-len tokens. bfd packings: each row's tokens attend only within it, positions "
                     "restart at 0, the rest of a sequence is padding no loss counts",
                     parse_packing, packing_name);
}

Args& bind_objective_choice(Args& a, Objective* objective) {
  return enum_choice(a, "--objective", objective, {"sft", "dpo"},
                     "sft: next-token loss; dpo: TRL's DPO on preference rows", parse_objective, objective_name);
}

Args& bind_max_length(Args& a, int64_t* max_length) {
  return a.opt("--max-length", max_length, "N", "dpo: keep a sequence's first N tokens (TRL's max_length)");
}

void bind_objective(Args& a, Objective* objective, DpoSection& d) {
  bind_objective_choice(a, objective).opt("--beta", &d.beta, "B", "dpo: TRL's beta (ipo: its tau)");
  enum_choice(a, "--dpo-loss", &d.loss, {"sigmoid", "ipo", "robust"},
              "dpo: TRL's loss_type (robust: sigmoid, label-smoothed)",
              parse_dpo_loss, dpo_loss_name)
      .opt("--label-smoothing", &d.label_smoothing, "E", "dpo robust: a preference's flip chance, [0, 0.5)");
}

}  // namespace anvil
