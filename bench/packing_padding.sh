#!/usr/bin/env bash
# The padding of the bfd packings at sequence 2048 on chats of typical length: two seeded
# synthetic sets, bench/prepare_speed.sh's chats (20,000 rows of 2-6 turns of 5-80 words)
# and Capybara-shaped ones (16,000 rows of 1-5 exchanges, user turns of lognormal(3.5, 0.9)
# words, assistant turns of lognormal(5.0, 0.7): some rows longer than 2048 tokens), each
# prepared with --packing bfd-split, bfd and wrapped; prints anvil prepare's report lines.
# Usage: bench/packing_padding.sh PYTHON TOKENIZER_DIR [WORKDIR=$(mktemp -d)]
set -euo pipefail
py=$1 tok=$2 work=${3:-$(mktemp -d)}
anvil=${ANVIL:-build/anvil}
mkdir -p "$work"
"$py" - "$work" <<'PY'
import json, random, sys
work = sys.argv[1]
rng = random.Random(0)
words = ("the model trains on every GPU of one machine with fp32 master weights and bf16 compute "
         "gradients shard across ranks Grüße 世界 données модель 🙂 naïve").split()
say = lambda n: " ".join(rng.choice(words) for _ in range(n))
def write(name, rows):
    with open(work + "/" + name, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"messages": r}, ensure_ascii=False) + "\n")
write("speed.jsonl", [[{"role": "user" if t % 2 == 0 else "assistant", "content": say(rng.randint(5, 80))}
                       for t in range(rng.randint(2, 6))] for _ in range(20000)])
capy = []
for _ in range(16000):
    msgs = []
    for _ in range(rng.randint(1, 5)):
        msgs.append({"role": "user", "content": say(max(3, int(rng.lognormvariate(3.5, 0.9))))})
        msgs.append({"role": "assistant", "content": say(max(3, int(rng.lognormvariate(5.0, 0.7))))})
    capy.append(msgs)
write("capybara_like.jsonl", capy)
PY
for set in speed capybara_like; do
  for packing in bfd-split bfd wrapped; do
    "$anvil" prepare --tokenizer "$tok" --data "$work/$set.jsonl" --seq-len 2048 --packing "$packing" \
      --out "$work/out-$set-$packing" | sed "s|^wrote [^ ]*|$set|"
  done
done
