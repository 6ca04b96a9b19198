"""tfring.runner.run(fn, ...): run a Python function on np ranks through the launcher, like horovod.run;
returns each rank's return value in rank order."""
import os
import pickle
import shutil
import sys
import tempfile

from tfring.runner.flags import build_parser
from tfring.runner.launch import build_command, run_command


def _dumps(obj):
    try:
        import cloudpickle  # lambdas and closures, when available
        return cloudpickle.dumps(obj)
    except ImportError:
        return pickle.dumps(obj)


def run(fn, args=(), kwargs=None, np=2, hosts=None, env=None, verbose=False, mpi_args=""):
    """Runs fn(*args, **kwargs) on np ranks; returns [result of rank 0, result of rank 1, ...].
    A rank that raises makes run() raise RuntimeError with that rank's traceback."""
    workdir = tempfile.mkdtemp(prefix="tfring-run-")
    try:
        with open(os.path.join(workdir, "task.pkl"), "wb") as f:
            f.write(_dumps((fn, tuple(args), dict(kwargs or {}))))
        # Run task.py by path, not with -m: -m would put the caller's cwd first on sys.path, where a source
        # checkout's tfring/ (without its compiled library) could shadow the installed package.
        task = os.path.join(os.path.dirname(os.path.abspath(__file__)), "task.py")
        argv = ["-np", str(np)] + (["-H", hosts] if hosts else []) + ["--mpi-args", mpi_args, "--",
                                                                    sys.executable, task, workdir]
        parsed = build_parser().parse_args(argv)
        parsed.command = parsed.command[1:] if parsed.command[:1] == ["--"] else parsed.command
        old_env = dict(os.environ)
        os.environ.update(env or {})
        try:
            cmd = build_command(parsed)
            rc = run_command(cmd, None, stdout=sys.stdout if verbose else open(os.devnull, "w"))
        finally:
            os.environ.clear()
            os.environ.update(old_env)
        results = []
        for rank in range(np):
            path = os.path.join(workdir, "rank.%d.pkl" % rank)
            if not os.path.exists(path):
                raise RuntimeError("tfring.runner.run: rank %d returned no result (launcher exit code %d)" % (rank, rc))
            with open(path, "rb") as f:
                ok, value = pickle.load(f)
            if not ok:
                raise RuntimeError("tfring.runner.run: rank %d raised:\n%s" % (rank, value))
            results.append(value)
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
