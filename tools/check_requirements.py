"""Exits 0 when every `name==version` line of the requirements file given is installed at
that version in this interpreter; else prints the first one that is not and exits 1
(tools/setup.sh runs pip only then; the tests skip or fail, saying why)."""
import importlib.metadata as md
import sys

for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, version = line.split("==")
    try:
        found = md.version(name)
    except md.PackageNotFoundError:
        found = None
    if found != version:
        print(f"{name}=={version} is not installed" + (f" (found {found})" if found else ""))
        sys.exit(1)
