"""Real ranks: every tests/parallel/ranks_*.py file runs under mpirun at np=2 and np=3 (process-set files at np=2
and np=4, so sets of two ranks exist); each rank checks its own values, so a wrong value on any rank fails the
job."""
import glob
import importlib.util
import os

import pytest

from conftest import HERE, run_rank_pytest

FILES = sorted(os.path.relpath(p, os.path.dirname(HERE)) for p in glob.glob(os.path.join(HERE, "parallel/ranks_*.py")))


CASES = [(f, n) for f in FILES for n in ((2, 4) if "process_sets" in f else (2, 3))]


@pytest.mark.parametrize("test_file,np_", CASES)
def test_ranks(test_file, np_):
    if "tf_keras" in test_file and importlib.util.find_spec("tf_keras") is None:
        # tf_keras depends on the full `tensorflow` wheel, which pip would install over tensorflow-cpu.
        pytest.skip("tf_keras is not installed: pip install --no-deps 'tf_keras~=2.21.0' (README)")
    proc = run_rank_pytest(np_, test_file)
    # Every rank must have run and passed tests (guards against a file that collects nothing).
    assert proc.stdout.count(" passed") >= np_, proc.stdout[-5000:]
