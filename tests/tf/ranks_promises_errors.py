"""Documented errors no other test checked (issue #18 item 10): init(comm=[ranks]) and its refusals, collectives
other than allreduce while a rank has joined, a negative alltoall split, an unwritable timeline path. The messages
are the ones docs/troubleshooting.md lists. (Its "tensor 'X' was submitted twice by one rank" cannot be produced
through the API: a rank refuses a name already in flight before sending it, see ranks_limits.py.)"""
import os

import pytest
import tensorflow as tf
from mpi4py import MPI

import tfring as hvd
from rank_helpers import restarted

W = MPI.COMM_WORLD
R, N = W.rank, W.size


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(start=False):  # the first tests start tfring on a subset of the ranks
        yield


def test_init_with_a_list_of_ranks_runs_on_those_ranks_only():
    members = list(range(N - 1, 0, -1))  # every rank but 0, given in descending order
    failure = None
    try:
        if R == 0:
            with pytest.raises(ValueError, match=r"tfring.init: this process \(world rank 0\) is not in "
                               r"comm=\[%s\]" % ", ".join(map(str, members))):
                hvd.init(comm=members)
            assert not hvd.is_initialized()
        else:
            hvd.init(comm=members)
            assert (hvd.size(), hvd.rank()) == (N - 1, R - 1)  # ordered by world rank, whatever the list's order
            out = hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum, name="sub_world")
            assert out.numpy()[0] == sum(members)
            assert hvd.allgather(tf.constant([R]), name="sub_gather").numpy().tolist() == sorted(members)
    except BaseException as e:  # noqa: BLE001 - every rank fails alike below
        failure = "rank %d: %s: %s" % (R, type(e).__name__, e)
    hvd.shutdown()
    # tfring is not running on every rank here: agree through MPI, so no rank goes on while another has failed.
    failures = [f for f in W.allgather(failure) if f]
    assert not failures, failures


@pytest.mark.parametrize("comm,error,words", [
    ([], ValueError, r"comm=\[\] must be a non-empty list of ranks in \[0, %d\)" % N),
    ([0, N], ValueError, r"comm=\[0, %d\] must be a non-empty list of ranks in \[0, %d\)" % (N, N)),
    ([-1], ValueError, "must be a non-empty list of ranks"),
    ([0, 1.0], ValueError, "must be a non-empty list of ranks"),
    ("0,1", TypeError, "comm must be an mpi4py communicator or a list of ranks, got '0,1'"),
    (MPI.COMM_NULL, ValueError, "comm=MPI.COMM_NULL; this process is not in the communicator"),
])
def test_init_comm_refusals_name_the_argument(comm, error, words):
    with pytest.raises(error, match=words):
        hvd.init(comm=comm)
    assert not hvd.is_initialized()


def test_init_after_refusals_starts_on_every_rank():
    hvd.init()
    assert hvd.size() == N
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="world_again").numpy()[0] == N


def runtime_still_works():
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy().tolist() == [N] * 2


def test_collectives_other_than_allreduce_fail_while_a_rank_has_joined():
    if R == 0:
        assert hvd.join() in range(1, N)  # returns once the others joined too: one of them was last
    else:
        calls = {
            "allgather": lambda: hvd.allgather(tf.ones([1]), name="joined_allgather"),
            "broadcast": lambda: hvd.broadcast(tf.ones([1]), root_rank=1, name="joined_broadcast"),
            "alltoall": lambda: hvd.alltoall(tf.ones([N]), name="joined_alltoall"),
            "reducescatter": lambda: hvd.reducescatter(tf.ones([N]), name="joined_reducescatter"),
        }
        try:
            for op, call in calls.items():
                with pytest.raises(tf.errors.FailedPreconditionError,
                                   match=r"tfring: %s of tensor 'joined_%s' cannot run while 1 rank\(s\) have "
                                         r"called join\(\); only allreduce supports joined ranks" % (op, op)):
                    call()
            # Allreduce is what joined ranks support: rank 0 contributes zeros.
            out = hvd.allreduce(tf.ones([1]), op=hvd.Sum, name="joined_allreduce")
            assert out.numpy()[0] == N - 1
        finally:  # rank 0 waits in join() until every rank joined
            last = hvd.join()
        assert last in range(1, N)
    runtime_still_works()


def test_negative_alltoall_split_is_refused_on_every_rank():
    # Rank 0's splits add up to its first dimension but one is negative; the others' are fine.
    splits = [-1] + [1] * (N - 2) + [3] if R == 0 else [1] * N
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="tfring: alltoall of tensor 'neg_split': rank 0 passed a negative split -1"):
        hvd.alltoall(tf.zeros([N]), splits=splits, name="neg_split")
    runtime_still_works()


def test_unwritable_timeline_path_is_refused_on_rank_0(tmp_path):
    path = "/nonexistent-dir-%d/timeline.json" % os.getpid()
    if R == 0:
        with pytest.raises(ValueError, match="tfring: cannot open the timeline file '%s' for writing" % path):
            hvd.start_timeline(path)
    else:
        hvd.start_timeline(path)  # only rank 0 writes a timeline: nothing to open here
        hvd.stop_timeline()
    runtime_still_works()
    # The same path from TFRING_TIMELINE: init() fails on rank 0 with that message, on the others naming why.
    hvd.shutdown()
    os.environ["TFRING_TIMELINE"] = path
    try:
        with pytest.raises(RuntimeError, match="cannot open the timeline file '%s' for writing" % path if R == 0
                           else "another rank failed to open the timeline"):
            hvd.init()
    finally:
        del os.environ["TFRING_TIMELINE"]
    hvd.init()
    runtime_still_works()
