"""The PyTorch trainer anvil is compared with: a plain torch.distributed loop over a
Hugging Face model, the way a PyTorch user would write it.

  ddp   fp32 parameters under DistributedDataParallel, the forward in bf16 autocast;
  fsdp  FSDP2 (fully_shard per decoder layer, then the root): bf16 parameters for the
        compute, fp32 sharded masters, gradients reduced in fp32.
Both: gradient checkpointing unless --no-recompute, AdamW without weight decay (fused with
--fused-adam, else PyTorch's default implementation), the gradient norm clipped to 1.0, the
loss of the whole block (labels = input_ids), optional torch.compile of the model.

The model is a preset's config with random weights (--model qwen3-1.7b; torch.manual_seed(0))
or a local Hugging Face folder; --num-layers N keeps the first N layers of either, with random
weights (anvil bench step --num-layers). The MoE presets (qwen3-30b-a3b, qwen3-235b-a22b) are
transformers' Qwen3MoeConfig with the hub's values; their experts run as
--experts-implementation says (transformers 5's experts_implementation: grouped_mm, its
default, eager or batched_mm). The data are random blocks (4,096 of --seq-len tokens from a
fixed seed) or --data FILE.safetensors holding input_ids [N, T], shuffled by
DistributedSampler (seed 0) unless --no-shuffle, which reads them in file order so that another
trainer sees the same batches. Steps after the 10th are timed. The result is one JSON line on
stdout (rank 0): tokens_per_s (all ranks), peak_allocated_gib and peak_reserved_gib (this
rank's), the settings, the first and last losses; --losses writes every step's loss (the mean
over ranks) as a JSON list. Without a GPU it runs on the CPU (gloo, the same bf16 compute there; the
peaks are then the process's peak resident memory), to check a small model's run end to end.

    torchrun --standalone --nproc-per-node=1 bench/reference_train.py --mode ddp --model qwen3-1.7b
"""
import argparse
import contextlib
import json
import os
import resource
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

# Qwen3 shapes: hidden, intermediate, layers, attention heads, key/value heads, tied embeddings.
PRESETS = {
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, True),
    "qwen3-1.7b": (2048, 6144, 28, 16, 8, True),
    "qwen3-4b": (2560, 9728, 36, 32, 8, True),
    "qwen3-8b": (4096, 12288, 36, 32, 8, False),
}
# Qwen3-MoE shapes (config.json on the hub): hidden, intermediate (of dense layers), layers,
# attention heads, key/value heads, experts, experts per token, each expert's intermediate.
MOE_PRESETS = {
    "qwen3-30b-a3b": (2048, 6144, 48, 32, 4, 128, 8, 768),
    "qwen3-235b-a22b": (4096, 12288, 94, 64, 4, 128, 8, 1536),
}
UNTIMED_STEPS = 10


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["ddp", "fsdp"], default="fsdp")
    ap.add_argument("--model", default="qwen3-1.7b",
                    help="a preset (%s) or a model folder" % ", ".join(list(PRESETS) + list(MOE_PRESETS)))
    ap.add_argument("--num-layers", type=int, default=0, help="the first N layers only, random weights (0: all)")
    ap.add_argument("--experts-implementation", choices=["grouped_mm", "eager", "batched_mm"], default="grouped_mm",
                    help="a MoE model's experts (transformers' experts_implementation)")
    ap.add_argument("--seq-len", type=int, default=2048, help="tokens per block of random data")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--batch", type=int, default=1, help="blocks per step on each rank")
    ap.add_argument("--no-recompute", action="store_true", help="no gradient checkpointing")
    ap.add_argument("--fused-adam", action="store_true")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--data", default="", help="safetensors with input_ids [N, T]")
    ap.add_argument("--no-shuffle", action="store_true", help="read the blocks in file order")
    ap.add_argument("--losses", default="", help="write every step's loss here as JSON")
    return ap.parse_args()


def preset_config(name):
    """The config of a preset (None for a model folder)."""
    common = dict(vocab_size=151936, head_dim=128, rope_theta=1000000.0, rms_norm_eps=1e-6,
                  max_position_embeddings=40960, use_cache=False)
    if name in PRESETS:
        hidden, inter, layers, heads, kv, tie = PRESETS[name]
        return Qwen3Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tie, **common)
    if name in MOE_PRESETS:
        hidden, inter, layers, heads, kv, experts, top_k, moe_inter = MOE_PRESETS[name]
        return Qwen3MoeConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                              num_attention_heads=heads, num_key_value_heads=kv, num_experts=experts,
                              num_experts_per_tok=top_k, moe_intermediate_size=moe_inter, norm_topk_prob=True,
                              decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001,
                              output_router_logits=False, tie_word_embeddings=False, **common)
    return None


