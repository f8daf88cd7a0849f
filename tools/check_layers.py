#!/usr/bin/env python3
"""Fails when a source file includes a layer above its own.

The layers of src/, bottom to top (docs/ARCHITECTURE.md draws them). A file's layer is the
first folder of its path under src/ (src/ops/cuda/gemm.cpp is in ops); it may include its own
layer and the layers below it. Prints every upward include as "file:line: layer -> layer"
and exits 1 when there is one; exits 2 when a folder of src/ is in no layer.

Usage: tools/check_layers.py [SRC_DIR]   (default: the src/ beside this script's folder)
"""
import os
import re
import sys

LAYERS = ["core", "sys", "io", "data", "ops", "comm", "model", "optim", "parallel", "plan",
          "infer", "report", "train", "launch", "cli"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    return path.split("/", 1)[0] if "/" in path else None


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad, unknown = [], set()
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            own = layer_of(rel)
            if own not in rank:
                unknown.add(own or rel)
                continue
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = layer_of(m.group(1))
                    if target is None:
                        continue  # a header beside the file, e.g. "kernel_util.cuh"
                    if target not in rank:
                        unknown.add(target)
                    elif rank[target] > rank[own]:
                        bad.append(f"{rel}:{n}: {own} -> {target} (includes {m.group(1)})")
    for line in bad:
        print(line)
    if unknown:
        print("folders in no layer (add them to LAYERS in tools/check_layers.py): " + ", ".join(sorted(unknown)))
        return 2
    if bad:
        print(f"{len(bad)} upward include(s); the layers, bottom to top: {' '.join(LAYERS)}")
        return 1
    print(f"layers ok: {' < '.join(LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
