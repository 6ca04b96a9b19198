"""ignore_name_scope on real ranks: in a tf.function the negotiated name is the graph node's, scopes included, so
collectives built under a different tf.name_scope on every rank only match with ignore_name_scope=True. Without
it they never match: with a stall shutdown time each rank's collective fails, naming its scoped name."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init, restarted

R, N = init()
OTHERS = ",".join(str(r) for r in range(N) if r != R)
COLLECTIVES = {"HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodBroadcast",
               "HorovodAlltoall", "HorovodReducescatter"}


@pytest.fixture(scope="module", autouse=True)
def runtime():
    # The shutdown time: long enough that a rank slowed by a busy machine is not taken for a mismatch, short enough
    # for the negative case.
    with restarted(env={"TFRING_STALL_CHECK_TIME_SECONDS": "2", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "10"}):
        yield


def collective_node_names(concrete):
    return sorted(op.name for op in concrete.graph.get_operations() if op.type in COLLECTIVES)


def test_different_scopes_per_rank_match_with_ignore_name_scope():
    @tf.function
    def step(x, rows):
        with tf.name_scope("rank%d" % R), tf.name_scope("inner"):  # the whole scope path differs per rank
            kw = dict(ignore_name_scope=True)
            return (hvd.allreduce(x, op=hvd.Sum, name="ns_sum", **kw),
                    hvd.allreduce(x, op=hvd.Average, **kw),  # default name, derived from the input's name
                    hvd.grouped_allreduce([x, 2.0 * x], op=hvd.Sum, name="ns_group", **kw),
                    hvd.allgather(x, name="ns_gather", **kw),
                    hvd.broadcast(x, root_rank=N - 1, name="ns_bcast", **kw),
                    hvd.alltoall(rows, name="ns_a2a", **kw),
                    hvd.reducescatter(rows, op=hvd.Sum, name="ns_rs", **kw))

    x = tf.constant([R + 1.0, 10.0 * (R + 1)])
    rows = tf.constant([10.0 * R + d for d in range(N)])  # row d goes to rank d
    names = collective_node_names(step.get_concrete_function(x, rows))
    assert len(names) == 7 and all(n.startswith("rank%d/inner/" % R) for n in names), names
    everyone = hvd.allgather_object(names)
    assert all(not set(everyone[r]) & set(everyone[R]) for r in range(N) if r != R)  # no node name in common
    hvd.barrier()  # traced everywhere: the ranks submit close together
    for _ in range(2):  # the second run goes through the response cache
        total, mean, (g1, g2), gathered, bcast, a2a, rs = step(x, rows)
        s = sum(range(1, N + 1))
        np.testing.assert_array_equal(total.numpy(), [s, 10.0 * s])
        np.testing.assert_allclose(mean.numpy(), [s / N, 10.0 * s / N], rtol=1e-6)
        np.testing.assert_array_equal(g1.numpy(), [s, 10.0 * s])
        np.testing.assert_array_equal(g2.numpy(), [2.0 * s, 20.0 * s])
        np.testing.assert_array_equal(gathered.numpy(), np.ravel([[r + 1.0, 10.0 * (r + 1)] for r in range(N)]))
        np.testing.assert_array_equal(bcast.numpy(), [float(N), 10.0 * N])
        np.testing.assert_array_equal(a2a.numpy(), [10.0 * s_ + R for s_ in range(N)])
        np.testing.assert_array_equal(rs.numpy(), [10.0 * sum(range(N)) + N * R])


def test_different_scopes_per_rank_never_match_without_it():
    # The stall shutdown this case waits for: 2 s (the matching case above keeps the file's 10 s).
    with restarted(env={"TFRING_STALL_CHECK_TIME_SECONDS": "1", "TFRING_STALL_SHUTDOWN_TIME_SECONDS": "2"}):
        never_match_without_it()


def never_match_without_it():
    @tf.function
    def step(x):
        with tf.name_scope("rank%d" % R):
            return hvd.allreduce(x, op=hvd.Sum, name="ns_unmatched")

    x = tf.constant([1.0])
    step.get_concrete_function(x)
    hvd.barrier()
    with pytest.raises(tf.errors.DeadlineExceededError) as e:
        step(x)
    msg = str(e.value)
    assert "stalled collective" in msg and "'rank%d/ns_unmatched'" % R in msg, msg
    assert "missing ranks [%s]" % OTHERS in msg, msg
    hvd.barrier()  # the runtime still works
    assert hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="ns_after").numpy()[0] == N
