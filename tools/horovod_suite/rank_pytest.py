"""One rank of a run.py job: pytest on Horovod's test file, with this rank's output in OUT/rank-N.*:

    python rank_pytest.py OUT_DIR [pytest args...]     (started by run.py under mpirun, one per rank)

rank-N.log: pytest -v output (tracebacks at the end); rank-N.xml: junit; rank-N.jsonl: one line per test
phase and per subtest (tf.test's graph_mode/eager_mode), written as it happens, so a job killed at its
timeout still says which tests ran, how they ended, and which one was running.
"""
import json
import os
import sys


def _message(report):
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[-1]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr or "")
    if "Graph execution error" in message:
        # TF puts the kernel's error after the traceback, on the line after "Node: '...'".
        lines = [ln[1:].strip() for ln in report.longreprtext.splitlines() if ln.startswith("E ")]
        for i, line in enumerate(lines[:-1]):
            if line.startswith("Node: '"):
                return "%s %s" % (message.splitlines()[0], lines[i + 1])
    return message


class StreamResults:
    """pytest plugin: appends one JSON object per test start, phase report and subtest report."""

    def __init__(self, path):
        self.out = open(path, "w", buffering=1)

    def _write(self, **record):
        self.out.write(json.dumps(record) + "\n")

    def pytest_runtest_logstart(self, nodeid, location):
        self._write(test=nodeid.split("::", 1)[-1], event="start")

    def pytest_runtest_logreport(self, report):
        if report.passed and report.when != "call":
            return
        context = getattr(report, "context", None)
        self._write(test=report.nodeid.split("::", 1)[-1], event=report.when, outcome=report.outcome,
                    subtest=getattr(context, "msg", None), message=_message(report) if not report.passed else "",
                    seconds=round(report.duration, 2))


def main():
    out_dir, args = sys.argv[1], sys.argv[2:]
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))
    log = open(os.path.join(out_dir, "rank-%s.log" % rank), "w", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import pytest
    code = pytest.main(["-v", "--color=no", "-p", "no:cacheprovider", "-rfE",
                        # a test stuck for 10 min dumps every thread's Python stack into the log
                        "-o", "faulthandler_timeout=600",
                        "--junitxml", os.path.join(out_dir, "rank-%s.xml" % rank)] + args,
                       plugins=[StreamResults(os.path.join(out_dir, "rank-%s.jsonl" % rank))])
    sys.stdout.flush()
    sys.stderr.flush()
    # 1 = some tests failed (expected here: the job goes on to the report); anything else is a harness problem.
    sys.exit(0 if code in (0, 1) else int(code))


if __name__ == "__main__":
    main()
