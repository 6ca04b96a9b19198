"""Runs one of Horovod's published TensorFlow test files against tfring on N MPI ranks and summarizes it.

    python tools/horovod_suite/run.py --horovod-tests /path/to/horovod/test/parallel --np 2 \
        --file test_tensorflow.py [-k EXPR] [--legacy-keras] [--tree [DIR]] [--out DIR]

Each rank runs pytest on the file (rank_pytest.py) with a junit xml of its own; the report lists per rank
passed/failed/skipped and every failing test with a one-line reason. See README.md beside this file.
"""
import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, "shim")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--horovod-tests", required=True, help="Horovod's test/parallel directory (v0.28.1)")
    p.add_argument("--file", required=True, help="test file in that directory, e.g. test_tensorflow.py")
    p.add_argument("--np", type=int, default=2, help="number of ranks (default 2)")
    p.add_argument("-k", dest="keyword", help="pytest -k expression")
    p.add_argument("--legacy-keras", action="store_true", help="TF_USE_LEGACY_KERAS=1 (tf.keras = tf_keras)")
    p.add_argument("--tree", nargs="?", const=ROOT, default=None,
                   help="test the tfring source tree DIR (default %s; needs tfring/tensorflow/_tfring*.so built "
                        "in place) "
                        "instead of the tfring installed in the venv" % ROOT)
    p.add_argument("--venv", default=os.path.join(ROOT, ".venv"), help="venv with tensorflow, mpirun, pytest")
    p.add_argument("--out", help="results directory (default /tmp/horovod_suite/<file>-np<N>)")
    p.add_argument("--timeout", type=float, default=2400, help="seconds before the whole job is killed")
    p.add_argument("--report-only", action="store_true", help="only summarize the junit files already in --out")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return p.parse_args(argv)


