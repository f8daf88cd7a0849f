#!/usr/bin/env python3
"""The bench driver: runs one experiment of bench/experiments/ and prints its table.

    bench/run.py --list                              # the experiments, one line each
    bench/run.py EXPERIMENT --help                   # what it measures, its inputs and settings
    bench/run.py EXPERIMENT [INPUT...] [--set NAME=VALUE]... [--anvil build/anvil] [--out DIR]
    bench/run.py EXPERIMENT|all --dry-run [INPUT...] # the command lines, nothing run

An experiment is a module with a docstring (what it measures), INPUTS (the paths it needs, in
order), SETTINGS (names and defaults, changed with --set), runs(x), which issues its runs through
the Runner x, and table(x), which prints what they measured. Each run's output goes to
OUT/LABEL.log; the results are read with bench/results.py. Run it from the repository root
with a Python that has torch and transformers where the experiment runs the reference.
"""
import argparse
import importlib
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # no __pycache__ beside the sources
import results  # noqa: E402


class Stop(Exception):
    """A run failed and the experiment cannot go on."""


class Run:
    def __init__(self, rc=0, out="", err=""):
        self.rc, self.out, self.err = rc, out, err
        self.text = out + err

    @property
    def ok(self):
        return self.rc == 0


class Runner:
    """What an experiment runs its commands through; in a dry run it only prints them."""

    def __init__(self, inputs, settings, anvil, out, python, dry):
        self.inputs, self.s, self.bin, self.out = inputs, settings, anvil, out
        self.py, self.dry = python, dry
        self.bench = "bench" if dry else str(HERE)
        self.results = {}  # label: a bench step or reference result (a dict)
        self.runs = {}  # label: the Run of every command run

    def stop(self, why):
        raise Stop(why)

    def say(self, text):
        print("\n=== " + text, flush=True)

    def run(self, label, argv, env=None, timeout=None, check=True):
        """One command; its stdout and stderr in OUT/LABEL.log. A failure stops the experiment
        unless check is False (the Run then tells the rc)."""
        argv = [str(a) for a in argv]
        shown = " ".join("%s=%s" % kv for kv in (env or {}).items()) + (" " if env else "") + shlex.join(argv)
        print("%s: %s" % (label, shown), flush=True)
        if self.dry:
            return Run()
        full_env = dict(os.environ, **{k: str(v) for k, v in (env or {}).items()})
        try:
            p = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout)
            r = Run(p.returncode, p.stdout, p.stderr)
        except subprocess.TimeoutExpired as e:
            r = Run(124, _text(e.stdout), _text(e.stderr) + "\ntimed out after %s s" % timeout)
        (self.out / (label + ".log")).write_text(r.out + r.err)
        self.runs[label] = r
        if check and not r.ok:
            raise Stop("%s failed (exit %d):\n%s" % (label, r.rc, "\n".join(r.text.splitlines()[-5:])))
        return r

    def anvil(self, label, *args, **kw):
        return self.run(label, [self.bin, *args], **kw)

    def step(self, label, *args, env=None, binary=None):
        """`anvil bench step ARGS` (of BINARY, default the driver's anvil): its JSON line (or
        {"error": why}), kept as results[label]."""
        r = self.run(label, [binary or self.bin, "bench", "step", *args], env=env, check=False)
        return self._keep(label, r)

    def reference(self, label, nproc, *args, timeout=None):
        """bench/reference_train.py on NPROC GPUs under torchrun: its JSON line, as step's."""
        r = self.run(label, [self.py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=%d" % nproc,
                             "%s/reference_train.py" % self.bench, *args], timeout=timeout, check=False)
        return self._keep(label, r)

    def python(self, label, script, *args, **kw):
        """A Python script of bench/ (or a path) with the driver's Python."""
        path = script if "/" in script else "%s/%s" % (self.bench, script)
        return self.run(label, [self.py, path, *args], **kw)

    def call(self, label, fn, *args):
        """A step done in Python (inputs written, a process killed), printed in a dry run."""
        shown = (shlex.join(map(str, a)) if isinstance(a, list) else str(a) for a in args)
        print("%s: python %s(%s)" % (label, fn.__name__, ", ".join(shown)), flush=True)
        return None if self.dry else fn(*args)

    def query(self, *args):
        """anvil's stdout for a question that runs on the CPU (anvil plan), asked in a dry run too."""
        try:
            return subprocess.run([self.bin, *map(str, args)], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise Stop("anvil %s, which chooses the runs, failed: %s" % (" ".join(map(str, args)), e))

    def _keep(self, label, r):
        if self.dry:
            self.results[label] = {"error": "dry run"}
            return {}
        j = results.step_result(r.out + "\n" + r.err, r.rc)
        self.results[label] = j
        print("  %s: %s" % (label, results.figure(j) if results.ok(j) else j.get("error")), flush=True)
        return j


def interrupted(*_):
    raise KeyboardInterrupt


def _text(b):
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def experiments():
    return sorted(p.stem for p in (HERE / "experiments").glob("*.py") if not p.stem.startswith("_"))


def load(name):
    return importlib.import_module("experiments." + name)


def headline(mod):
    return (mod.__doc__ or "").strip().splitlines()[0]


def describe(name, mod):
    lines = [(mod.__doc__ or "").strip(), ""]
    lines.append("usage: bench/run.py %s %s" % (name, " ".join(n for n, _ in mod.INPUTS)))
    for n, what in mod.INPUTS:
        lines.append("  %-16s %s" % (n, what))
    if mod.SETTINGS:
        lines.append("settings (--set NAME=VALUE): " + ", ".join("%s=%s" % kv for kv in mod.SETTINGS.items()))
    return "\n".join(lines)


def settings(mod, pairs):
    s = dict(mod.SETTINGS)
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in s:
            sys.exit("bench/run.py: %s has no setting %s (it has: %s)" % (mod.__name__.split(".")[-1], key,
                                                                          ", ".join(s) or "none"))
        s[key] = type(s[key])(value) if s[key] is not None else value
    return s


def run_one(name, args):
    mod = load(name)
    if len(args.inputs) > len(mod.INPUTS):
        sys.exit("bench/run.py: %s takes %d inputs\n%s" % (name, len(mod.INPUTS), describe(name, mod)))
    given = dict(zip([n for n, _ in mod.INPUTS], args.inputs))
    if not args.dry_run and len(given) < len(mod.INPUTS):
        sys.exit("bench/run.py: %s needs %s\n%s" % (name, " ".join(n for n, _ in mod.INPUTS), describe(name, mod)))
    inputs = {n: given.get(n, "<%s>" % n) for n, _ in mod.INPUTS}
    if args.dry_run:
        out = pathlib.Path(args.out or "OUT")
    else:
        out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="bench-%s-" % name)).resolve()
        out.mkdir(parents=True, exist_ok=True)
    anvil = args.anvil if args.dry_run else str(pathlib.Path(args.anvil).resolve())
    x = Runner(inputs, settings(mod, args.set), anvil, out, args.python, args.dry_run)
    print("# %s: %s" % (name, headline(mod)), flush=True)
    stopped = None
    try:
        mod.runs(x)
    except Stop as e:
        stopped = e
        print("\n" + str(e), flush=True)
    except KeyboardInterrupt:
        stopped = "interrupted"
    if not args.dry_run and (stopped is None or getattr(mod, "TABLE_WHEN_STOPPED", False)):
        print()
        mod.table(x)
    if not args.dry_run:
        print("\nlogs: %s" % out)
    return 1 if stopped else 0


