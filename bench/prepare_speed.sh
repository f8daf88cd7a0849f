#!/usr/bin/env bash
# anvil prepare from Parquet against the same rows as JSONL: N synthetic chats (2-6 turns,
# mixed ASCII and non-ASCII words) written by pyarrow (snappy, dictionary, its defaults) and
# as JSONL, each prepared twice; prints the best wall time of each.
# Usage: bench/prepare_speed.sh PYTHON TOKENIZER_DIR [N=100000] [WORKDIR=$(mktemp -d)]
set -euo pipefail
py=$1 tok=$2 n=${3:-100000} work=${4:-$(mktemp -d)}
mkdir -p "$work"
anvil=${ANVIL:-build/anvil}
"$py" - "$n" "$work" <<'PY'
import json, random, sys
import pyarrow as pa, pyarrow.parquet as pq
n, work = int(sys.argv[1]), sys.argv[2]
rng = random.Random(0)
words = ("the model trains on every GPU of one machine with fp32 master weights and bf16 compute "
         "gradients shard across ranks Grüße 世界 données модель 🙂 naïve").split()
rows = []
for i in range(n):
    msgs = []
    for t in range(rng.randint(2, 6)):
        role = "user" if t % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": " ".join(rng.choice(words) for _ in range(rng.randint(5, 80)))})
    rows.append({"messages": msgs})
with open(work + "/chats.jsonl", "w", encoding="utf-8") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
pq.write_table(pa.Table.from_pylist(rows), work + "/chats.parquet")
PY
ls -la "$work"/chats.jsonl "$work"/chats.parquet
for src in chats.jsonl chats.parquet; do
  best=
  for run in 1 2; do
    t0=$(date +%s.%N)
    "$anvil" prepare --tokenizer "$tok" --data "$work/$src" --seq-len 2048 --out "$work/out-$src" >/dev/null
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ -z "$best" ] || [ "$(echo "$t < $best" | bc)" = 1 ]; then best=$t; fi
  done
  echo "$src: best of 2: ${best} s"
done
"$py" - "$work" <<'PY'
import json, sys
def blocks(path):
    b = open(path, "rb").read()
    h = json.loads(b[16:16 + int.from_bytes(b[8:16], "little")])
    return h["num_blocks"], b[h["data_offset"]:]
a, b = (blocks(sys.argv[1] + "/out-chats.%s/packed.bin" % s) for s in ("jsonl", "parquet"))
print("blocks:", a[0], "identical" if a == b else "DIFFERENT")
PY
