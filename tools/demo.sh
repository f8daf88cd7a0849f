#!/usr/bin/env bash
# The demo: builds anvil (tools/setup.sh) and trains the tiny preset from fresh weights on
# the bundled one-digit arithmetic conversations (data/demo/digits.jsonl: "What is 7 + 5?",
# "7 + 5 = 12"), on the GPU when there is one, else on the CPU (tests/test_demo.cpp holds it
# to three minutes on two cores and 45 right answers), and writes the trained model to
# build/demo-model. Then it asks the model the 50 questions of data/demo/digits_quiz.jsonl and
# counts the exact answers: the demo fails below 45 (90%). The training set holds every
# one-digit question, so the quiz is not held out: it shows that training took, not that the
# model generalises. Extra flags go to `anvil train`.
# ANVIL_BIN=FILE runs that anvil binary without the setup (the test of the demo does).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ANVIL_BUILD_DIR:-build}
anvil=${ANVIL_BIN:-}
if [ -z "$anvil" ]; then
  tools/setup.sh --no-oracles  # the test oracles' 5 GB virtualenv is for tools/test.sh
  anvil=$build/anvil
fi
"$anvil" train --preset tiny --tokenizer data/demo --data data/demo/digits.jsonl --assistant-only-loss \
  --seq-len 64 --micro-batch 8 --steps 1000 --lr 8e-3 --warmup 50 --schedule cosine --log-every 100 \
  --data-cache "$build/demo-cache" --export "$build/demo-model" "$@"
"$anvil" generate --model "$build/demo-model" --input data/demo/digits_quiz.jsonl --batch 50 \
  --max-new-tokens 16 > "$build/demo-answers.jsonl"
python3 - data/demo/digits_quiz.jsonl "$build/demo-answers.jsonl" <<'EOF'
import json, sys
questions = [json.loads(line) for line in open(sys.argv[1])]
answers = [json.loads(line)["text"] for line in open(sys.argv[2])]
right = 0
for q, a in zip(questions, answers):
    right += a == q["answer"]
    if a != q["answer"]:
        print(f"  {q['messages'][0]['content']} -> {a!r} (want {q['answer']!r})")
print(f"quiz questions: {right}/{len(questions)} answered exactly ({100 * right // len(questions)}%)")
sys.exit(0 if right * 10 >= 9 * len(questions) else 1)
EOF
echo "talk to it: $anvil generate --model $build/demo-model --prompt \"What is 7 + 5?\" --chat"
