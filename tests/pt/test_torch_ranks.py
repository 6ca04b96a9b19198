"""tfring.torch on real ranks: the rank-side files in tests/pt (at np=2 and np=3) and the Keras 3 ones on the torch
backend (conftest.KERAS3_FILES, at np=3) run under mpirun, all in one pytest process per np (each launch costs
seconds); every rank checks its own values. The errors file goes last: it ends with a shutdown and a fresh
init. (Not tests/torch/: with tests/ on sys.path, that directory would be
importable as a namespace package `torch` where torch is not installed, and importorskip would not skip.)"""
import pytest

from conftest import keras3_env, keras3_files, run_rank_pytest

pytestmark = pytest.mark.slow  # real ranks under mpirun

pytest.importorskip("torch", reason="torch is not installed: tfring.torch is not built or tested")

def files(np_):
    return ["tests/pt/ranks_torch_%s.py" % name for name in (
        "collectives", "output_memory", "autograd", "process_sets", "optimizer", "sharded", "powersgd", "functions",
        "sync_bn", "monitor")] + keras3_files(np_) + ["tests/pt/ranks_torch_errors.py"]


@pytest.mark.parametrize("np_", [2, 3])
def test_torch_ranks(np_):
    run_rank_pytest(np_, files(np_), timeout=900, extra_env=keras3_env("torch"))
