#!/usr/bin/env python3
"""Tests of the demo's data (data/demo), run by ctest (tests/CMakeLists.txt).

tools/make_demo_data.py run into a temporary folder writes exactly the files of data/demo,
byte for byte (nothing stale is left there); the held-out questions are questions of the
demo's task ("What is A + B?", A and B from 0 to 99) with their right answers, and none of
them is in the training file: the two files together hold every question of the task once.

Usage: tools/test_make_demo_data.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(TOOLS, "..", "data", "demo")


def read_rows(name):
    with open(os.path.join(DEMO, name)) as f:
        return [json.loads(line) for line in f]


def parse_sum(question):
    """(a, b) of "What is A + B?", or None where the question is not of that form."""
    words = question.split(" ")
    if len(words) != 5 or words[:2] != ["What", "is"] or words[3] != "+" or not words[4].endswith("?"):
        return None
    a, b = words[2], words[4][:-1]
    if not (a.isdigit() and b.isdigit()) or str(int(a)) != a or str(int(b)) != b:
        return None
    return int(a), int(b)


class DemoData(unittest.TestCase):
    def test_the_generator_writes_the_committed_files(self):
        with tempfile.TemporaryDirectory(prefix="demo-data-") as out:
            subprocess.run([sys.executable, os.path.join(TOOLS, "make_demo_data.py"), "--out", out], check=True,
                           capture_output=True)
            self.assertEqual(sorted(os.listdir(out)), sorted(os.listdir(DEMO)))
            for name in os.listdir(out):
                with open(os.path.join(out, name), "rb") as made, open(os.path.join(DEMO, name), "rb") as committed:
                    self.assertEqual(made.read(), committed.read(), name)

    def test_held_out_questions_are_sums_never_trained_on(self):
        held = read_rows("sums_heldout.jsonl")
        train = read_rows("sums_train.jsonl")
        self.assertGreaterEqual(len(held), 1000)
        held_pairs = set()
        for row in held:
            [turn] = row["messages"]
            self.assertEqual(turn["role"], "user")
            pair = parse_sum(turn["content"])
            self.assertIsNotNone(pair, turn["content"])
            self.assertTrue(all(0 <= n <= 99 for n in pair), turn["content"])
            self.assertEqual(row["answer"], str(sum(pair)), turn["content"])
            held_pairs.add(pair)
        train_pairs = set()
        for row in train:
            user, assistant = row["messages"]
            pair = parse_sum(user["content"])
            self.assertIsNotNone(pair, user["content"])
            self.assertEqual(assistant["content"], str(sum(pair)), user["content"])
            train_pairs.add(pair)
        self.assertEqual(len(held_pairs), len(held))
        self.assertEqual(len(train_pairs), len(train))
        self.assertEqual(held_pairs & train_pairs, set())
        self.assertEqual(held_pairs | train_pairs, {(a, b) for a in range(100) for b in range(100)})


if __name__ == "__main__":
    unittest.main()
