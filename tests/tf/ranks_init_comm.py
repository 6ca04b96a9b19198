"""init(comm=...) runs tfring on a sub-communicator only."""
from mpi4py import MPI

import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import restarted

WORLD = MPI.COMM_WORLD


@pytest.fixture(scope="module", autouse=True)
def runtime():
    with restarted(start=False):  # the test starts tfring itself, on a sub-communicator
        yield


def test_init_on_split_communicator():
    color = WORLD.rank % 2
    sub = WORLD.Split(color, WORLD.rank)
    hvd.init(comm=sub)
    assert hvd.size() == sub.size and hvd.rank() == sub.rank
    out = hvd.allreduce(tf.constant([float(WORLD.rank)]), op=hvd.Sum)
    members = [r for r in range(WORLD.size) if r % 2 == color]
    assert out.numpy()[0] == sum(members)
    assert hvd.allgather(tf.constant([WORLD.rank])).numpy().tolist() == members
    hvd.shutdown()
    assert not hvd.is_initialized()
    # init() again, now on the whole world.
    hvd.init()
    assert hvd.size() == WORLD.size
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy()[0] == WORLD.size
