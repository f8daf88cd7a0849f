"""Real English prose found on any machine with Python, as chats: the docstrings of its installed
modules (standard library and packages, read from the sources, nothing imported), each a chat
in which the user asks what a module, class or function does and the assistant answers with
its docstring. In path order, docstrings of at least 200 characters, each once, up to
MAX_CHARS characters in all. Used by the fp8_curve and long_curve experiments.

Usage: python3 bench/docstring_chats.py OUT.jsonl [MAX_CHARS=4000000]
"""
import ast
import json
import pathlib
import sys
import sysconfig


def main(out, max_chars):
    roots = [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")]
    rows, seen, chars = [], set(), 0
    for path in sorted({p for r in dict.fromkeys(roots) for p in pathlib.Path(r).rglob("*.py")}):
        if chars > max_chars:
            break
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef))]:
            doc = ast.get_docstring(node)
            if not doc or len(doc) < 200 or doc in seen:
                continue
            seen.add(doc)
            chars += len(doc)
            what = path.stem if node is tree else f"{path.stem}.{node.name}"
            rows.append({"messages": [{"role": "user", "content": f"What does {what} do in Python?"},
                                      {"role": "assistant", "content": doc}]})
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"{len(rows)} chats from Python's docstrings, {chars / 1e6:.2f} M characters")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 4e6)
