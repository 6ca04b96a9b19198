"""Real ranks: every tests/tf/ranks_*.py file runs under mpirun; each rank checks its own values, so a wrong value on
any rank fails the job.

The files of a group share one launch per process count: one pytest process per rank runs them in turn (each
launch pays TensorFlow's import on every rank, 15-24 s on a 2-core machine). A file that needs settings or process
sets of its own, or starts tfring itself, restarts the runtime around its tests (rank_helpers.restarted, from a
module-scoped fixture); nothing may change a setting or call init() with arguments at import, since every file of
a launch is imported before any test runs. A failure still names its file in the ranks' output (pytest's failure
header and summary line).

Groups:
- main: every file but the tf_keras ones at np=3 (averages at an odd size, uneven shards, process sets {0, 2}/{1}
  and {0, 1}/{2}); at np=2 the files where two ranks take other code paths (the Average folded into the reduction,
  power-of-two algorithms, two-rank rings and splits) or that check a two-rank case, and the Keras 3 rank files
  (conftest.KERAS3_FILES) on the tensorflow backend: they run at np=3 on jax and torch (tests/jx, tests/pt), so
  each Keras test runs at both sizes, and TensorFlow's Keras step, the costliest of the three, at the cheaper one.
  The files in NP3_ONLY check behaviour that does not depend on the world size (knobs, deadlines, fallbacks,
  grouping, name scopes); they run once, at np=3, to keep the suite in its budget. Dynamic process sets are
  allowed, as in every binding's launch (ranks_process_sets.py turns them off for itself).
- process_sets: the ranks_process_sets*.py files again at np=4, so that every set has two ranks or more (the
  mismatch/stall test needs that; the others check sets of two ranks on both sides).
- tf_keras: its own launch because TF_USE_LEGACY_KERAS=1 must be in the environment before TensorFlow/Keras is
  imported (tfring.keras.sync_batch_norm picks its class at import), which the Keras 3 files must not see.
  Only at np=3: ranks_tf_keras_aggregation.py's process-set test needs three ranks (members of {0, 1} average
  while rank 2 is outside; with a set {2} of one rank as well, np=2's cases are covered too); the other tf_keras
  checks hold at any size.
"""
import glob
import importlib.util
import os

import pytest

from conftest import KERAS3_FILES, ROOT, keras3_env, run_rank_pytest

pytestmark = pytest.mark.slow  # real ranks under mpirun
HERE = os.path.dirname(os.path.abspath(__file__))
FILES = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(HERE, "ranks_*.py")))
TF_KERAS = [f for f in FILES if "tf_keras" in f]
MAIN = [f for f in FILES if f not in TF_KERAS]
NP3_ONLY = {"ranks_autotune.py", "ranks_name_scope.py", "ranks_partial.py", "ranks_promises_knobs.py",
            "ranks_stall.py", "ranks_sync_bn.py", "ranks_timeline.py", "ranks_xla_fallback.py",
            "ranks_tf_powersgd.py", "ranks_sharded_tape.py"}
MAIN_NP2 = [f for f in MAIN if os.path.basename(f) not in NP3_ONLY] + KERAS3_FILES
PROCESS_SETS = [f for f in FILES if "process_sets" in f]
# (group, files, np, extra environment); a launch takes 30-100 s on a 2-core machine
KERAS_3, LEGACY = keras3_env("tensorflow"), {"TF_USE_LEGACY_KERAS": "1"}
CASES = [("main", MAIN_NP2, 2, KERAS_3), ("main", MAIN, 3, KERAS_3), ("process_sets", PROCESS_SETS, 4, KERAS_3),
         ("tf_keras", TF_KERAS, 3, LEGACY)]


@pytest.mark.parametrize("name,files,np_,env", CASES, ids=["%s-np%d" % (c[0], c[2]) for c in CASES])
def test_ranks(name, files, np_, env):
    if name == "tf_keras" and importlib.util.find_spec("tf_keras") is None:
        # tf_keras depends on the full `tensorflow` wheel, which pip would install over tensorflow-cpu.
        pytest.skip("tf_keras is not installed: pip install --no-deps 'tf_keras~=2.21.0' (README)")
    run_rank_pytest(np_, files, timeout=600, extra_env=env)
