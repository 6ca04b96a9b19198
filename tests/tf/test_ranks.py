"""Real ranks: every tests/parallel/ranks_*.py file runs under mpirun at np=2 and np=3 (process-set files at np=2
and np=4, so sets of two ranks exist); each rank checks its own values, so a wrong value on any rank fails the
job."""
import glob
import importlib.util
import os

import pytest

from conftest import HERE, run_rank_pytest

FILES = sorted(os.path.relpath(p, os.path.dirname(HERE)) for p in glob.glob(os.path.join(HERE, "parallel/ranks_*.py")))
# These only call rank_helpers.init() and change no setting, so one pytest process per np runs them in turn: each
# separate launch costs ~8 s of TensorFlow import. A failure still names its file in the ranks' output.
SHARED = ["tests/parallel/ranks_%s.py" % n for n in (
    "collectives", "adasum", "broadcast_helpers", "gradients_helpers", "partial", "sync_bn", "keras",
    "promises_values", "errors")]
GROUPS = [("shared", [f for f in SHARED if f in FILES])] + [(f, [f]) for f in FILES if f not in SHARED]
CASES = [(name, files, n) for name, files in GROUPS for n in ((2, 4) if "process_sets" in name else (2, 3))]


@pytest.mark.parametrize("name,files,np_", CASES, ids=["%s-np%d" % (c[0], c[2]) for c in CASES])
def test_ranks(name, files, np_):
    if "tf_keras" in name and importlib.util.find_spec("tf_keras") is None:
        # tf_keras depends on the full `tensorflow` wheel, which pip would install over tensorflow-cpu.
        pytest.skip("tf_keras is not installed: pip install --no-deps 'tf_keras~=2.21.0' (README)")
    proc = run_rank_pytest(np_, files, timeout=900 if len(files) > 1 else 600)
    # Every rank must have run and passed tests (guards against a file that collects nothing).
    assert proc.stdout.count(" passed") >= np_, proc.stdout[-5000:]
