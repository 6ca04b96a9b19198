"""init() is collective: what fails on one rank fails on every rank (none is left waiting in a collective), and a
later init() works."""
import os

import pytest
import tensorflow as tf

import tfring as hvd
from mpi4py import MPI
from rank_helpers import restarted
from tfring.common import overlap, topology

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


def test_cores_per_rank_are_agreed_by_every_rank():
    # Rank 0 runs on one core: every rank must read the job's fewest cores per rank (its own count would differ
    # on the others), and so make the same per-gradient / grouped choice for TF's gradients.
    saved = os.sched_getaffinity(0)
    if R == 0:
        os.sched_setaffinity(0, {min(saved)})
    try:
        hvd.init()
        mine = int(len(os.sched_getaffinity(0)) * 1000 / hvd.local_size()) / 1000.0
        want = min(MPI.COMM_WORLD.allgather(mine))
        got = topology.min_cores_per_rank()
        assert got == pytest.approx(want) and want <= 1.0 / hvd.local_size() + 1e-9
        assert MPI.COMM_WORLD.allgather(got) == [got] * N
        os.environ.pop(overlap.ENV, None)
        choice = overlap.overlap_gradients()
        assert choice is False and MPI.COMM_WORLD.allgather(choice) == [choice] * N
        hvd.shutdown()
    finally:
        os.sched_setaffinity(0, saved)
    works()
