"""What the benchmarked programs print, read in one place.

`anvil bench step` prints progress on stderr and one JSON object as its last stdout line;
bench/reference_train.py prints its result the same way, with the same key names for the
figures the two share (tokens_per_s, peak_allocated_gib, seq_len, mode). `anvil train` writes
a metrics file (JSON lines: a header, then one line a logged step) and ends its log with a
"done:" line. Every experiment reads them through this module.
"""
import json
import re


def last_json(text):
    """The last line of TEXT that is a JSON object, as a dict; None when there is none."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def step_result(text, rc=0):
    """One run's result: its JSON line, or {"error": why} when it printed none."""
    j = last_json(text)
    if j is not None and "tokens_per_s" in j:
        return j
    if re.search(r"OutOfMemoryError|CUDA out of memory|out of memory", text):
        return {"error": "out of memory"}
    if rc == 124:
        return {"error": "timed out"}
    return {"error": "exit %d: %s" % (rc, " ".join(text[-300:].split()))}


def ok(j):
    return bool(j) and "tokens_per_s" in j


def figure(j):
    """'31,304 @ 24.0 GiB': tokens/s at peak allocated memory, or the error."""
    if not ok(j):
        return (j or {}).get("error", "not run")[:60]
    return "%s @ %.1f GiB" % (format(round(j["tokens_per_s"]), ","), j["peak_allocated_gib"])


def setting(j):
    """A bench step run's setting in a few words: 'ddp b4 x2 selective, bf16 grads'."""
    if not ok(j):
        return ""
    accum = j.get("grad_accum", 1)
    s = "%s b%d%s %s" % (j["mode"], j["micro_batch"], " x%d" % accum if accum > 1 else "", j["recompute"])
    s += ", bf16 grads" if j.get("grad_dtype") == "bf16" else ""
    return s + ("" if j.get("overlap_optimizer", True) else " no-overlap")


def plan_error(j):
    """The plan beside the measured peak: '24.10 (+0.4%)', flagged past 3%."""
    if not ok(j):
        return ""
    err = (j["planned_gib"] - j["peak_allocated_gib"]) / j["peak_allocated_gib"]
    return "%.2f (%+.1f%%)%s" % (j["planned_gib"], 100 * err, "" if abs(err) <= 0.03 else " OVER 3%")


def ratio(a, b):
    return "%.2fx" % (a["tokens_per_s"] / b["tokens_per_s"]) if ok(a) and ok(b) else "-"


def metrics(path):
    """A train metrics file's step lines, {step: line}; {} when the file is missing."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except OSError:
        return {}
    return {r["step"]: r for r in rows if "step" in r and "loss" in r}


def losses(path):
    """A train metrics file's losses in step order."""
    m = metrics(path)
    return [m[s]["loss"] for s in sorted(m)]


def done_line(log):
    """The 'done: ...' line of a train log, or ''."""
    m = re.search(r"^.*done:.*$", log, re.M)
    return m.group(0).strip() if m else ""


def train_tokens_per_s(log):
    """The tokens/s of a train log's 'done:' line."""
    m = re.search(r"done: \d+ steps, ([\d,]+) tokens/s", log)
    return float(m.group(1).replace(",", "")) if m else None


def curve_difference(curve, ref):
    """Relative difference of a loss curve from a reference: (largest, its step from 1, mean)."""
    n = min(len(curve), len(ref))
    rel = [abs(x - y) / abs(y) for x, y in zip(curve[:n], ref[:n])]
    k = max(range(n), key=lambda i: rel[i])
    return rel[k], k + 1, sum(rel) / n


def abs_difference(curve, ref):
    """Absolute difference of a loss curve from another: (largest, its step from 1, mean)."""
    n = min(len(curve), len(ref))
    d = [abs(x - y) for x, y in zip(curve[:n], ref[:n])]
    k = max(range(n), key=lambda i: d[i])
    return d[k], k + 1, sum(d) / n


def reference_losses(path):
    """The per-step losses bench/reference_train.py --losses wrote; [] when it wrote none."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []
