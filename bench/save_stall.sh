#!/usr/bin/env bash
# Checkpoints that do not stop the run (issue 29's goals), measured in one call on a GPU
# machine. First `anvil bench disk` on the checkpoint folder: the disk's sequential write
# (fsync timed) and read (page cache dropped) bandwidth. Then, for each model (fresh weights
# from a preset: no download), on random blocks:
#   - anvil train without saves, and the same run with asynchronous saves every EVERY steps
#     (--keep-last 1): the stall per save, from the train log ("training stalled S s": the
#     snapshot's copy and any wait for the previous save) and from the metrics (the interval
#     between the saving step's line and the next one, minus the median interval); the
#     background write's bandwidth beside bench disk's write; the run's tokens/s with saves
#     against without (steps after the 10th);
#   - a resume from the newest checkpoint with its pages dropped from the cache: the
#     checksum pass's and the load's GB/s (they run side by side) beside bench disk's read.
# Usage: bench/save_stall.sh CKPT_DIR [ANVIL_BINARY]
# Environment: PRESETS (default "qwen3-0.6b qwen3-1.7b"; qwen3-8b takes a call of its own:
# 98 GB of snapshot and checkpoint, one save, so it needs that much host memory and disk),
# STEPS and EVERY (default 500 and 50; qwen3-8b 15 and 10), PLAIN (1: the run without saves
# too; qwen3-8b 0, its cost is not a goal), SEQ (2048), NPROC (1; more: the
# run is fsdp on NPROC GPUs), DISK_SIZE (bench disk's file, 16G), VOCAB (token ids drawn below it,
# 151000). Logs stay in $OUT (default:
# a new temporary folder).
set -uo pipefail
ckpt_root=${1:?usage: bench/save_stall.sh CKPT_DIR [ANVIL_BINARY]}
anvil=$(readlink -f "${2:-build/anvil}")
presets=${PRESETS:-qwen3-0.6b qwen3-1.7b}
seq=${SEQ:-2048} nproc=${NPROC:-1}
out=${OUT:-$(mktemp -d)}
mkdir -p "$ckpt_root" "$out"
export NCCL_NVLS_ENABLE=0
par=()
[ "$nproc" -gt 1 ] && par=(--nproc-per-node "$nproc" --mode fsdp)

"$anvil" bench disk "$ckpt_root" --size "${DISK_SIZE:-16G}" --json > "$out/disk.json" || exit 1
echo "bench disk: $(cat "$out/disk.json")"

# Random token ids as a safetensors file of N x SEQ int64 (the standard library only).
blocks() {
python3 - "$1" "$2" "$seq" "${VOCAB:-151000}" <<'PY'
import json, random, struct, sys
path, n, seq, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
header = json.dumps({"input_ids": {"dtype": "I64", "shape": [n, seq], "data_offsets": [0, 8 * n * seq]}}).encode()
header += b" " * (-len(header) % 8)
rng = random.Random(0)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header)
    for _ in range(n):
        f.write(struct.pack("<%dq" % seq, *(rng.randrange(vocab) for _ in range(seq))))
PY
}

# Drops a folder's files from the page cache (a resume then reads the disk).
uncache() {
python3 - "$1" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}

