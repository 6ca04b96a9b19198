#!/usr/bin/env python3
"""The suite's cost from the JSON that tests/cost_plugin.py writes (`TFRING_TEST_COST_JSON=FILE pytest -q tests`):
per test directory (tests, launches, seconds) and, per test file, each launch's wall time. Given two files
(before, after), the directory table gets both and the difference.

    python tools/test_cost.py AFTER.json [--before BEFORE.json] [--files N]"""
import argparse
import collections
import json
import os


def by_directory(cost):
    rows = collections.defaultdict(lambda: [0, 0, 0.0])
    for path, entry in cost.items():
        row = rows[os.path.dirname(path) or "."]
        row[0] += entry["tests"]
        row[1] += len(entry["launches"])
        row[2] += entry["seconds"]
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("after")
    p.add_argument("--before")
    p.add_argument("--files", type=int, default=25, help="how many of the costliest files to list")
    args = p.parse_args()
    with open(args.after) as f:
        after = json.load(f)
    before = {}
    if args.before:
        with open(args.before) as f:
            before = json.load(f)
    new, old = by_directory(after), by_directory(before)
    print("| directory | tests | launches | seconds |" + (" before: tests | launches | seconds |" if before else ""))
    print("| --- | ---: | ---: | ---: |" + (" ---: | ---: | ---: |" if before else ""))
    for name in sorted(set(new) | set(old), key=lambda d: -max(new[d][2], old[d][2])):
        cells = "| %s | %d | %d | %.0f |" % ((name,) + tuple(new[name]))
        print(cells + (" %d | %d | %.0f |" % tuple(old[name]) if before else ""))
    total = [sum(r[i] for r in new.values()) for i in range(3)]
    print("| total | %d | %d | %.0f |" % tuple(total) + (" %d | %d | %.0f |" % tuple(
        sum(r[i] for r in old.values()) for i in range(3)) if before else ""))
    print("\ncostliest files (seconds: each launch's wall time):")
    for path, entry in sorted(after.items(), key=lambda kv: -kv[1]["seconds"])[:args.files]:
        launches = ", ".join("%.0f" % s for s in entry["launches"])
        print("  %-55s %3d tests %6.0f s  [%s]" % (path, entry["tests"], entry["seconds"], launches))


if __name__ == "__main__":
    main()
