#!/usr/bin/env bash
# The two-GPU runs of issue 12, in one run, anvil beside the reference (ref_train.py under
# torchrun, torch.distributed's all-reduce):
#   1. topology; all_reduce / all_gather / reduce_scatter / p2p bus bandwidth beside torch,
#      also with NCCL_P2P_DISABLE=1;
#   2. scaling: Qwen3-1.7B, seq 2048, one sequence per GPU, no recompute: 1 GPU, 2 GPUs ddp
#      and fsdp (fp32 and bf16 gradient reduction; NCCL levers), beside ref_train.py;
#   3. Qwen3-8B fsdp on 2 GPUs beside ref_train.py fsdp;
#   4. 50-step loss curves on real chat data: 1 GPU, 2 GPUs ddp, 2 GPUs fsdp, ref_train.py
#      on 2 GPUs, same blocks in the same order, global batch 2;
#   5. a checkpoint written on 2 GPUs resumed on 1, and the other way round;
#   6. a rank killed mid-run: the launcher names it, nothing hangs (under 60 s).
# Usage:
#   bench/compare_multi_gpu.sh REF_DIR MODEL_DIR CHATS.jsonl [ANVIL_BINARY]
# REF_DIR holds ref_train.py and allreduce_bench.py; MODEL_DIR is a Qwen3 folder with its
# tokenizer (for the loss curves, e.g. Qwen3-1.7B); CHATS.jsonl has {"messages": [...]} rows.
# Results go to stdout and to the folder $OUT (default: a new temporary folder).
set -uo pipefail
ref_dir=${1:?usage: bench/compare_multi_gpu.sh REF_DIR MODEL_DIR CHATS.jsonl [ANVIL_BINARY]}
model=${2:?MODEL_DIR}
chats=${3:?CHATS.jsonl}
anvil=$(readlink -f "${4:-build/anvil}")
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink SHARP multicast stays off (not supported on the lent machine)
say() { echo; echo "=== $*"; }
step() {  # anvil bench step with a label; one JSON line into $out/step_<label>.json
  local label=$1; shift
  "$anvil" bench step --seq-len 2048 --micro-batch 1 --recompute none --steps 30 --warmup 10 "$@" \
    | tail -1 > "$out/step_$label.json" && echo "$label: $(cat "$out/step_$label.json")"
}
ref() {  # ref_train.py under torchrun with a label
  local label=$1 n=$2; shift 2
  torchrun --standalone --nproc-per-node="$n" "$ref_dir/ref_train.py" --steps 40 --no-recompute "$@" 2>"$out/ref_$label.err" \
    | grep '^RESULT ' | cut -c8- > "$out/ref_$label.json"; echo "ref $label: $(cat "$out/ref_$label.json")"
}

say "1. topology and collectives"
"$anvil" topo | tee "$out/topo.txt"
for p2p in default disabled; do
  env_p2p=(); [ $p2p = disabled ] && env_p2p=(NCCL_P2P_DISABLE=1)
  for c in all_reduce all_gather reduce_scatter; do
    echo "anvil $c (p2p $p2p):"
    env "${env_p2p[@]}" "$anvil" bench $c --nproc-per-node 2 -b 1M -e 1G | tee "$out/bench_${c}_$p2p.txt"
  done
  echo "torch all_reduce (p2p $p2p):"
  env "${env_p2p[@]}" torchrun --standalone --nproc-per-node=2 "$ref_dir/allreduce_bench.py" | tee "$out/torch_all_reduce_$p2p.txt"
done
"$anvil" bench p2p | tee "$out/bench_p2p.txt"

say "2. scaling, Qwen3-1.7B"
step one --preset qwen3-1.7b --mode ddp
step ddp --preset qwen3-1.7b --mode ddp --nproc-per-node 2
step fsdp --preset qwen3-1.7b --mode fsdp --nproc-per-node 2
step ddp_bf16 --preset qwen3-1.7b --mode ddp --nproc-per-node 2 --reduce-dtype bf16
step fsdp_bf16 --preset qwen3-1.7b --mode fsdp --nproc-per-node 2 --reduce-dtype bf16
ANVIL_NCCL_HIGH_PRIORITY=1 step ddp_prio --preset qwen3-1.7b --mode ddp --nproc-per-node 2
ANVIL_NCCL_HIGH_PRIORITY=1 step fsdp_prio --preset qwen3-1.7b --mode fsdp --nproc-per-node 2
for ctas in 4 8 16; do
  NCCL_MAX_CTAS=$ctas step ddp_ctas$ctas --preset qwen3-1.7b --mode ddp --nproc-per-node 2
  NCCL_MAX_CTAS=$ctas step fsdp_ctas$ctas --preset qwen3-1.7b --mode fsdp --nproc-per-node 2
done
ref one 1 --mode ddp --model qwen3-1.7b
ref ddp 2 --mode ddp --model qwen3-1.7b
ref fsdp 2 --mode fsdp --model qwen3-1.7b

say "3. Qwen3-8B fsdp on 2 GPUs"
step fsdp8b --preset qwen3-8b --mode fsdp --nproc-per-node 2
ref fsdp8b 2 --mode fsdp --model qwen3-8b

python3 - "$out" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
a1, r1 = load(d + "/step_one.json"), load(d + "/ref_one.json")
print("\nscaling = 2-GPU tokens/s / (2 x 1-GPU tokens/s)")
for p in sorted(glob.glob(d + "/step_*.json")):
    a = load(p)
    if not a or a.get("world") != 2 or a.get("params", 0) > 3e9: continue
    print("anvil %-12s %8.0f tok/s  scaling %5.1f%%  fwd %.1f bwd %.1f comm %.1f opt %.1f ms  peak %.1f GiB (plan %.1f)"
          % (os.path.basename(p)[5:-5], a["tokens_per_s"], 100 * a["tokens_per_s"] / (2 * a1["tokens_per_s"]),
             a["forward_ms"], a["backward_ms"], a["communication_ms"], a["optimizer_ms"], a["peak_allocated_gib"], a["planned_gib"]))
for m in ("ddp", "fsdp"):
    r = load("%s/ref_%s.json" % (d, m))
    if r and r1: print("ref   %-12s %8.0f tok/s  scaling %5.1f%%" % (m, r["tokens_per_s"], 100 * r["tokens_per_s"] / (2 * r1["tokens_per_s"])))
a8, r8 = load(d + "/step_fsdp8b.json"), load(d + "/ref_fsdp8b.json")
if a8: print("8B fsdp: anvil %.0f tok/s, peak %.2f GiB (plan %.2f, %+.1f%%)%s" % (a8["tokens_per_s"], a8["peak_allocated_gib"], a8["planned_gib"],
      100 * (a8["peak_allocated_gib"] / a8["planned_gib"] - 1), ", %.2fx ref %.0f" % (a8["tokens_per_s"] / r8["tokens_per_s"], r8["tokens_per_s"]) if r8 else ""))
PY

say "4. 50-step loss curves on $chats"
python3 - "$model" "$chats" "$out/blocks.safetensors" <<'PY'
# The blocks both trainers read: each chat rendered by its template, tokenized without
# special tokens, concatenated, cut into 2048-token blocks (anvil's packing).
import json, sys, torch
from safetensors.torch import save_file
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
ids = []
for line in open(sys.argv[2]):
    if line.strip():
        text = tok.apply_chat_template(json.loads(line)["messages"], tokenize=False)
        ids += tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) >= 2048 * 120: break
