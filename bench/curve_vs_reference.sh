#!/usr/bin/env bash
# The loss curve beside the reference, in one run: Qwen3-0.6B with the same random weights
# (anvil init, loaded by both), the same blocks in file order (chats rendered by the Qwen3
# chat template, tokenized without special tokens, concatenated and cut into blocks), one
# block per step, constant learning rate, anvil train on one GPU beside ref_train.py (ddp,
# its default recomputation), and ref_train.py again in two settings as valid as its
# default (--fused-adam; --mode fsdp: FSDP2 with bf16 parameters instead of autocast): the
# reference's own spread from rounding, beside anvil's. Prints the curves'
# ends and each one's largest and mean relative difference from the reference, and the
# curves; the bar (issue 11's "what must not change") is 5e-3. Extra anvil binaries to
# compare (other builds): ANVIL_OTHER="B1 B2".
# Usage:
#   bench/curve_vs_reference.sh REF_DIR TOKENIZER_DIR CHATS.jsonl [ANVIL_BINARY]
# REF_DIR holds ref_train.py; TOKENIZER_DIR a Qwen3 tokenizer (tokenizer.json and
# tokenizer_config.json with its chat template); CHATS.jsonl has {"messages": [...]} rows
# (data/demo/arithmetic.jsonl will do). Settings through the environment: STEPS (100),
# SEQ (512), LR (3e-5), PRESET (qwen3-0.6b). Results go to $OUT (default: a new temporary
# folder).
set -uo pipefail
ref_dir=${1:?usage: bench/curve_vs_reference.sh REF_DIR TOKENIZER_DIR CHATS.jsonl [ANVIL_BINARY]}
tok=${2:?TOKENIZER_DIR}
chats=${3:?CHATS.jsonl}
anvil=$(readlink -f "${4:-build/anvil}")
steps=${STEPS:-100} seq=${SEQ:-512} lr=${LR:-3e-5} preset=${PRESET:-qwen3-0.6b}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
python3 - "$tok" "$chats" "$out/blocks.safetensors" "$seq" "$steps" <<'PY' || exit 1
import json, sys, torch
from safetensors.torch import save_file
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
seq, n = int(sys.argv[4]), int(sys.argv[5])
ids = []
for line in open(sys.argv[2]):
    if line.strip():
        text = tok.apply_chat_template(json.loads(line)["messages"], tokenize=False)
        ids += tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) >= seq * n: break
if len(ids) < seq * n: sys.exit("only %d tokens in %s: %d blocks of %d need more" % (len(ids), sys.argv[2], n, seq))
save_file({"input_ids": torch.tensor(ids[: n * seq], dtype=torch.int64).view(n, seq)}, sys.argv[3])
print("blocks: %d x %d tokens" % (n, seq))
PY
"$anvil" init --preset "$preset" --out "$out/model" > "$out/init.log" 2>&1 || { tail -3 "$out/init.log"; exit 1; }
train() {  # label binary
  "$2" train --model "$out/model" --data "$out/blocks.safetensors" --steps "$steps" --lr "$lr" --no-shuffle \
    --micro-batch 1 --log-every 1 --metrics "$out/$1.jsonl" > "$out/$1.log" 2>&1 || { tail -3 "$out/$1.log"; return 1; }
  python3 -c 'import json,sys; print(json.dumps([json.loads(x)["loss"] for x in open(sys.argv[1]) if "\"loss\"" in x]))' \
    "$out/$1.jsonl" > "$out/curve_$1.json"
}
ref() {  # label flags...
  local label=$1; shift
  torchrun --standalone --nproc-per-node=1 "$ref_dir/ref_train.py" --mode ddp --model "$out/model" \
    --data "$out/blocks.safetensors" --no-shuffle --steps "$steps" --lr "$lr" --losses "$out/curve_$label.json" "$@" \
    > "$out/$label.log" 2>&1 || { tail -3 "$out/$label.log"; return 1; }
}
train anvil "$anvil" || exit 1
others=()
for b in ${ANVIL_OTHER:-}; do
  others+=("anvil_other${#others[@]}"); train "${others[-1]}" "$(readlink -f "$b")" || exit 1
done
ref ref || exit 1
ref ref_fused --fused-adam || exit 1
ref ref_fsdp --mode fsdp || exit 1
python3 - "$out" anvil "${others[@]}" ref_fused ref_fsdp <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(d + "/curve_ref.json"))
print("reference (ref_train.py ddp): %.4f -> %.4f over %d steps" % (r[0], r[-1], len(r)))
for label in sys.argv[2:]:
    c = json.load(open("%s/curve_%s.json" % (d, label)))
    n = min(len(c), len(r))
    rel = [abs(x - y) / abs(y) for x, y in zip(c[:n], r[:n])]
    k = max(range(n), key=lambda i: rel[i])
    bar = "" if label.startswith("ref_") else "; bar 5e-3: " + ("met" if rel[k] <= 5e-3 else "NOT met")
    print("%-12s %.4f -> %.4f; relative difference from the reference: max %.2e (step %d), mean %.2e%s"
          % (label, c[0], c[n - 1], rel[k], k + 1, sum(rel) / n, bar))
print("the curves, every 5th step from step 5:")
for label in ["ref"] + sys.argv[2:]:
    c = json.load(open("%s/curve_%s.json" % (d, label)))
    print("%-12s %s" % (label, " ".join("%.4f" % x for x in c[4::5])))
PY
