#!/usr/bin/env bash
# Side by side on one GPU machine, in one run: anvil's training step (anvil bench step)
# against the reference PyTorch trainer (ref_train.py), like for like, one row per goal of
# the speed issue, then one table: tokens/s at peak allocated memory, the ratio, anvil's
# peak beside its plan, the goal and whether it is met.
#   bench/compare_reference.sh DIR_WITH_REF_TRAIN_PY [ANVIL_BINARY]
# Rows (Qwen3-1.7B, sequence 2048 unless said):
#   recompute    anvil --recompute full, 1 seq   vs  reference default (recompute, unfused AdamW)
#   no recompute anvil --recompute none, 1 seq   vs  --fused-adam --no-recompute
#   best         anvil's fastest setting at <= 35.0 GiB with the reference's 4 sequences per
#                optimizer step (micro-batch x accumulation = 4; candidates planned to fit,
#                measured)                       vs  --fused-adam --compile --batch 4
#   seed setting anvil's fastest 1 seq/step setting at <= the reference default's peak
#   0.6B         Qwen3-0.6B, sequence 1024, 1 seq: anvil's MFU
#   8B           Qwen3-8B on one GPU, --recompute none with 1 sequence per step and with 2
#                (micro-batch 2), each at <= 132 GiB
#                                                vs  reference --mode fsdp (it may run out of memory)
# On one GPU anvil's ddp and fsdp are the same (split masters: parallel/param_store.h), so
# its candidates are run in one mode.
# Short step counts keep it to a few minutes (the reference times steps after its 10th;
# --compile costs its compile time). Set REF_TIMEOUT (seconds, default 180) to bound each
# reference run; SKIP_8B=1 leaves out the 8B runs, ONLY_8B=1 runs only them (two calls
# when one would not fit in ten minutes).
set -euo pipefail
ref_dir=${1:?usage: bench/compare_reference.sh DIR_WITH_REF_TRAIN_PY [ANVIL_BINARY]}
anvil=${2:-build/anvil}
export NCCL_NVLS_ENABLE=0
out=$(mktemp -d)
table() {
python3 - "$out" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
def load(name):
    p = os.path.join(d, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else {"error": "not run"}
def ok(j): return "tokens_per_s" in j
def fig(j):
    if not ok(j): return j.get("error", "?")[:60]
    return "%s @ %.1f GiB" % (format(round(j["tokens_per_s"]), ","), j["peak_allocated_gib"])
def setting(j):
    if not ok(j): return ""
    accum = j.get("grad_accum", 1)
    s = "%s b%d%s %s" % (j["mode"], j["micro_batch"], " x%d" % accum if accum > 1 else "", j["recompute"])
    s += ", bf16 grads" if j.get("grad_dtype") == "bf16" else ""
    return s + ("" if j.get("overlap_optimizer", True) else " no-overlap")
def plan(j):
    if not ok(j): return ""
    err = (j["planned_gib"] - j["peak_allocated_gib"]) / j["peak_allocated_gib"]
    return "%.2f (%+.1f%%)%s" % (j["planned_gib"], 100 * err, "" if abs(err) <= 0.03 else " OVER 3%")
def ratio(a, r): return "%.2fx" % (a["tokens_per_s"] / r["tokens_per_s"]) if ok(a) and ok(r) else "-"
def best(tags, bar):
    runs = [load("a_" + t) for t in tags]
    runs = [j for j in runs if ok(j) and j["peak_allocated_gib"] <= bar]
    return max(runs, key=lambda j: j["tokens_per_s"]) if runs else {"error": "nothing under %.1f GiB" % bar}
cands = sorted(os.path.basename(p)[2:-5] for p in glob.glob(os.path.join(d, "a_*_b*_*.json")))
ref_default, ref_fused, ref_best = load("r_default"), load("r_fused"), load("r_best")
seed_bar = ref_default["peak_allocated_gib"] if ok(ref_default) else 32.3
def seqs(t):
    j = load("a_" + t)
    return j["micro_batch"] * j.get("grad_accum", 1) if ok(j) else 0
a_best = best([t for t in cands if seqs(t) == 4], 35.0)
a_seed = best([t for t in cands if "_b1_" in t], seed_bar)
small, ref_big = load("a_small"), load("r_8b")
big, big2 = load("a_8b_none"), load("a_8b_none_b2")
rows = [
    ("1.7B 1 seq, recompute vs recompute", load("a_ddp_b1_full"), "default (recompute, unfused)", ref_default, ""),
    ("1.7B 1 seq, no recompute vs fused no recompute", load("a_ddp_b1_none"), "--fused-adam --no-recompute", ref_fused, ""),
    ("1.7B best <= 35.0 GiB, 4 seq/step, vs best", a_best, "--fused-adam --compile --batch 4", ref_best,
     ">= 1.35x at <= 35.0 GiB"),
    ("1.7B seed setting (1 seq/step)", a_seed, "default (recompute, unfused)", ref_default,
     ">= 30,000 at <= %.1f GiB" % seed_bar),
    ("0.6B seq 1024, 1 seq", small, "", {"error": "not run"}, "MFU >= 35%"),
    ("8B one GPU, 1 seq/step", big, "--mode fsdp", ref_big, ">= 9,000 at <= 132 GiB"),
    ("8B one GPU, 2 seq/step", big2, "--mode fsdp", ref_big, ">= 9,000 at <= 132 GiB"),
]
def met(i, a, r):
    if not ok(a): return "no"
    if i == 2: return "yes" if ok(r) and a["tokens_per_s"] >= 1.35 * r["tokens_per_s"] and a["peak_allocated_gib"] <= 35.0 else "no"
    if i == 3: return "yes" if a["tokens_per_s"] >= 30000 and a["peak_allocated_gib"] <= seed_bar else "no"
    if i == 4: return "yes" if (a.get("mfu") or 0) >= 0.35 else "no"
    if i >= 5: return "yes" if a["tokens_per_s"] >= 9000 and a["peak_allocated_gib"] <= 132 else "no"
    return ""
print("| row | anvil setting | anvil tok/s @ peak | MFU | plan GiB (vs peak) | reference | reference tok/s @ peak | ratio | goal | met |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for i, (name, a, rset, r, goal) in enumerate(rows):
    mfu = "%.1f%%" % (100 * a["mfu"]) if ok(a) and a.get("mfu") else ""
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        name, setting(a), fig(a), mfu, plan(a), rset, fig(r) if rset else "", ratio(a, r), goal, met(i, a, r)))
print()
print("Every anvil run (step ms: forward / backward / optimizer from the synchronised breakdown steps):")
for p in sorted(glob.glob(os.path.join(d, "a_*.json"))):
    j = json.load(open(p))
    tag = os.path.basename(p)[2:-5]
    if ok(j):
        print("  %-18s %-28s %s  plan %s  step %.1f ms (fwd %.1f, bwd %.1f, opt %.1f)" % (
            tag, setting(j), fig(j), plan(j), j["step_ms"], j["forward_ms"], j["backward_ms"], j["optimizer_ms"]))
    else:
        print("  %-18s %s" % (tag, fig(j)))
PY
}
# The table is printed at the end, and also when the script is stopped early (a timeout's
# SIGTERM, Ctrl-C): the rows not run yet say so.
trap 'table; rm -rf "$out"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# anvil TAG ARGS...: one bench step run; its JSON line (or an error object) in $out/a_TAG.json
anvil_row() {
  local tag=$1
  shift
  local t0=$SECONDS
  if "$anvil" bench step "$@" > "$out/a_$tag.log" 2>&1; then
    tail -1 "$out/a_$tag.log" > "$out/a_$tag.json"
  else
    python3 -c 'import json,sys; print(json.dumps({"error": sys.argv[1]}))' \
      "$(tail -c 300 "$out/a_$tag.log" | tr '\n' ' ')" > "$out/a_$tag.json"
  fi
  echo "[$((SECONDS - t0)) s] anvil $tag: $(cat "$out/a_$tag.json")" >&2
}

