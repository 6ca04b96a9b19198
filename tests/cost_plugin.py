"""What each test costs, and the fast tier's rule.

At the end of every run: tests, launches, wall seconds and CPU seconds (this process plus every child it waited for:
ranks, engines, compilers) per test directory and for the costliest files; a file whose CPU is far below its wall time
is mostly waiting (deadlines, sleeps, polling), one whose CPU is twice its wall time keeps both cores busy (README
"Testing"; the JSON goes to $TFRING_TEST_COST_JSON when set). A launch is a process the pytest process starts
that runs ranks, an engine or a compiler: mpirun/prterun, tfringrun (`-m tfring.runner`) given a size or hosts,
Spark's JVM, Ray's processes, g++/nvcc/bazel (not asked only for --version or --help). It counts when it
starts; its wall time runs from the start to the first wait() that sees it ended.

The rule: a test that launches is marked `slow` (left out of the fast tier); an unmarked one fails in teardown."""
import collections
import json
import os
import resource
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
_tests = collections.defaultdict(lambda: [0, 0.0, 0.0])  # test file -> [tests, seconds, CPU seconds]


def _cpu():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


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


def _controller(config):
    """The pytest-xdist controller: its workers run the tests and send their accounts when they end."""
    return not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    _current["controller"] = bool(_controller(config))


def pytest_runtest_logstart(nodeid, location):
    _current["test"] = nodeid
    _current["cpu"] = _cpu()


def pytest_runtest_logfinish(nodeid, location):
    if not _current["controller"]:
        _tests[nodeid.split("::")[0]][2] += _cpu() - _current.pop("cpu")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    if _launches.get(item.nodeid) and item.get_closest_marker("slow") is None:
        pytest.fail("%s launched ranks, an engine or a compiler (%d launches) but is not marked slow: mark it "
                    "(pytest.mark.slow) or test the behaviour in-process (README \"Testing\")"
                    % (item.nodeid, len(_launches[item.nodeid])), pytrace=False)


def pytest_runtest_logreport(report):
    if _current["controller"]:
        return  # counted by the worker that ran it
    entry = _tests[report.nodeid.split("::")[0]]
    entry[1] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        entry[0] += 1


def _launch_seconds():
    """test file -> [seconds, ...] (0 for a launch never waited for)"""
    launches = collections.defaultdict(list)
    for test, costs in _launches.items():
        launches[test.split("::")[0]] += [c[1] if len(c) > 1 else 0.0 for c in costs]
    return launches


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its account goes to the controller
        session.config.workeroutput["tfring_cost"] = json.dumps([_tests, _launch_seconds()])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    tests, launches = json.loads(getattr(node, "workeroutput", {}).get("tfring_cost", "[{}, {}]"))
    for path, values in tests.items():
        _tests[path] = [a + b for a, b in zip(_tests[path], values)]
    for path, seconds in launches.items():
        _merged_launches[path] += seconds


_merged_launches = collections.defaultdict(list)  # test file -> launch seconds sent by xdist workers


def _rows(key):
    launches = _launch_seconds()
    for path, seconds in _merged_launches.items():
        launches[path] += seconds
    rows = collections.defaultdict(lambda: [0, 0, 0.0, 0.0])
    for path, (count, seconds, cpu) in _tests.items():
        row = rows[key(path)]
        row[0] += count
        row[1] += len(launches[path])
        row[2] += seconds
        row[3] += cpu
    return sorted(rows.items(), key=lambda kv: -kv[1][2]), launches


def pytest_terminal_summary(terminalreporter):
    if not _tests:
        return
    write = terminalreporter.write_line
    write("")
    write("cost per test directory (tests, launches, wall seconds, CPU seconds):")
    for name, (count, n, seconds, cpu) in _rows(lambda p: os.path.dirname(p) or ".")[0]:
        write("  %-22s %4d tests %4d launches %7.0f s %7.0f CPU-s" % (name, count, n, seconds, cpu))
    write("costliest test files:")
    rows, launches = _rows(lambda p: p)
    for name, (count, n, seconds, cpu) in rows[:20]:
        write("  %-52s %3d tests %3d launches %6.0f s %6.0f CPU-s" % (name, count, n, seconds, cpu))
    out = os.environ.get("TFRING_TEST_COST_JSON")
    if out:
        with open(out, "w") as f:
            json.dump({p: {"tests": c, "seconds": round(s, 1), "cpu_seconds": round(u, 1),
                           "launches": [round(x, 1) for x in launches[p]]}
                       for p, (c, s, u) in _tests.items()}, f, indent=1, sort_keys=True)
