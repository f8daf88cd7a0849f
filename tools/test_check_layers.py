#!/usr/bin/env python3
"""Tests of tools/check_layers.py, run by ctest (tests/CMakeLists.txt).

A small src tree in a temporary folder: a file that includes a layer above its own fails
the check (exit 1) with a line naming the file, the line and both layers; the same tree
without that include passes; a folder in no layer is exit 2. The project's own src/ is
checked by the ctest test check_layers.

Usage: tools/test_check_layers.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_layers.py")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def check(src):
    r = subprocess.run([sys.executable, CHECK, src], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout + r.stderr


class CheckLayers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="check-layers-")
        self.src = self.tmp.name
        write(self.src, "train/loop.h", '#pragma once\n#include "core/error.h"\n')
        write(self.src, "core/error.h", "#pragma once\n")
        write(self.src, "ops/cuda/gemm.cpp", '#include "kernel_util.cuh"\n#include "ops/ops.h"\n#include <vector>\n')

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_tree_whose_includes_go_down_passes(self):
        code, out = check(self.src)
        self.assertEqual(code, 0, out)
        self.assertIn("layers ok", out)

    def expect_failure(self, rel, text, want_code, lines):
        write(self.src, rel, text)
        code, out = check(self.src)
        self.assertEqual(code, want_code, out)
        for line in lines:
            self.assertIn(line, out)

    def test_an_upward_include_fails_naming_the_file_and_both_layers(self):
        self.expect_failure("core/x.h", '#pragma once\n#include <string>\n#include "train/loop.h"\n', 1,
                            ["core/x.h:3: core -> train (includes train/loop.h)", "1 upward include(s)"])

    def test_a_folder_in_no_layer_is_exit_2(self):
        self.expect_failure("gadgets/x.h", '#pragma once\n#include "core/error.h"\n', 2,
                            ["folders in no layer (add them to LAYERS in tools/check_layers.py): gadgets"])


if __name__ == "__main__":
    unittest.main()
