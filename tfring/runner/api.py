"""tfring.runner.run(fn, ...): run a Python function on np ranks through the launcher, like horovod.run;
returns each rank's return value in rank order."""
import os
import pickle
import shutil
import sys
import tempfile

import cloudpickle

from tfring.runner.flags import UsageError
from tfring.runner.launch import parse
from tfring.runner.mpirun import plan
from tfring.runner.supervise import run_command


def _dumps(obj):
    # cloudpickle (a dependency): lambdas, closures and functions defined in __main__ travel by value.
    return cloudpickle.dumps(obj)


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
        environ = dict(os.environ)
        environ.update(env or {})
        try:
            parsed = parse(argv)
            cmd, run_env = plan(parsed, environ)
        except UsageError as e:
            raise ValueError("tfring.runner.run: %s" % e) from None
        rc = run_command(cmd, None, stdout=sys.stdout if verbose else open(os.devnull, "w"), env=run_env,
                         start_timeout=parsed.start_deadline, num_ranks=parsed.num_ranks)
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