def environment(args):
    env = dict(os.environ)
    path = [SHIM]
    if args.tree:
        tree = os.path.abspath(args.tree)
        if not glob.glob(os.path.join(tree, "tfring", "tensorflow", "_tfring*.so")):
            sys.exit("run.py: --tree %s has no tfring/tensorflow/_tfring*.so (build it in place first: "
                     "python setup.py build_ext --inplace)" % tree)
        path.append(tree)
    env.update(PYTHONPATH=os.pathsep.join(path), PYTHONSAFEPATH="1", PYTHONUNBUFFERED="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TF_CPP_MIN_LOG_LEVEL="2",
               OMP_NUM_THREADS="1", TFRING_STALL_SHUTDOWN_TIME_SECONDS="60")
    if args.legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def run_job(args, out):
    test_file = os.path.join(os.path.abspath(args.horovod_tests), args.file)
    if not os.path.exists(test_file):
        sys.exit("run.py: %s not found" % test_file)
    for old in glob.glob(os.path.join(out, "rank-*")):
        os.remove(old)
    py, mpirun = os.path.join(args.venv, "bin", "python"), os.path.join(args.venv, "bin", "mpirun")
    cmd = [mpirun, "-np", str(args.np), "--oversubscribe", "--bind-to", "none",
           py, os.path.join(HERE, "rank_pytest.py"), out, test_file]
    if args.keyword:
        cmd += ["-k", args.keyword]
    cmd += args.pytest_args
    print("+ " + " ".join(cmd), flush=True)
    start = time.time()
    with open(os.path.join(out, "mpirun.log"), "w") as log:
        proc = subprocess.Popen(cmd, cwd=out, env=environment(args), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            code = "timeout after %ds" % args.timeout
    print("mpirun exit: %s in %.0f s (logs: %s)" % (code, time.time() - start, out), flush=True)


def one_line(text, limit=160):
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    line = re.sub(r"^tensorflow\.python\.framework\.errors_impl\.", "", line)
    line = re.sub(r"\{\{function_node [^}]*\}\} ", "", line)
    return line if len(line) <= limit else line[:limit - 3] + "..."


def read_rank(path):
    """{test: (outcome, reason)} from one rank's rank-N.jsonl (rank_pytest.py). A test fails if any phase or
    subtest failed (each failed subtest's reason is kept, prefixed with its name, e.g. graph_mode), is skipped
    if it or every subtest that reported was skipped; one that started but never reported is 'unfinished'
    (the job timed out or the rank died in it)."""
    tests = {}
    for line in open(path):
        rec = json.loads(line)
        t = tests.setdefault(rec["test"], {"done": False, "failed": [], "skipped": [], "passed": False})
        if rec["event"] == "start":
            continue
        if rec["event"] == "teardown" or (rec["event"] == "call" and rec["subtest"] is None):
            t["done"] = True
        if rec["outcome"] == "failed":
            where = rec["subtest"] or ("" if rec["event"] == "call" else rec["event"])
            t["failed"].append((where, one_line(rec["message"])))
        elif rec["outcome"] == "passed" and rec["subtest"] is not None:
            t["passed"] = True
        elif rec["outcome"] == "skipped":
            t["done"] = t["done"] or rec["event"] == "setup"
            t["skipped"].append(one_line(rec["message"]))
    results = {}
    for name, t in tests.items():
        if t["failed"]:
            by_reason = {}
            for where, reason in t["failed"]:
                by_reason.setdefault(reason, []).append(where)
            results[name] = ("failed", "\n      ".join(
                ("%s: %s" % ("+".join(w), r)) if any(w) else r for r, w in by_reason.items()))
        elif not t["done"]:
            results[name] = ("failed", "unfinished: the job timed out or the rank died in this test")
        elif t["skipped"] and not t["passed"]:  # a test with one subtest passed and one skipped passed
            results[name] = ("skipped", t["skipped"][0])
        else:
            results[name] = ("passed", "")
    return results


def report(args, out):
    lines, ranks = [], {}
    for r in range(args.np):
        path = os.path.join(out, "rank-%d.jsonl" % r)
        try:
            ranks[r] = read_rank(path)
        except (OSError, ValueError) as e:
            log = os.path.join(out, "rank-%d.log" % r)
            tail = open(log).read().splitlines()[-5:] if os.path.exists(log) else []
            lines.append("rank %d: no junit results (%s); log tail:\n    %s" % (r, e, "\n    ".join(tail)))
    lines.append("%s at np=%d%s" % (args.file, args.np, " (TF_USE_LEGACY_KERAS=1)" if args.legacy_keras else ""))
    lines.append("%-6s %7s %7s %7s %7s" % ("rank", "passed", "failed", "skipped", "total"))
    for r, res in sorted(ranks.items()):
        counts = [sum(1 for o, _ in res.values() if o == k) for k in ("passed", "failed", "skipped")]
        lines.append("%-6d %7d %7d %7d %7d" % (r, counts[0], counts[1], counts[2], len(res)))
    failing = {}
    for r, res in sorted(ranks.items()):
        for test, (outcome, reason) in res.items():
            if outcome == "failed":
                failing.setdefault(test, []).append((r, reason))
    lines.append("failing tests (%d):" % len(failing))
    for test in sorted(failing):
        where = failing[test]
        rank_list = ",".join(str(r) for r, _ in where)
        lines.append("  %s [rank %s]\n      %s" % (test, rank_list, where[0][1]))
    text = "\n".join(lines)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 1 if failing or len(ranks) < args.np else 0


def main(argv=None):
    args = parse_args(argv)
    if not args.file.endswith(".py"):
        args.file += ".py"
    out = os.path.abspath(args.out or os.path.join("/tmp/horovod_suite", "%s-np%d" % (args.file[:-3], args.np)))
    os.makedirs(out, exist_ok=True)
    if not args.report_only:
        run_job(args, out)
    return report(args, out)


if __name__ == "__main__":
    sys.exit(main())