def main():
    ap = argparse.ArgumentParser(prog="bench/run.py", description=__doc__, add_help=False,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", nargs="?", help="an experiment's name, or all (with --dry-run)")
    ap.add_argument("inputs", nargs="*", help="the experiment's inputs, in order")
    ap.add_argument("--list", action="store_true", help="list the experiments")
    ap.add_argument("--dry-run", action="store_true", help="print the command lines, run nothing")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="change a setting")
    ap.add_argument("--anvil", default="build/anvil", help="the anvil binary (default: build/anvil)")
    ap.add_argument("--out", help="folder for the logs (default: a new temporary folder)")
    ap.add_argument("--python", default="python3", help="Python for the reference and helper scripts (python3)")
    args, rest = ap.parse_known_args()
    if "-h" in rest or "--help" in rest:
        print(describe(args.experiment, load(args.experiment)) if args.experiment else ap.format_help())
        return 0
    if rest:
        ap.error("unknown arguments: " + " ".join(rest))
    if args.list or not args.experiment:
        for name in experiments():
            print("%-22s %s" % (name, headline(load(name))))
        return 0
    if args.experiment == "all":
        if not args.dry_run:
            ap.error("all runs with --dry-run only")
        failed = 0
        for name in experiments():
            failed |= run_one(name, args)
            print()
        return failed
    if args.experiment not in experiments():
        ap.error("no experiment %s (bench/run.py --list)" % args.experiment)
    signal.signal(signal.SIGTERM, interrupted)
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink SHARP multicast stays off (not on the lent machines)
    return run_one(args.experiment, args)


if __name__ == "__main__":
    sys.exit(main())
