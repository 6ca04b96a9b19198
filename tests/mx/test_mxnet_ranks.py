"""tfring.mxnet on real ranks: the rank-side files in tests/mx run under mpirun at np=2 and np=3, all in one
pytest process per np; every rank checks its own values. The errors file goes last: it ends with a shutdown and a
fresh init. mxnet 1.9.1 needs numpy < 1.24, which TensorFlow 2.21 cannot share: these tests run in a separate
environment with mxnet (see README), and skip elsewhere."""
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env, run_rank_pytest

pytestmark = pytest.mark.slow  # real ranks under mpirun

pytest.importorskip("mxnet", reason="mxnet is not installed: tfring.mxnet is not built or tested")

FILES = ["tests/mx/ranks_mxnet_collectives.py", "tests/mx/ranks_mxnet_training.py",
         "tests/mx/ranks_mxnet_errors.py"]


@pytest.mark.parametrize("np_", [2, 3])
def test_mxnet_ranks(np_):
    proc = run_rank_pytest(np_, FILES, timeout=900, extra_env={"TFRING_DYNAMIC_PROCESS_SETS": "1"})
    # Every rank must have run and passed tests (guards against files that collect nothing).
    assert proc.stdout.count(" passed") >= np_, proc.stdout[-5000:]


def test_mxnet_gluon_digits_reaches_95_percent_at_np2():
    # The README's MXNet example through the launcher, as a user runs it.
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2", "python", "examples/mxnet_gluon_digits.py", "--epochs",
           "15", "--target-accuracy", "0.95"]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout
