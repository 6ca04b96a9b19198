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


def expected_cores_per_rank():
    # The union of the affinity masks of each host's ranks, per rank of the host; the fewest over hosts.
    rows = MPI.COMM_WORLD.allgather((MPI.Get_processor_name(), sorted(os.sched_getaffinity(0))))
    hosts = {}
    for host, cpus in rows:
        hosts.setdefault(host, [set(), 0])
        hosts[host][0].update(cpus)
        hosts[host][1] += 1
    return min(int(len(cpus) * 1000 / n) / 1000.0 for cpus, n in hosts.values())


@pytest.mark.parametrize("pinned", ["none", "rank 0", "all"])
def test_cores_per_rank_are_agreed_by_every_rank(pinned):
    # Ranks bound to their own CPUs (rank 0 to one) must not make their host look smaller than it is; every rank
    # pinned to the same CPU makes it one CPU for all. Every rank reads the same value and makes the same
    # per-gradient / grouped choice for TF's gradients.
    saved_mask, saved_env = os.sched_getaffinity(0), os.environ.pop(overlap.ENV, None)
    if pinned == "all" or (pinned == "rank 0" and R == 0):
        os.sched_setaffinity(0, {min(saved_mask)})
    try:
        hvd.init()
        want = expected_cores_per_rank()
        got = topology.min_cores_per_rank()
        assert got == pytest.approx(want), (pinned, got, want)
        assert MPI.COMM_WORLD.allgather(got) == [got] * N
        if pinned == "all":
            assert got == pytest.approx(int(1000 / hvd.local_size()) / 1000.0)
        choice = overlap.overlap_gradients()
        assert choice is (topology.nccl_built() or got >= overlap.MIN_CORES)
        assert MPI.COMM_WORLD.allgather(choice) == [choice] * N
    finally:
        hvd.shutdown()
        os.sched_setaffinity(0, saved_mask)
        if saved_env is not None:
            os.environ[overlap.ENV] = saved_env
    works()
