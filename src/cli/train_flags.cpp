// anvil train's flags bound to the config tree: see cli/train_flags.h.
#include "cli/train_flags.h"

namespace anvil {
namespace {

void bind_sources(Args& a, TrainConfig& c) {
  DataSection& d = c.data;
  a.opt("--model", &c.model.model, "DIR|ID", "model folder, or a hub id in the local Hugging Face cache")
      .opt("--preset", &c.model.preset, "NAME", "train a built-in shape from fresh weights instead of --model")
      .opt("--data", &d.source, "FILE|DIR|ID",
           "chat or text rows: JSONL (plain, .gz, .zst), .parquet, a folder of them, or a hub dataset id in the "
           "local cache (packed on the fly and cached); or a folder made by anvil prepare, or safetensors holding "
           "input_ids I64 [N, T]", true)
      .opt("--split", &d.split, "NAME", "the split of a hub dataset id")
      .opt("--data-config", &d.config, "NAME", "the config (subset) of a hub dataset id")
      .opt("--tokenizer", &d.tokenizer, "DIR",
           "tokenizer.json folder for row data (JSONL, Parquet) [default: the model's]")
      .opt("--data-cache", &d.cache, "DIR", "where row data is packed [default: ~/.cache/anvil]")
      .opt("--eval-data", &c.eval.data, "SOURCE",
           "held-out data (what --data takes, packed the same way): its token-weighted mean loss, all ranks, no "
           "gradients, every --eval-every steps and at the end")
      .opt("--eval-split", &c.eval.split, "NAME",
           "the split of a hub dataset id given to --eval-data [default: its validation or test split]")
      .opt("--eval-every", &c.eval.every, "N", "evaluate every N steps (0: only at the end)")
      .choice("--eval-packing", &c.eval.packing, {"same", "bfd-split", "bfd", "wrapped"},
              "how --eval-data rows are packed (same: as --packing)")
      .opt("--eval-max-blocks", &c.eval.max_blocks, "N", "evaluate the first N blocks of the eval set (0: all)")
      .opt("--eval-fraction", &c.eval.fraction, "F",
           "hold out this fraction of the training rows as the eval set (chosen by --seed; instead of --eval-data)")
      .opt("--eval-rows", &c.eval.rows, "N", "hold out N of the training rows as the eval set (as --eval-fraction)");
  bind_packing(a, &d.packing,
               "how rows are packed into sequences of --seq-len: bfd-split, whole rows in best-fit-decreasing bins "
               "(TRL's bfd), a row longer than --seq-len split into pieces packed like rows; bfd, the same with a "
               "longer row cut at --seq-len (the rest dropped); wrapped, all rows concatenated and cut every "
               "--seq-len tokens (the seed's). bfd packings: each row's tokens attend only within it, positions "
               "restart at 0, the rest of a sequence is padding no loss counts");
  a.flag("--assistant-only-loss", &d.assistant_only_loss, "train only on the assistant turns of chats")
      .flag_off("--no-completion-only-loss", &d.completion_only_loss,
                "train prompt-completion rows on the prompt too (by default, as TRL, only on the completion)")
      .opt("--columns", &d.columns, "FIELD=COLUMN,...",
           "read a field from another column, e.g. messages=dialog,text=body (ShareGPT's conversations needs none)")
      .flag("--skip-bad-rows", &d.skip_bad_rows, "skip and count malformed rows instead of stopping")
      .opt("--device", &c.model.device, "cpu|cuda", "where to train [default: cuda when a GPU is present, else cpu]");
}

void bind_parallel(Args& a, TrainConfig& c) {
  ParallelSection& p = c.parallel;
  bind_mode(a, &p.mode,
            "replicated (ddp) or sharded (fsdp) parameters; auto: ddp when the memory plan fits the GPU, else fsdp "
            "(the log says which and why)");
  bind_reduce_dtype(a, &p.reduce_dtype,
                    "dtype of the gradient all-reduce (ddp) / reduce-scatter (fsdp). bf16 halves the bytes sent; each "
                    "rank's gradient is rounded to bf16 (8 significant bits, relative error up to 2^-9) before the "
                    "sum, and NCCL may round partial sums too, so the summed gradient carries about 3 significant "
                    "digits (masters, AdamW state and the norm stay fp32)");
  bind_grad_dtype(a, &p.grad_dtype,
                  "where the gradients of the blocks and the final norm are kept. auto: bf16 on a GPU with one "
                  "process and --grad-accum 1, else fp32; bf16 rounds each gradient once (as PyTorch's autocast and "
                  "FSDP2 do for the weights' bf16 copies) and halves its memory and bytes moved; the embedding's and "
                  "output layer's stay fp32");
  a.opt("--seq-len", &c.data.seq_len, "T", "tokens per sequence (must match the data's blocks) [default: the data's]")
      .opt("--steps", &c.steps, "N", "optimizer steps")
      .opt("--micro-batch,--batch", &c.data.micro_batch, "B", "sequences per micro-batch")
      .opt("--grad-accum", &c.data.grad_accum, "K", "micro-batches per optimizer step")
      .flag("--fsdp-defer-sync", &p.fsdp_defer_sync,
            "fsdp: reduce-scatter gradients once per step instead of per micro-batch (keeps the whole model's "
            "fp32 gradient; as PyTorch's set_requires_gradient_sync(False))")
      .opt("--context-parallel", &p.context_parallel, "N",
           "split each sequence over N ranks (every rank of the run; ddp or fsdp over the same ranks): each holds "
           "seq-len/N tokens, and attention trades them for a share of the heads by all-to-all (Ulysses; N must "
           "divide the key/value heads and --seq-len)");
  bind_recompute(a, &p.recompute,
                 "activation recomputation in backward: selective recomputes the norms and RoPE, full every block "
                 "(auto: the fastest that fits the plan in the GPU's memory)");
  bind_mlp_tile(a, &p.mlp_tile);
  bind_fp8(a, &p.fp8,
           "the blocks' seven linear layers (q/k/v, o, gate/up, down) in FP8 with scales from each tensor's amax: "
           "one per tensor, or one per row as torchao's rowwise; every operand E4M3; needs compute capability 8.9 or "
           "newer on a GPU, emulated exactly on the CPU");
  bind_offload(a, &p.offload_activations);
  a.flag_off("--no-overlap-optimizer", &p.overlap_optimizer,
             "run the optimizer alone after the backward instead of beside the next forward (the same results; "
             "for comparison)");
}

void bind_optim(Args& a, TrainConfig& c) {
  OptimizerConfig& w = c.optim.adamw;
  ScheduleConfig& s = c.optim.schedule;
  a.opt("--lr,--learning-rate", &s.lr, "LR", "peak learning rate")
      .opt("--weight-decay", &w.weight_decay, "WD", "AdamW decoupled weight decay")
      .opt("--beta1", &w.beta1, "B1", "AdamW beta1")
      .opt("--beta2", &w.beta2, "B2", "AdamW beta2")
      .opt("--eps", &w.eps, "EPS", "AdamW epsilon")
      .opt("--max-grad-norm", &w.max_grad_norm, "X", "clip the global gradient norm to X (0: off)")
      .opt("--warmup", &s.warmup_steps, "N", "linear warm-up steps")
      .choice("--schedule", &s.decay, {"constant", "cosine"}, "learning-rate schedule after warm-up")
      .opt("--lr-min", &s.lr_min, "LR", "cosine: the learning rate reached at the last step (in [0, --lr])")
      .opt("--seed", &c.seed, "N", "seed of the data order and of fresh weights")
      .flag_off("--no-shuffle", &c.data.shuffle, "read the blocks in file order");
}

void bind_outputs(Args& a, TrainConfig& c) {
  CheckpointSection& k = c.checkpoint;
  a.opt("--log-every", &c.log.every, "N", "print the loss every N steps")
      .opt("--metrics", &c.log.metrics, "FILE",
           "JSON lines: the run's header (run id, settings), then one per logged step; a file holding another "
           "run is refused unless this run resumes it")
      .flag("--metrics-append", &c.log.metrics_append, "add this run to a --metrics file holding another run")
      .opt("--tensorboard", &c.log.tensorboard, "DIR", "write TensorBoard event files (the metrics' scalars) into DIR")
      .opt("--export", &c.export_.dir, "DIR", "write a Hugging Face model folder at the end")
      .choice("--export-dtype", &c.export_.dtype, {"bf16", "fp32"}, "dtype of the exported weights")
      .opt("--save-every", &k.save_every, "N", "write a checkpoint every N steps into --ckpt-dir")
      .opt("--ckpt-dir", &k.dir, "DIR",
           "checkpoint folder; a run resumes from the newest complete checkpoint found there")
      .opt("--keep-last", &k.keep_last, "K", "keep only the newest K checkpoints (0: all)")
      .flag("--keep-best", &k.keep_best,
            "also keep the checkpoint of the lowest eval loss (each save step must be an --eval-every step)")
      .opt("--resume", &k.resume, "PATH", "resume from this checkpoint folder (any rank count or mode)")
      .once()
      .flag("--reset-data-position", &c.data.reset_position,
            "on resuming, read the blocks from the start instead of after the checkpoint's position (needed to "
            "resume with another --packing)")
      .once()
      .opt("--on-save", &k.on_save, "CMD",
           "after each complete checkpoint, run CMD <checkpoint folder> in the background (copies off the "
           "machine); --keep-last keeps what a copy still needs")
      .flag("--sync-save", &k.sync_save,
            "write checkpoints in the foreground (training waits) instead of from a snapshot in host memory "
            "in the background")
      .flag("--save-skip-busy", &k.skip_busy,
            "skip a checkpoint due while the last one is still being written (default: wait for it)");
}

}  // namespace

void bind_train_flags(Args& a, TrainConfig& c) {
  bind_sources(a, c);
  bind_parallel(a, c);
  bind_optim(a, c);
  bind_outputs(a, c);
}

Args& bind_mode(Args& a, ParallelMode* out, const std::string& help, std::vector<std::string> choices) {
  return a.choice("--mode", std::move(choices), help,
                  [out](const std::string& v) { *out = parse_parallel_mode(v); },
                  [out] { return std::string(parallel_mode_name(*out)); });
}

Args& bind_packing(Args& a, Packing* out, const std::string& help) {
  return a.choice("--packing", {"bfd-split", "bfd", "wrapped"}, help,
                  [out](const std::string& v) { *out = parse_packing(v); },
                  [out] { return std::string(packing_name(*out)); });
}

Args& bind_reduce_dtype(Args& a, DType* out, const std::string& help) {
  return a.choice("--reduce-dtype", {"fp32", "bf16"}, help,
                  [out](const std::string& v) { *out = v == "bf16" ? DType::kBF16 : DType::kF32; },
                  [out] { return std::string(*out == DType::kBF16 ? "bf16" : "fp32"); });
}

Args& bind_grad_dtype(Args& a, GradDType* out, const std::string& help) {
  return a.choice("--grad-dtype", {"auto", "fp32", "bf16"}, help,
                  [out](const std::string& v) { *out = parse_grad_dtype(v); },
                  [out] { return std::string(grad_dtype_name(*out)); });
}

Args& bind_fp8(Args& a, Fp8Recipe* out, const std::string& help) {
  return a.choice("--fp8", {"off", "tensorwise", "rowwise"}, help,
                  [out](const std::string& v) { *out = parse_fp8_recipe(v); },
                  [out] { return std::string(fp8_recipe_name(*out)); });
}

Args& bind_recompute(Args& a, Recompute* out, const std::string& help) {
  return a.choice("--recompute", {"none", "selective", "full", "auto"}, help,
                  [out](const std::string& v) { *out = parse_recompute(v); },
                  [out] { return std::string(recompute_name(*out)); });
}

Args& bind_offload(Args& a, bool* out) {
  return a.flag("--offload-activations", out,
                "with --recompute full (auto resolves to it): keep the blocks' checkpoints (the residual stream "
                "between blocks) in pinned host memory, copied out after each block's forward and back one block "
                "ahead of its backward, beside the compute; the device keeps two of them (the same results)");
}

Args& bind_mlp_tile(Args& a, int64_t* out) {
  return a.opt("--mlp-tile", out, "N",
               "run each block's MLP (gate/up, SwiGLU, down, and their backward) over N tokens at a time, "
               "recomputing gate_up in the backward, so that its buffers hold one tile (0, auto: untiled where the "
               "memory plan fits so, else tiles of at most 256 MiB; without a GPU, untiled while the micro-batch's "
               "gate_up takes at most 512 MiB; N >= the micro-batch's tokens: untiled)");
}

}  // namespace anvil