def build_model(args):
    """--model's config (a preset's or a folder's): random weights (torch.manual_seed(0)) for a preset
    or with --num-layers, else the folder's weights; a MoE model's experts as --experts-implementation."""
    preset = preset_config(args.model)
    config = preset if preset is not None else AutoConfig.from_pretrained(args.model, use_cache=False)
    if preset is None and not args.num_layers:
        model = AutoModelForCausalLM.from_pretrained(args.model, config=config, dtype=torch.float32)
    else:
        if args.num_layers:
            if not 0 < args.num_layers <= config.num_hidden_layers:
                raise SystemExit("reference_train.py: --num-layers %d: %s has %d layers" % (
                    args.num_layers, args.model, config.num_hidden_layers))
            config.num_hidden_layers = args.num_layers
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if is_moe(config):
        model.set_experts_implementation(args.experts_implementation)
    return model


def is_moe(config):
    return getattr(config, "num_experts", 0) > 0 or getattr(config, "num_local_experts", 0) > 0


def blocks(args, vocab):
    if args.data:
        from safetensors.torch import load_file
        return load_file(args.data)["input_ids"].to(torch.int64)
    return torch.randint(0, vocab, (4096, args.seq_len), generator=torch.Generator().manual_seed(0))


def endless(loader, sampler):
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def distribute(model, mode, device, local_rank):
    """The model wrapped for MODE and the context its forward runs in."""
    if mode == "ddp":
        wrapped = DistributedDataParallel(model.to(device), device_ids=[local_rank] if device.type == "cuda" else None,
                                          gradient_as_bucket_view=True)
        return wrapped, lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model.to(device), contextlib.nullcontext


def train(args, model, forward, autocast, batches, device, world):
    """Runs the steps; returns (tokens/s over the timed steps, every step's loss)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, fused=args.fused_adam or None)
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, tokens, losses = 0.0, 0, []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        ids = next(batches).to(device)
        with autocast():
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step > UNTIMED_STEPS:
            seconds += time.perf_counter() - t0
            tokens += ids.numel() * world
        loss = loss.detach()
        if args.losses and world > 1:  # every rank holds as many tokens: the mean is the global loss
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    return tokens / seconds if seconds else None, losses


def peaks_gib(device):
    """(allocated, reserved) peak GiB of the GPU; on the CPU the process's peak resident memory, twice."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30, torch.cuda.max_memory_reserved(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    return rss, rss


def main():
    args = parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend="gloo")
    world = dist.get_world_size()

    model = build_model(args)
    data = blocks(args, model.config.vocab_size)
    sampler = DistributedSampler(data, shuffle=not args.no_shuffle, seed=0)
    batches = endless(DataLoader(data, batch_size=args.batch, sampler=sampler, drop_last=True), sampler)
    params = sum(p.numel() for p in model.parameters())
    config = model.config  # the model's, before DistributedDataParallel wraps it
    if not args.no_recompute:
        model.gradient_checkpointing_enable()
    model, autocast = distribute(model, args.mode, device, local_rank)
    forward = torch.compile(model) if args.compile else model
    tokens_per_s, losses = train(args, model, forward, autocast, batches, device, world)

    if dist.get_rank() == 0:
        allocated, reserved = peaks_gib(device)
        result = dict(mode=args.mode, model=args.model, world=world, seq_len=data.shape[1], batch=args.batch,
                      recompute=not args.no_recompute, fused_adam=args.fused_adam, compile=args.compile,
                      num_layers=config.num_hidden_layers,
                      experts_implementation=getattr(config, "_experts_implementation", None),
                      params=params, tokens_per_s=tokens_per_s,
                      peak_allocated_gib=allocated, peak_reserved_gib=reserved,
                      first_losses=losses[:5], last_loss=losses[-1])
        print(json.dumps(result), flush=True)
        if args.losses:
            with open(args.losses, "w") as f:
                json.dump(losses, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
