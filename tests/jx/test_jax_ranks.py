"""tfring.jax on real ranks: the rank-side files in tests/jx (at np=2 and np=3) and the Keras 3 ones on the jax
backend (conftest.KERAS3_FILES, at np=3) run under mpirun (process sets: a set of two ranks at np=3), all in one
pytest process per np; every rank checks its own values. (Not tests/jax/: that directory would be importable as a
namespace package `jax` where jax is not installed.)"""
import pytest

from conftest import keras3_env, keras3_files, run_rank_pytest

pytestmark = pytest.mark.slow  # real ranks under mpirun

pytest.importorskip("jax", reason="jax is not installed: tfring.jax is not built or tested")
pytest.importorskip("optax", reason="optax is not installed (the jax extra)")

def files(np_):
    names = ("collectives", "training", "powersgd", "sharded", "monitor")
    return ["tests/jx/ranks_jax_%s.py" % name for name in names] + \
        keras3_files(np_) + ["tests/jx/ranks_jax_%s.py" % name for name in ("errors", "stall")]


@pytest.mark.parametrize("np_", [2, 3])
def test_jax_ranks(np_):
    run_rank_pytest(np_, files(np_), timeout=900, extra_env=keras3_env("jax"))


def test_jax_digits_example_reaches_95_percent_at_np2():
    # The README's JAX example through the launcher, as a user runs it.
    import subprocess
    import sys

    from conftest import ROOT, rank_env
    cmd = [sys.executable, "-m", "tfring.runner", "-np", "2", sys.executable, "examples/jax_digits.py",
           "--target-accuracy", "0.95"]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "[0]<stdout>:epoch 15: validation accuracy" in proc.stdout
