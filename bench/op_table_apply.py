#!/usr/bin/env python3
"""The op-cost table of a `bench/run.py op_table --out OUT` call made the built-in one, and its rows.

    bench/op_table_apply.py OUT [--anvil build/anvil] [--no-copy]

Writes OUT/h200_op_costs.json (the call's fitted table) to src/plan/h200_op_costs.json, the
table the binary embeds at its next build (--no-copy: leaves it), then prints each row of the
call (OUT/rowN.log): its measured tokens/s, the step model's prediction made on the device
(the call's binary, the fitted table) and the one this build makes with the same table
(`anvil plan` with the row's flags, --gpu H200 --op-table TABLE --json), and the error of
each. Exits 1 when a row is missing or predicted more than 10% off.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True
import results as R  # noqa: E402
from experiments import op_table  # noqa: E402

BAR = 0.10  # the bar on every row


def local_prediction(anvil, flags, table, mode):
    """Tokens/s the local build's step model predicts for the row (`anvil plan`), or None."""
    r = subprocess.run([anvil, "plan", *flags, "--gpu", "H200", "--op-table", table, "--json"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        print("  anvil plan %s: exit %d: %s" % (" ".join(flags), r.returncode, r.stdout[-300:] + r.stderr[-300:]))
        return None
    p = json.loads(r.stdout)["predicted"]
    return p[mode]["tokens_per_s"] if p and mode in p else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the op_table call's output folder (bench/run.py op_table --out OUT)")
    ap.add_argument("--anvil", default="build/anvil", help="the local build's anvil (default: build/anvil)")
    ap.add_argument("--no-copy", action="store_true", help="leave src/plan/h200_op_costs.json as it is")
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    table = out / "h200_op_costs.json"
    if not table.exists():
        sys.exit("bench/op_table_apply.py: %s: no fitted table (did the fits run?)" % table)
    fitted = json.loads(table.read_text())
    if not a.no_copy:
        dest = HERE.parent / "src" / "plan" / "h200_op_costs.json"
        dest.write_text(json.dumps(fitted, indent=1, sort_keys=True) + "\n")
        print("wrote %s (%d rates, %d measured)" % (dest, len(fitted["ops"]),
                                                    sum(1 for o in fitted["ops"] if o.get("measured"))))
    print("| setting (one H200) | measured | predicted (device) | error | predicted (this build) | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    bad = 0
    for i, (label, flags, _) in enumerate(op_table.ROWS):
        log = out / ("row%d.log" % i)
        j = R.step_result(log.read_text()) if log.exists() else {"error": "not run"}
        if not R.ok(j):
            print("| %s | %s | | | | |" % (label, j.get("error")))
            bad += 1
            continue
        m = j["tokens_per_s"]
        dev = (j.get("predicted") or {}).get("tokens_per_s")
        loc = local_prediction(a.anvil, flags, str(table), j["mode"])
        cells = []
        for p in (dev, loc):
            cells += ["%s" % format(round(p), ",") if p else "-", "%+.1f%%" % (100 * (p / m - 1)) if p else "-"]
            bad += not p or abs(p / m - 1) > BAR
        print("| %s | %s | %s |" % (label, format(round(m), ","), " | ".join(cells)))
    print("\nevery row within %d%%: %s" % (100 * BAR, "yes" if bad == 0 else "no (%d cells)" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