# ref TAG ARGS...: one ref_train.py run; RESULT json, or why there is none, in $out/r_TAG.json
ref_row() {
  local tag=$1
  shift
  local rc=0 t0=$SECONDS
  timeout "${REF_TIMEOUT:-180}" torchrun --standalone --nproc-per-node=1 "$ref_dir/ref_train.py" --steps 16 "$@" \
    > "$out/r_$tag.log" 2>&1 || rc=$?
  if grep -q '^RESULT ' "$out/r_$tag.log"; then
    grep '^RESULT ' "$out/r_$tag.log" | tail -1 | cut -c8- > "$out/r_$tag.json"
  elif grep -q 'OutOfMemoryError\|CUDA out of memory' "$out/r_$tag.log"; then
    echo '{"error": "out of memory"}' > "$out/r_$tag.json"
  elif [ "$rc" = 124 ]; then
    echo "{\"error\": \"timed out after ${REF_TIMEOUT:-180} s\"}" > "$out/r_$tag.json"
  else
    python3 -c 'import json,sys; print(json.dumps({"error": sys.argv[1]}))' \
      "exit $rc: $(tail -c 300 "$out/r_$tag.log" | tr '\n' ' ')" > "$out/r_$tag.json"
  fi
  echo "[$((SECONDS - t0)) s] reference $tag: $(cat "$out/r_$tag.json")" >&2
}

