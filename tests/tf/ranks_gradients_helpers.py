"""Gradients of every differentiable collective, the helpers, DistributedGradientTape and join. Gradients follow
Horovod's conventions (its published test suite expects them): an allgather's or broadcast's upstream grads are
averaged over the ranks, a reducescatter's Sum grad is scaled by the number of ranks."""
import numpy as np
import pytest
import tensorflow as tf

import tfring as hvd
from rank_helpers import init

R, N = init()


def grad_of(fn, x, graph=False):
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            # Rank-dependent weights make the upstream gradient differ per rank.
            loss = tf.reduce_sum(y * tf.cast(R + 1, y.dtype))
        return tape.gradient(loss, x)
    return (tf.function(run) if graph else run)(x)


@pytest.mark.parametrize("graph", [False, True])
def test_allreduce_gradients(graph):
    x = tf.constant([1.0, 2.0])
    g_sum = grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x, graph)
    np.testing.assert_allclose(g_sum.numpy(), [sum(range(1, N + 1))] * 2)
    g_avg = grad_of(lambda t: hvd.allreduce(t, op=hvd.Average), x, graph)
    np.testing.assert_allclose(g_avg.numpy(), [sum(range(1, N + 1)) / N] * 2)
    # Max: only the rank holding the max (the last rank) gets the summed gradient.
    g_max = grad_of(lambda t: hvd.allreduce(t * (R + 1), op=hvd.Max), x, graph)
    want = sum(range(1, N + 1)) * (R + 1) if R == N - 1 else 0.0
    np.testing.assert_allclose(g_max.numpy(), [want] * 2)


def test_grouped_allreduce_gradient():
    a, b = tf.constant([1.0]), tf.constant([2.0, 3.0])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
        loss = tf.reduce_sum(ya) * (R + 1) + tf.reduce_sum(yb)
    ga, gb = tape.gradient(loss, [a, b])
    np.testing.assert_allclose(ga.numpy(), [sum(range(1, N + 1))])
    np.testing.assert_allclose(gb.numpy(), [N, N])


@pytest.mark.parametrize("graph", [False, True])
def test_allgather_gradient(graph):
    x = tf.ones([R + 1, 2])
    g = grad_of(lambda t: hvd.allgather(t), x, graph)
    # Every rank's loss weights the whole gathered tensor by (rank+1): averaged over ranks, then this rank's rows.
    np.testing.assert_allclose(g.numpy(), np.full([R + 1, 2], sum(range(1, N + 1)) / N))


@pytest.mark.parametrize("graph", [False, True])
def test_grouped_allgather_gradient(graph):
    def run(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            ya, yb = hvd.grouped_allgather([a, b])
            loss = tf.reduce_sum(ya) * (R + 1) + tf.reduce_sum(yb * tf.cast(tf.range(tf.shape(yb)[0]), tf.float32))
        return tape.gradient(loss, [a, b])
    ga, gb = (tf.function(run) if graph else run)(tf.ones([R + 1]), tf.ones([2]))
    np.testing.assert_allclose(ga.numpy(), [sum(range(1, N + 1)) / N] * (R + 1))
    np.testing.assert_allclose(gb.numpy(), [2.0 * R, 2.0 * R + 1])  # this rank's rows of yb's row index


@pytest.mark.parametrize("graph", [False, True])
def test_broadcast_gradient(graph):
    # Graph mode: the non-root ranks' gradient must still run the allreduce the root waits for.
    g = grad_of(lambda t: hvd.broadcast(t, root_rank=0), tf.constant([1.0, 1.0]), graph)
    np.testing.assert_allclose(g.numpy(), [sum(range(1, N + 1)) / N if R == 0 else 0.0] * 2)


def test_alltoall_gradient():
    x = tf.ones([N, 3])
    g = grad_of(lambda t: hvd.alltoall(t), x)
    # The row sent to rank d comes back weighted by d's (d+1).
    np.testing.assert_allclose(g.numpy(), np.repeat(np.arange(1, N + 1)[:, None], 3, axis=1))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_reducescatter_gradient(op):
    x = tf.ones([N, 2])
    g = grad_of(lambda t: hvd.reducescatter(t, op=op), x)
    want = np.repeat(np.arange(1, N + 1)[:, None], 2, axis=1) * (N if op == hvd.Sum else 1)
    np.testing.assert_allclose(g.numpy(), want)


def test_grouped_reducescatter_gradient():
    a, b = tf.ones([N, 2]), tf.ones([2 * N])
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        ya, yb = hvd.grouped_reducescatter([a, b], op=hvd.Sum)
        loss = (tf.reduce_sum(ya) + tf.reduce_sum(yb) * 2) * (R + 1)
    ga, gb = tape.gradient(loss, [a, b])
    np.testing.assert_allclose(ga.numpy(), np.repeat(np.arange(1, N + 1)[:, None], 2, axis=1) * N)
    np.testing.assert_allclose(gb.numpy(), np.repeat(np.arange(1, N + 1), 2) * 2.0 * N)


def test_broadcast_variables():
    vs = [tf.Variable(tf.fill([3], float(R))), tf.Variable(R), tf.Variable(tf.fill([2, 2], R == 0))]
    hvd.broadcast_variables(vs, root_rank=N - 1)
    np.testing.assert_array_equal(vs[0].numpy(), [N - 1.0] * 3)
    assert vs[1].numpy() == N - 1
    assert not vs[2].numpy().any()


def test_broadcast_and_allgather_object():
    obj = {"rank": R, "payload": list(range(R * 100))}
    got = hvd.broadcast_object(obj, root_rank=1)
    assert got == {"rank": 1, "payload": list(range(100))}
    everyone = hvd.allgather_object(("r", R))
    assert everyone == [("r", r) for r in range(N)]


@pytest.mark.parametrize("graph", [False, True])
def test_distributed_gradient_tape_averages(graph):
    w = tf.Variable([1.0, 2.0])
    sparse_table = tf.Variable(tf.zeros([N, 2]))

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(R + 1)) + tf.reduce_sum(tf.gather(sparse_table, [R]))
        tape = hvd.DistributedGradientTape(tape)
        return tape.gradient(loss, [w, sparse_table])
    gw, gs = (tf.function(step) if graph else step)()
    np.testing.assert_allclose(gw.numpy(), [sum(range(1, N + 1)) / N] * 2)
    np.testing.assert_allclose(tf.convert_to_tensor(gs).numpy(), np.full([N, 2], 1.0 / N))


def test_join_uneven_steps():
    # Rank r runs r + 1 allreduce steps, then joins; joined ranks contribute zeros.
    for step in range(R + 1):
        out = hvd.allreduce(tf.constant([float(R + 1)]), op=hvd.Sum, name="uneven_%d" % step)
        active = [r for r in range(N) if r >= step]
        assert out.numpy()[0] == sum(r + 1 for r in active)
    last = hvd.join()
    assert last == N - 1
    out = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="after_join")
    assert out.numpy()[0] == N
