#!/usr/bin/env python3
"""Where a command's CPU goes, every process included: samples all processes (psutil) while the command runs and
prints the CPU seconds they used meanwhile by kind of process (rank pytest, Spark JVM, slot rank, ...) and by the test
that started them (PYTEST_CURRENT_TEST in their environment). The tests' own rusage (tests/cost_plugin.py) misses what
Spark's JVM, Ray's daemons and killed ranks use (~20 % of the suite here); the machine's total busy CPU hides who.

    python tools/suite_cpu.py [--every 1] [--top 30] -- pytest -q -n 3 tests

A process living less than one sampling interval is missed or undercounted (imports alone take longer)."""
import argparse
import collections
import subprocess
import sys
import time

import psutil

KINDS = (  # (substring of the command line, kind), first match wins
    ("org.apache.spark", "Spark JVM"), ("pyspark.daemon", "pyspark worker"), ("slots/rank.py", "slot rank (Spark/Ray)"),
    ("raylet", "Ray daemons"), ("gcs_server", "Ray daemons"), ("ray/_private", "Ray daemons"),
    ("ray/autoscaler", "Ray daemons"), ("default_worker.py", "Ray workers"), ("ray::", "Ray workers"),
    ("prterun", "mpirun/prted"), ("prted", "mpirun/prted"), ("tfring.runner", "tfringrun driver"),
    ("execnet", "pytest-xdist worker"), ("-u -c", "pytest-xdist worker"),
    ("--junitxml=", "rank pytest (shared launch)"),
    ("pytest", "pytest"), ("examples/", "example"), ("g++", "compiler"), ("cc1plus", "compiler"), ("nvcc", "compiler"),
)


def kind(cmdline):
    line = " ".join(cmdline)
    for needle, name in KINDS:
        if needle in line:
            return name
    return "python: %s" % " ".join(cmdline[1:2])[-40:] if "python" in line else "other: %s" % (cmdline[:1] or ["?"])[0]


class Sampler:
    def __init__(self):
        # (pid, create_time) -> [CPU seconds at the first sight (0 for a process started since t0), now, kind, test]
        self.seen = {}
        self.t0 = time.time()

    def sample(self):
        for p in psutil.process_iter(["pid", "create_time", "cpu_times"]):
            times = p.info["cpu_times"]
            if times is None:
                continue
            key, cpu = (p.info["pid"], p.info["create_time"]), times.user + times.system
            if key in self.seen:
                self.seen[key][1] = cpu
                continue
            try:
                what = kind(p.cmdline()), p.environ().get("PYTEST_CURRENT_TEST", "").split("::")[0]
            except (psutil.Error, OSError):
                what = "?", ""
            self.seen[key] = [cpu if p.info["create_time"] < self.t0 else 0.0, cpu] + list(what)

    def table(self, column):
        out = collections.defaultdict(lambda: [0, 0.0])
        for first, cpu, kind_, test in self.seen.values():
            if cpu > first:
                row = out[(kind_, test or "(none)")[column]]
                row[0] += 1
                row[1] += cpu - first
        return sorted(out.items(), key=lambda kv: -kv[1][1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--top", type=int, default=30, help="rows per table")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command after --")
    sampler = Sampler()
    sampler.sample()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        time.sleep(args.every)
        sampler.sample()
    sampler.sample()
    wall = time.time() - sampler.t0
    total = sum(cpu for _, (_, cpu) in sampler.table(0))
    print("\n%.0f CPU-s in %.0f s (%.2f cores busy) by processes started or running meanwhile" % (total, wall,
                                                                                                 total / wall))
    for column, title in ((0, "kind of process"), (1, "test file (PYTEST_CURRENT_TEST)")):
        print("%-62s %9s %8s" % (title, "processes", "CPU-s"))
        for name, (n, cpu) in sampler.table(column)[:args.top]:
            print("%-62s %9d %8.1f" % (name[-62:], n, cpu))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