# Candidates for "best" and "seed setting": every (mode, micro-batch, recompute) that the
# plan puts under the bar, so that nothing is run that cannot qualify.
planned_gib() {  # mode batch recompute [accumulation] -> planned GiB for Qwen3-1.7B, sequence 2048
  "$anvil" plan --preset qwen3-1.7b --seq-len 2048 --micro-batch "$2" --recompute "$3" --grad-accum "${4:-1}" --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]]["total"] / 2**30)' "$1"
}
fits() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$1" "$2"; }

p17=(--preset qwen3-1.7b --seq-len 2048 --steps 12 --warmup 4)
if [ "${ONLY_8B:-0}" != 1 ]; then
anvil_row ddp_b1_full "${p17[@]}" --micro-batch 1 --recompute full
anvil_row ddp_b1_none "${p17[@]}" --micro-batch 1 --recompute none
ref_row default --mode ddp --model qwen3-1.7b
ref_row fused --mode ddp --model qwen3-1.7b --fused-adam --no-recompute
ref_row best --mode ddp --model qwen3-1.7b --fused-adam --compile --batch 4
# Per recompute setting: 4 sequences per optimizer step as the reference's best, in the
# largest micro-batch (4, 2 or 1, accumulating the rest) planned under 35.0 GiB, and one
# sequence per step if planned under the seed's bar (32.3 GiB), each less 0.5% for the plan's
# error (measured within 0.8%, mostly above the peak). Full recomputation, the slowest, is
# left to the first row.
for r in none selective; do
  for b in 4 2 1; do
    a=$((4 / b))
    fits "$(planned_gib ddp "$b" "$r" "$a")" 34.8 || continue
    anvil_row "ddp_b${b}x${a}_${r}" "${p17[@]}" --micro-batch "$b" --grad-accum "$a" --recompute "$r"
    break
  done
  tag="ddp_b1_${r}"
  [ -e "$out/a_$tag.json" ] && continue
  fits "$(planned_gib ddp 1 "$r")" 32.1 || continue
  anvil_row "$tag" "${p17[@]}" --micro-batch 1 --recompute "$r"
done
anvil_row small --preset qwen3-0.6b --seq-len 1024 --micro-batch 1 --recompute none --steps 24 --warmup 6
fi
if [ "${SKIP_8B:-0}" != 1 ]; then
  p8=(--preset qwen3-8b --seq-len 2048 --steps 10 --warmup 3)
  anvil_row 8b_none "${p8[@]}" --micro-batch 1 --recompute none
  anvil_row 8b_none_b2 "${p8[@]}" --micro-batch 2 --recompute none
  ref_row 8b --mode fsdp --model qwen3-8b --steps 13
fi

