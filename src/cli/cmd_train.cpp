// anvil train: flags -> TrainOptions -> run_train (train/loop.h).
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "ops/ops.h"
#include "train/loop.h"

namespace anvil {

int cmd_train(int argc, char** argv) {
  TrainOptions o;
  bool no_shuffle = false, no_overlap = false;
  std::string recompute = "none";
  LaunchFlags launch;
  std::string mode = "auto", reduce_dtype = "fp32", grad_dtype = "auto";
  Args a("train", "Full fine-tune a Qwen3, Qwen2 or Llama 3 model: fp32 master weights, AdamW, clipping at 1.0,\n"
                  "gradient accumulation; the loss every --log-every steps, tokens/s and peak memory at the end.");
  a.config("--config")
      .opt("--model", &o.model, "DIR|ID", "model folder, or a hub id in the local Hugging Face cache")
      .opt("--preset", &o.preset, "NAME", "train a built-in shape from fresh weights instead of --model")
      .opt("--data", &o.data, "FILE|DIR|ID",
           "chat or text rows: JSONL (plain, .gz, .zst), .parquet, a folder of them, or a hub dataset id in the "
           "local cache (packed on the fly and cached); or a folder made by anvil prepare, or safetensors holding "
           "input_ids I64 [N, T]", true)
      .opt("--split", &o.split, "NAME", "the split of a hub dataset id")
      .opt("--data-config", &o.data_config, "NAME", "the config (subset) of a hub dataset id")
      .opt("--tokenizer", &o.tokenizer, "DIR", "tokenizer.json folder for row data (JSONL, Parquet) [default: the model's]")
      .opt("--data-cache", &o.data_cache, "DIR", "where row data is packed [default: ~/.cache/anvil]")
      .opt("--eval-data", &o.eval_data, "SOURCE",
           "held-out data (what --data takes, packed the same way): its token-weighted mean loss, all ranks, no "
           "gradients, every --eval-every steps and at the end")
      .opt("--eval-split", &o.eval_split, "NAME", "the split of a hub dataset id given to --eval-data")
      .opt("--eval-every", &o.eval_every, "N", "evaluate every N steps (0: only at the end)")
      .flag("--assistant-only-loss", &o.assistant_only_loss, "train only on the assistant turns of chats")
      .flag("--skip-bad-rows", &o.skip_bad_rows, "skip and count malformed rows instead of stopping")
      .opt("--device", &o.device, "cpu|cuda", "where to train [default: cuda when a GPU is present, else cpu]")
      .choice("--mode", &mode, {"auto", "ddp", "fsdp"},
              "replicated (ddp) or sharded (fsdp) parameters; auto: ddp when the memory plan fits the GPU, else fsdp "
              "(the log says which and why)")
      .choice("--reduce-dtype", &reduce_dtype, {"fp32", "bf16"},
              "dtype of the gradient all-reduce (ddp) / reduce-scatter (fsdp). bf16 halves the bytes sent; each "
              "rank's gradient is rounded to bf16 (8 significant bits, relative error up to 2^-9) before the sum, "
              "and NCCL may round partial sums too, so the summed gradient carries about 3 significant digits "
              "(masters, AdamW state and the norm stay fp32)")
      .choice("--grad-dtype", &grad_dtype, {"auto", "fp32", "bf16"},
              "where the gradients of the blocks and the final norm are kept. auto: bf16 on a GPU with one process "
              "and --grad-accum 1, else fp32; bf16 rounds each gradient once (as PyTorch's autocast and FSDP2 do for "
              "the weights' bf16 copies) and halves its memory and bytes moved; the embedding's and output layer's "
              "stay fp32")
      .opt("--seq-len", &o.seq_len, "T", "tokens per sequence (must match the data's blocks)")
      .opt("--steps", &o.steps, "N", "optimizer steps")
      .opt("--micro-batch,--batch", &o.micro_batch, "B", "sequences per micro-batch")
      .opt("--grad-accum", &o.grad_accum, "K", "micro-batches per optimizer step")
      .flag("--fsdp-defer-sync", &o.fsdp_defer_sync,
            "fsdp: reduce-scatter gradients once per step instead of per micro-batch (keeps the whole model's "
            "fp32 gradient; as PyTorch's set_requires_gradient_sync(False))")
      .choice("--recompute", &recompute, {"none", "selective", "full", "auto"},
              "activation recomputation in backward: selective recomputes the norms and RoPE, full every block "
              "(auto: the fastest that fits the plan in the GPU's memory)")
      .flag("--no-overlap-optimizer", &no_overlap,
            "run the optimizer alone after the backward instead of beside the next forward (the same results; "
            "for comparison)")
      .opt("--lr", &o.optim.lr, "LR", "peak learning rate")
      .opt("--weight-decay", &o.optim.weight_decay, "WD", "AdamW decoupled weight decay")
      .opt("--beta1", &o.optim.beta1, "B1", "AdamW beta1")
      .opt("--beta2", &o.optim.beta2, "B2", "AdamW beta2")
      .opt("--eps", &o.optim.eps, "EPS", "AdamW epsilon")
      .opt("--max-grad-norm", &o.optim.max_grad_norm, "X", "clip the global gradient norm to X (0: off)")
      .opt("--warmup", &o.optim.warmup_steps, "N", "linear warm-up steps")
      .choice("--schedule", &o.optim.schedule, {"constant", "cosine"}, "learning-rate schedule after warm-up")
      .opt("--seed", &o.seed, "N", "seed of the data order and of fresh weights")
      .flag("--no-shuffle", &no_shuffle, "read the blocks in file order")
      .opt("--log-every", &o.log_every, "N", "print the loss every N steps")
      .opt("--metrics", &o.metrics, "FILE", "append one JSON object per logged step")
      .opt("--export", &o.export_dir, "DIR", "write a Hugging Face model folder at the end")
      .choice("--export-dtype", &o.export_dtype, {"bf16", "fp32"}, "dtype of the exported weights")
      .opt("--save-every", &o.save_every, "N", "write a checkpoint every N steps into --ckpt-dir")
      .opt("--ckpt-dir", &o.ckpt_dir, "DIR",
           "checkpoint folder; a run resumes from the newest complete checkpoint found there")
      .opt("--keep-last", &o.keep_last, "K", "keep only the newest K checkpoints (0: all)")
      .opt("--resume", &o.resume, "PATH", "resume from this checkpoint folder (any rank count or mode)")
      .opt("--on-save", &o.on_save, "CMD",
           "after each complete checkpoint, run CMD <checkpoint folder> in the background (copies off the "
           "machine); --keep-last keeps what a copy still needs");
  launch.declare(a);
  if (!a.parse(argc, argv)) return 0;
  const bool on_gpu = o.device == "cuda" || (o.device.empty() && cuda_available());
  if (launch_if_requested("train", launch, on_gpu, argc, argv)) return 0;
  o.mode = parse_parallel_mode(mode);
  o.reduce_dtype = reduce_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  o.grad_dtype = parse_grad_dtype(grad_dtype);
  o.shuffle = !no_shuffle;
  o.config_toml = "# anvil train settings, as resolved; anvil train --config FILE reads them\n" + a.to_toml();
  o.overlap_optimizer = !no_overlap;
  o.recompute = parse_recompute(recompute);
  if (o.log_every < 1) o.log_every = 1;
  o.args.assign(argv, argv + argc);
  const TrainSummary s = run_train(o);
  return s.stop_signal != 0 ? 128 + s.stop_signal : 0;  // 130 (SIGINT) or 143 (SIGTERM)
}

}  // namespace anvil
