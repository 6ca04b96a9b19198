"""What each test costs, and the fast tier's rule.

At the end of every run: tests, launches and seconds per test directory and for the costliest files (README
"Testing"; the JSON goes to $TFRING_TEST_COST_JSON when set). A launch is a process the pytest process starts
that runs ranks, an engine or a compiler: mpirun/prterun, tfringrun (`-m tfring.runner`) given a size or hosts,
Spark's JVM, Ray's processes, g++/nvcc/bazel (not asked only for --version or --help). It counts when it
starts; its wall time runs from the start to the first wait() that sees it ended.

The rule: a test that launches is marked `slow` (left out of the fast tier); an unmarked one fails in teardown."""
import collections
import json
import os
import shlex
import subprocess
import time

import pytest

LAUNCHERS = {"mpirun", "prterun", "spark-submit", "gcs_server", "raylet", "g++", "gcc", "c++", "nvcc", "bazel"}
# tfringrun starts ranks when given a size or hosts (not for --help, --version or --check-build)
TFRINGRUN, JOB_FLAGS = {"tfringrun", "tfring.runner"}, {"-np", "--num-proc", "-H", "--hosts", "-hostfile",
                                                         "--hostfile", "--host-discovery-script"}
_real_init, _real_wait = subprocess.Popen.__init__, subprocess.Popen.wait
_current = {"test": None}
_launches = collections.defaultdict(list)  # test id -> [[start, seconds once ended], ...]
_tests = collections.defaultdict(lambda: [0, 0.0])  # test file -> [tests, seconds]


def is_launch(args):
    words = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
    names = {os.path.basename(w) for w in words}  # anywhere: `hosts.py exec h1 python -m tfring.runner ...` too
    if {"--version", "-V", "--help"} & names:  # asks a tool about itself
        return False
    return bool(names & LAUNCHERS or names & TFRINGRUN and JOB_FLAGS & names)


def _init(self, args, *a, **kw):
    _real_init(self, args, *a, **kw)
    if _current["test"] and is_launch(args):
        # counted at once (an engine's JVM may never be waited for); its seconds once a wait() sees it end
        self._tfring_cost = [time.monotonic()]
        _launches[_current["test"]].append(self._tfring_cost)


def _wait(self, *a, **kw):
    code = _real_wait(self, *a, **kw)
    cost = self.__dict__.pop("_tfring_cost", None)
    if cost is not None:
        cost.append(time.monotonic() - cost[0])
    return code


subprocess.Popen.__init__, subprocess.Popen.wait = _init, _wait


def pytest_runtest_logstart(nodeid, location):
    _current["test"] = nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _launches.get(item.nodeid) and item.get_closest_marker("slow") is None:
        pytest.fail("%s launched ranks, an engine or a compiler (%d launches) but is not marked slow: mark it "
                    "(pytest.mark.slow) or test the behaviour in-process (README \"Testing\")"
                    % (item.nodeid, len(_launches[item.nodeid])), pytrace=False)


def pytest_runtest_logreport(report):
    entry = _tests[report.nodeid.split("::")[0]]
    entry[1] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        entry[0] += 1


def _rows(key):
    launches = collections.defaultdict(list)  # test file -> [seconds, ...] (0 for a launch never waited for)
    for test, costs in _launches.items():
        launches[test.split("::")[0]] += [c[1] if len(c) > 1 else 0.0 for c in costs]
    rows = collections.defaultdict(lambda: [0, 0, 0.0])
    for path, (count, seconds) in _tests.items():
        row = rows[key(path)]
        row[0] += count
        row[1] += len(launches[path])
        row[2] += seconds
    return sorted(rows.items(), key=lambda kv: -kv[1][2]), launches


def pytest_terminal_summary(terminalreporter):
    if not _tests:
        return
    write = terminalreporter.write_line
    write("")
    write("cost per test directory (tests, launches, seconds):")
    for name, (count, n, seconds) in _rows(lambda p: os.path.dirname(p) or ".")[0]:
        write("  %-22s %4d tests %4d launches %7.0f s" % (name, count, n, seconds))
    write("costliest test files:")
    rows, launches = _rows(lambda p: p)
    for name, (count, n, seconds) in rows[:20]:
        write("  %-52s %3d tests %3d launches %6.0f s" % (name, count, n, seconds))
    out = os.environ.get("TFRING_TEST_COST_JSON")
    if out:
        with open(out, "w") as f:
            json.dump({p: {"tests": c, "seconds": round(s, 1), "launches": [round(x, 1) for x in launches[p]]}
                       for p, (c, s) in _tests.items()}, f, indent=1, sort_keys=True)
