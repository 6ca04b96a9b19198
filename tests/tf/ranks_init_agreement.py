"""init() is collective: what fails on one rank fails on every rank (none is left waiting in a collective), and a
later init() works."""
import os

import pytest
import tensorflow as tf

import tfring as hvd
from mpi4py import MPI
from rank_helpers import restarted

R, N = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(start=False):  # every test starts tfring itself (and fails to, first)
        yield


def works():
    hvd.init()
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="agree_ok").numpy()[0] == N
    hvd.shutdown()


def test_timeline_failing_on_rank_zero_fails_every_rank():
    if R == 0:
        os.environ["TFRING_TIMELINE"] = "/nonexistent-dir/timeline.json"
    with pytest.raises(RuntimeError, match="timeline" if R == 0 else "another rank failed to open the timeline"):
        hvd.init()
    os.environ.pop("TFRING_TIMELINE", None)
    works()


def test_process_sets_that_differ_by_rank():
    sets = [hvd.ProcessSet([0])] if R == 0 else []
    with pytest.raises(ValueError, match="ranks passed different process_sets"):
        hvd.init(process_sets=sets)
    works()


def test_process_set_refused_on_one_rank_only():
    bad = hvd.ProcessSet([0, N + 5] if R == 0 else [0])
    with pytest.raises(ValueError, match="outside \\[0, %d\\)" % N if R == 0 else "rank 0 refused its process_sets"):
        hvd.init(process_sets=[bad])
    works()