for preset in $presets; do
  steps=${STEPS:-500} every=${EVERY:-50} plain=${PLAIN:-1}
  if [ "$preset" = qwen3-8b ]; then steps=${STEPS:-15} every=${EVERY:-10} plain=${PLAIN:-0}; fi
  ckpt="$ckpt_root/$preset"
  rm -rf "$ckpt"
  blocks "$out/blocks.safetensors" $((steps * nproc + 16)) || exit 1
  run=("$anvil" train --preset "$preset" --data "$out/blocks.safetensors" --steps "$steps" --lr 1e-5 --log-every 1
       --no-shuffle "${par[@]}")
  rm -f "$out/$preset.plain.jsonl"
  if [ "$plain" = 1 ]; then
    "${run[@]}" --metrics "$out/$preset.plain.jsonl" > "$out/$preset.plain.log" 2>&1 ||
      { echo "$preset without saves failed:"; tail -5 "$out/$preset.plain.log"; continue; }
  fi
  "${run[@]}" --metrics "$out/$preset.saves.jsonl" --ckpt-dir "$ckpt" --save-every "$every" --keep-last 1 \
    > "$out/$preset.saves.log" 2>&1 ||
    { echo "$preset with saves failed:"; tail -5 "$out/$preset.saves.log"; continue; }
  newest=$(ls -d "$ckpt"/step-* | sort -t- -k2 -n | tail -1)
  uncache "$ckpt"
  "$anvil" train --preset "$preset" --data "$out/blocks.safetensors" --steps $((${newest##*-} + 1)) --lr 1e-5 \
    --no-shuffle --ckpt-dir "$ckpt" "${par[@]}" > "$out/$preset.resume.log" 2>&1 ||
    { echo "$preset resume failed:"; tail -5 "$out/$preset.resume.log"; }
  python3 - "$out" "$preset" "$every" <<'PY'
import json, re, statistics, sys
out, preset, every = sys.argv[1], sys.argv[2], int(sys.argv[3])
disk = json.load(open(out + "/disk.json"))
def metrics(kind):
    return {j["step"]: j for j in map(json.loads, open("%s/%s.%s.jsonl" % (out, preset, kind))) if "elapsed_s" in j}
def rate(m):  # tokens/s over the steps after the 10th, wall clock (saves included)
    last = max(m)
    return (last - 10) / (m[last]["elapsed_s"] - m[10]["elapsed_s"])
saves = metrics("saves")
gaps = {s: saves[s + 1]["elapsed_s"] - saves[s]["elapsed_s"] for s in saves if s + 1 in saves and s > 1}
normal = statistics.median(g for s, g in gaps.items() if s % every)
log = open("%s/%s.saves.log" % (out, preset)).read()
said = [float(x) for x in re.findall(r"training stalled ([0-9.]+) s", log)]
wrote = [(float(g), float(r))
         for g, r in re.findall(r"([0-9.]+) GB written in the background in [0-9.]+ s \(([0-9.]+) GB/s", log)]
print("%s: %d saves of %.2f GB; step %.1f ms" % (preset, len(wrote), wrote[0][0] if wrote else 0, 1000 * normal))
for s in sorted(s for s in gaps if s % every == 0):
    print("  save at step %d: stall %.2f s from the metrics (that interval %.2f s minus a normal step)"
          % (s, gaps[s] - normal, gaps[s]))
print("  stall per save from the log: %s s (max %.2f)" % (", ".join("%.2f" % x for x in said), max(said or [0])))
print("  background write: %s GB/s; bench disk write %.2f GB/s: %s" % (
    ", ".join("%.2f" % r for _, r in wrote), disk["write_gbps"],
    ", ".join("%.0f%%" % (100 * r / disk["write_gbps"]) for _, r in wrote)))
try:
    a, b = rate(metrics("plain")), rate(saves)
    print("  steps/s without saves %.3f, with a save every %d %.3f: the saves cost %.2f%%"
          % (a, every, b, 100 * (a - b) / a))
except OSError:
    print("  no run without saves (PLAIN=1 adds it)")
try:
    res = open("%s/%s.resume.log" % (out, preset)).read()
    v = re.search(r"verified: ([0-9.]+) GB checksummed in ([0-9.]+) s \(([0-9.]+) GB/s\)", res)
    l = re.search(r"this rank loaded ([0-9.]+) GB in ([0-9.]+) s \(([0-9.]+) GB/s\)", res)
    # the checksum pass runs beside the load: the resume reads for the longer of the two
    both = float(v.group(1)) / max(float(v.group(2)), float(l.group(2)))
    print("  resume: checksums %s GB/s, load %s GB/s (rank 0; the two side by side), the checkpoint read at %.2f GB/s; "
          "bench disk read %.2f GB/s: %.0f%% / %.0f%% / %.0f%%" % (v.group(3), l.group(3), both, disk["read_gbps"],
          100 * float(v.group(3)) / disk["read_gbps"], 100 * float(l.group(3)) / disk["read_gbps"],
          100 * both / disk["read_gbps"]))
except (AttributeError, OSError) as e:
    print("  resume: no figures (%s)" % e)
PY
done
echo "logs: $out"
