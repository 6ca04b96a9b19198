"""tfring.keras on every Keras backend: the rank-side files in tests/keras3 run under mpirun with
KERAS_BACKEND=tensorflow, jax and torch, at np=2 and np=3 (one pytest process per rank per launch); every rank
checks its own values. (Not tests/keras/: that directory could be imported as a namespace package `keras`.)"""
import importlib.util
import subprocess
import sys

import pytest

from conftest import ROOT, rank_env, run_rank_pytest

pytestmark = pytest.mark.slow  # real ranks under mpirun

FILES = ["tests/keras3/ranks_keras.py", "tests/keras3/ranks_keras_more.py"]
BACKENDS = {"tensorflow": "tensorflow", "jax": "optax", "torch": "torch"}  # backend -> what its binding needs


def _need(backend):
    if importlib.util.find_spec(BACKENDS[backend]) is None or importlib.util.find_spec(backend) is None:
        pytest.skip("the %s backend's packages are not installed" % backend)


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_keras_recipe_on_every_backend(backend, np_):
    _need(backend)
    run_rank_pytest(np_, FILES, timeout=900, extra_env={"KERAS_BACKEND": backend, "TF_USE_LEGACY_KERAS": "0",
                                                        "TFRING_DYNAMIC_PROCESS_SETS": "1"})


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