n = len(ids) // 2048
save_file({"input_ids": torch.tensor(ids[: n * 2048], dtype=torch.int64).view(n, 2048)}, sys.argv[3])
print("blocks:", n)
PY
curve() {  # label, anvil train flags...
  local label=$1; shift
  "$anvil" train --model "$model" --data "$out/blocks.safetensors" --steps 50 --lr 1e-5 --no-shuffle --log-every 1 \
    --metrics "$out/curve_$label.jsonl" "$@" > "$out/curve_$label.log" 2>&1 || echo "curve $label failed: $(tail -1 "$out/curve_$label.log")"
}
curve one --mode ddp --micro-batch 1 --grad-accum 2
curve ddp --mode ddp --nproc-per-node 2
curve fsdp --mode fsdp --nproc-per-node 2
curve fsdp_bf16 --mode fsdp --nproc-per-node 2 --reduce-dtype bf16
torchrun --standalone --nproc-per-node=2 "$ref_dir/ref_train.py" --mode ddp --model "$model" --data "$out/blocks.safetensors" \
  --no-shuffle --steps 50 --losses "$out/curve_ref.json" > "$out/curve_ref.log" 2>&1 || echo "ref curve failed"
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
def anvil(l):
    try: return [json.loads(x)["loss"] for x in open("%s/curve_%s.jsonl" % (d, l)) if '"step"' in x]
    except Exception: return []
curves = {l: anvil(l) for l in ("one", "ddp", "fsdp", "fsdp_bf16")}
try: curves["ref"] = json.load(open(d + "/curve_ref.json"))
except Exception: curves["ref"] = []
base = curves["one"]
for l, c in curves.items():
    n = min(len(c), len(base))
    worst = max((abs(a - b) for a, b in zip(c[:n], base[:n])), default=float("nan"))
    print("%-10s %2d steps, last %.4f, max |diff| vs 1 GPU %.2e (bar 5e-3)" % (l, len(c), c[-1] if c else float("nan"), worst))
PY

say "5. checkpoints 2 -> 1 and 1 -> 2"
# The saving runs go all 50 steps (the schedule of --steps 50) and save at step 25; the
# resumed runs continue from there with the other rank count.
ck() { "$anvil" train --model "$model" --data "$out/blocks.safetensors" --steps 50 --lr 1e-5 --no-shuffle --log-every 1 "$@"; }
ck --mode fsdp --nproc-per-node 2 --save-every 25 --keep-last 0 --ckpt-dir "$out/ck2" > "$out/ck2.log" 2>&1
ck --mode ddp --micro-batch 1 --grad-accum 2 --resume "$out/ck2/step-25" --metrics "$out/ck2to1.jsonl" > "$out/ck2to1.log" 2>&1
ck --mode ddp --micro-batch 1 --grad-accum 2 --save-every 25 --ckpt-dir "$out/ck1" > "$out/ck1.log" 2>&1
ck --mode fsdp --nproc-per-node 2 --resume "$out/ck1/step-25" --metrics "$out/ck1to2.jsonl" > "$out/ck1to2.log" 2>&1
python3 - "$out" <<'PY'
import json, sys
d = sys.argv[1]
base = [json.loads(x)["loss"] for x in open(d + "/curve_one.jsonl") if '"step"' in x]
for l in ("ck2to1", "ck1to2"):
    try: got = [json.loads(x) for x in open("%s/%s.jsonl" % (d, l)) if '"step"' in x]
    except Exception: print(l, "failed"); continue
    worst = max(abs(g["loss"] - base[g["step"] - 1]) for g in got)
    print("%s: steps %d-%d, max |diff| vs the uninterrupted 1-GPU curve %.2e" % (l, got[0]["step"], got[-1]["step"], worst))
PY

say "6. a rank killed mid-run"
"$anvil" train --preset qwen3-1.7b --data "$out/blocks.safetensors" --mode fsdp --nproc-per-node 2 --steps 100000 \
  > "$out/kill.log" 2>&1 &
launcher=$!
sleep 60
victim=$(ps -o pid= --ppid $launcher | sed -n 2p | tr -d ' ')  # the second worker: rank 1
t0=$(date +%s.%N)
kill -9 "$victim"
wait $launcher; rc=$?
t1=$(date +%s.%N)
echo "killed rank 1 (pid $victim): launcher exited $rc after $(python3 -c "print(round($t1 - $t0, 1))") s (bar 60 s)"
tail -3 "$out/kill.log"
echo; echo "all results in $out"
