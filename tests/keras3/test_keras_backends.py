"""tfring.keras on every Keras backend. Its rank-side files (tests/keras3/ranks_*.py, conftest.KERAS3_FILES) run in
each binding's own launches with KERAS_BACKEND=tensorflow (tests/tf/test_ranks.py, at np=2), jax and torch
(tests/jx/test_jax_ranks.py, tests/pt/test_torch_ranks.py, at np=3): one pytest process per rank, every rank
checks its own values. Here: the README's main job on the jax and torch backends. (Not tests/keras/: that directory
could be imported as a namespace package `keras`.)"""
import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env

pytestmark = pytest.mark.slow  # real ranks under mpirun

BACKENDS = {"jax": "optax", "torch": "torch"}  # backend -> what its binding needs besides itself


def _need(backend):
    if importlib.util.find_spec(BACKENDS[backend]) is None or importlib.util.find_spec(backend) is None:
        pytest.skip("the %s backend's packages are not installed" % backend)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_readme_keras_example_on_backend_at_np2(backend):
    # The README's main job, unchanged, on the other backends (TensorFlow's: tests/test_examples.py).
    _need(backend)
    env = dict(rank_env(), KERAS_BACKEND=backend)
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2", sys.executable, "examples/keras_digits.py", "--epochs",
           "12", "--target-accuracy", "0.95"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:validation accuracy" in proc.stdout
