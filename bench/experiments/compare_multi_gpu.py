"""Two GPUs, anvil beside the reference (bench/reference_train.py under torchrun).

  1. topology; all_reduce / all_gather / reduce_scatter / p2p bus bandwidth beside
     torch.distributed's all-reduce (bench/reference_allreduce.py), also with NCCL_P2P_DISABLE=1;
  2. scaling: Qwen3-1.7B, seq 2048, one sequence per GPU, no recompute: 1 GPU, 2 GPUs ddp and
     fsdp (fp32 and bf16 gradient reduction; NCCL levers), beside the reference;
  3. Qwen3-8B fsdp on 2 GPUs beside the reference's fsdp;
  4. 50-step loss curves on real chats: 1 GPU, 2 GPUs ddp, 2 GPUs fsdp, the reference on 2 GPUs,
     the same blocks in the same order, global batch 2;
  5. a checkpoint written on 2 GPUs resumed on 1, and the other way round;
  6. a rank killed mid-run: the launcher names it, nothing hangs (bar: 60 s).
"""
import os
import subprocess
import time

import make_inputs
import results as R

INPUTS = [("MODEL_DIR", "a Qwen3 folder with its tokenizer (for the loss curves, e.g. Qwen3-1.7B)"),
          ("CHATS", "JSONL of {\"messages\": [...]} rows")]
SETTINGS = {}
STEP = ["--seq-len", "2048", "--micro-batch", "1", "--recompute", "none", "--steps", "30", "--warmup", "10"]


def runs(x):
    model, chats, out = x.inputs["MODEL_DIR"], x.inputs["CHATS"], x.out
    x.say("1. topology and collectives")
    x.anvil("topo", "topo")
    for p2p in ("default", "disabled"):
        env = {"NCCL_P2P_DISABLE": "1"} if p2p == "disabled" else None
        for c in ("all_reduce", "all_gather", "reduce_scatter"):
            x.anvil("bench_%s_%s" % (c, p2p), "bench", c, "--nproc-per-node", "2", "-b", "1M", "-e", "1G", env=env)
        x.run("torch_all_reduce_" + p2p, [x.py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                           "%s/reference_allreduce.py" % x.bench], env=env)
    x.anvil("bench_p2p", "bench", "p2p")

    x.say("2. scaling, Qwen3-1.7B")
    p17 = ["--preset", "qwen3-1.7b"]
    two = ["--nproc-per-node", "2"]
    x.step("step_one", *STEP, *p17, "--mode", "ddp")
    for mode in ("ddp", "fsdp"):
        x.step("step_" + mode, *STEP, *p17, "--mode", mode, *two)
    for mode in ("ddp", "fsdp"):
        x.step("step_%s_bf16" % mode, *STEP, *p17, "--mode", mode, *two, "--reduce-dtype", "bf16")
    for mode in ("ddp", "fsdp"):
        x.step("step_%s_prio" % mode, *STEP, *p17, "--mode", mode, *two, env={"ANVIL_NCCL_HIGH_PRIORITY": "1"})
    for ctas in (4, 8, 16):
        for mode in ("ddp", "fsdp"):
            x.step("step_%s_ctas%d" % (mode, ctas), *STEP, *p17, "--mode", mode, *two, env={"NCCL_MAX_CTAS": ctas})
    ref = ["--steps", "40", "--no-recompute"]
    x.reference("ref_one", 1, *ref, "--mode", "ddp", "--model", "qwen3-1.7b")
    x.reference("ref_ddp", 2, *ref, "--mode", "ddp", "--model", "qwen3-1.7b")
    x.reference("ref_fsdp", 2, *ref, "--mode", "fsdp", "--model", "qwen3-1.7b")

    x.say("3. Qwen3-8B fsdp on 2 GPUs")
    x.step("step_fsdp8b", *STEP, "--preset", "qwen3-8b", "--mode", "fsdp", *two)
    x.reference("ref_fsdp8b", 2, *ref, "--mode", "fsdp", "--model", "qwen3-8b")

    x.say("4. 50-step loss curves on " + chats)
    blocks = out / "blocks.safetensors"
    x.call("blocks", make_inputs.chat_blocks, model, chats, blocks, 2048, 120, False)
    train = ["train", "--model", model, "--data", blocks, "--steps", "50", "--lr", "1e-5", "--no-shuffle",
             "--log-every", "1"]
    for label, flags in (("one", ["--mode", "ddp", "--micro-batch", "1", "--grad-accum", "2"]),
                         ("ddp", ["--mode", "ddp", *two]), ("fsdp", ["--mode", "fsdp", *two]),
                         ("fsdp_bf16", ["--mode", "fsdp", *two, "--reduce-dtype", "bf16"])):
        x.anvil("curve_" + label, *train, "--metrics", out / ("curve_%s.jsonl" % label), *flags, check=False)
    x.reference("curve_ref", 2, "--mode", "ddp", "--model", model, "--data", blocks, "--no-shuffle", "--steps", "50",
                "--losses", out / "curve_ref.json")

    x.say("5. checkpoints 2 -> 1 and 1 -> 2")
    # The saving runs go all 50 steps and save at step 25; the resumed runs continue from there
    # with the other rank count.
    one = ["--mode", "ddp", "--micro-batch", "1", "--grad-accum", "2"]
    x.anvil("ck2", *train, "--mode", "fsdp", *two, "--save-every", "25", "--keep-last", "0", "--ckpt-dir",
            out / "ck2", check=False)
    x.anvil("ck2to1", *train, *one, "--resume", out / "ck2/step-25", "--metrics", out / "ck2to1.jsonl", check=False)
    x.anvil("ck1", *train, *one, "--save-every", "25", "--ckpt-dir", out / "ck1", check=False)
    x.anvil("ck1to2", *train, "--mode", "fsdp", *two, "--resume", out / "ck1/step-25", "--metrics",
            out / "ck1to2.jsonl", check=False)

    x.say("6. a rank killed mid-run")
    x.call("kill", kill_rank_1, [x.bin, "train", "--preset", "qwen3-1.7b", "--data", blocks, "--mode", "fsdp", *two,
                                 "--steps", "100000"], out / "kill.log")


def kill_rank_1(argv, log):
    """Starts a two-rank run, kills its second worker (rank 1) after 60 s, times the launcher's exit."""
    with open(log, "w") as f:
        launcher = subprocess.Popen([str(a) for a in argv], stdout=f, stderr=subprocess.STDOUT)
    time.sleep(60)
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(launcher.pid)], capture_output=True, text=True)
    victim = int(children.stdout.split()[1])
    t0 = time.time()
    os.kill(victim, 9)
    rc = launcher.wait()
    print("killed rank 1 (pid %d): launcher exited %d after %.1f s (bar 60 s)" % (victim, rc, time.time() - t0))
    print("\n".join(open(log).read().splitlines()[-3:]))


def table(x):
    res, out = x.results, x.out
    for p2p in ("default", "disabled"):
        print("torch all_reduce (p2p %s): %s" % (p2p, (out / ("torch_all_reduce_%s.log" % p2p)).read_text().strip()))
    a1, r1 = res.get("step_one"), res.get("ref_one")
    print("\nscaling = 2-GPU tokens/s / (2 x 1-GPU tokens/s)")
    for label in sorted(res):
        a = res[label]
        if not label.startswith("step_") or not R.ok(a) or a.get("world") != 2 or a.get("params", 0) > 3e9:
            continue
        print("anvil %-12s %8.0f tok/s  scaling %5.1f%%  fwd %.1f bwd %.1f comm %.1f opt %.1f ms  peak %.1f GiB "
              "(plan %.1f)" % (label[5:], a["tokens_per_s"], 100 * a["tokens_per_s"] / (2 * a1["tokens_per_s"]),
                               a["forward_ms"], a["backward_ms"], a["communication_ms"], a["optimizer_ms"],
                               a["peak_allocated_gib"], a["planned_gib"]))
    for m in ("ddp", "fsdp"):
        r = res.get("ref_" + m)
        if R.ok(r) and R.ok(r1):
            print("ref   %-12s %8.0f tok/s  scaling %5.1f%%" % (m, r["tokens_per_s"],
                                                             100 * r["tokens_per_s"] / (2 * r1["tokens_per_s"])))
    a8, r8 = res.get("step_fsdp8b"), res.get("ref_fsdp8b")
    if R.ok(a8):
        print("8B fsdp: anvil %.0f tok/s, peak %.2f GiB (plan %.2f, %+.1f%%)%s" % (
            a8["tokens_per_s"], a8["peak_allocated_gib"], a8["planned_gib"],
            100 * (a8["peak_allocated_gib"] / a8["planned_gib"] - 1),
            ", %.2fx ref %.0f" % (a8["tokens_per_s"] / r8["tokens_per_s"], r8["tokens_per_s"]) if R.ok(r8) else ""))

    print("\nloss curves")
    curves = {l: R.losses(out / ("curve_%s.jsonl" % l)) for l in ("one", "ddp", "fsdp", "fsdp_bf16")}
    curves["ref"] = R.reference_losses(out / "curve_ref.json")
    base = curves["one"]
    for l, c in curves.items():
        n = min(len(c), len(base))
        worst = max((abs(a - b) for a, b in zip(c[:n], base[:n])), default=float("nan"))
        print("%-10s %2d steps, last %.4f, max |diff| vs 1 GPU %.2e (bar 5e-3)"
              % (l, len(c), c[-1] if c else float("nan"), worst))

    print("\ncheckpoints across rank counts")
    for l in ("ck2to1", "ck1to2"):
        got = R.metrics(out / (l + ".jsonl"))
        if not got or not base:
            print(l, "failed")
            continue
        worst = max(abs(got[s]["loss"] - base[s - 1]) for s in got)
        print("%s: steps %d-%d, max |diff| vs the uninterrupted 1-GPU curve %.2e" % (l, min(got), max(got), worst))
