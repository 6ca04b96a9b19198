"""Gradient grouping (groups / num_groups), worker-local variables (register_local_source / register_local_var,
scale_local_gradients, PartialDistributedGradientTape / PartialDistributedOptimizer) and process_set=None
pass-through, on real ranks against values every rank computes for itself."""
import contextlib
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
from tfring.common import topology
from rank_helpers import init
from sim_helpers import local_grads, rank_batch, simulate_partial_sgd, small_model

R, N = init()
MEAN_W = (N + 1) / 2.0  # average over ranks of the rank weight R + 1


def make_vars():
    # Distinct shapes identify each variable's gradient among a collective's inputs.
    return [tf.Variable(np.arange(1, k + 2, dtype=np.float32)) for k in range(4)]


def weighted_loss(vs):
    """d loss / d v_k = (k + 1) * (R + 1): rank-dependent, so averaging is visible."""
    return tf.add_n([tf.reduce_sum(v) * float(k + 1) * (R + 1) for k, v in enumerate(vs)])


def reduced_grads(vs, graph=False, **tape_kwargs):
    def run():
        with tf.GradientTape() as tape:
            loss = weighted_loss(vs)
        return tfring.DistributedGradientTape(tape, **tape_kwargs).gradient(loss, vs)
    return (tf.function(run) if graph else run)()


@contextlib.contextmanager
def overlap(value):
    saved = os.environ.get("TFRING_OVERLAP_GRADIENTS")
    os.environ["TFRING_OVERLAP_GRADIENTS"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TFRING_OVERLAP_GRADIENTS")
        else:
            os.environ["TFRING_OVERLAP_GRADIENTS"] = saved


def collective_inputs(vs, **tape_kwargs):
    """Per allreduce op (grouped or not) in the traced graph: the sorted lengths of its inputs (v_k has k + 1)."""
    def run():
        with tf.GradientTape() as tape:
            loss = weighted_loss(vs)
        return tfring.DistributedGradientTape(tape, **tape_kwargs).gradient(loss, vs)
    graph = tf.function(run).get_concrete_function().graph
    ops = [op for op in graph.get_operations() if op.type in ("HorovodGroupedAllreduce", "HorovodAllreduce")]
    return sorted(sorted(int(t.shape[0]) for t in op.inputs) for op in ops)


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("kwargs", [{}, {"groups": 2}, {"groups": 3}, {"num_groups": 4}, {"groups": 9},
                                    {"groups": "lists"}, {"process_set": None}])
def test_grouped_gradients_are_averaged(graph, kwargs):
    vs = make_vars()
    if kwargs.get("groups") == "lists":
        kwargs = {"groups": [[vs[0], vs[2]], [vs[3]]]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # num_groups is deprecated, as in Horovod
        grads = reduced_grads(vs, graph, **kwargs)
    for k, g in enumerate(grads):
        np.testing.assert_allclose(g.numpy(), np.full([k + 1], (k + 1) * MEAN_W), rtol=1e-6)


def test_groups_decide_the_collectives():
    vs = make_vars()
    # groups=None in a graph: one allreduce per gradient, each submitted as soon as backprop produces it
    # (Horovod; TFRING_OVERLAP_GRADIENTS=1), or with 0 one grouped allreduce after backprop; auto (the default)
    # overlaps only with 2 cores per rank on every host (or a GPU).
    auto = [[1], [2], [3], [4]] if topology.min_cores_per_rank() >= 2 else [[1, 2, 3, 4]]
    with overlap("auto"):
        assert collective_inputs(vs) == auto
    with overlap("0"):
        assert collective_inputs(vs) == [[1, 2, 3, 4]]
    with overlap("1"):
        assert collective_inputs(vs) == [[1], [2], [3], [4]]
    assert collective_inputs(vs, groups=2) == [[1, 2], [3, 4]]  # contiguous, even split
    assert collective_inputs(vs, groups=3) == [[1, 2], [3], [4]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert collective_inputs(vs, num_groups=2) == [[1, 2], [3, 4]]
    # Listed variables share a collective; every unlisted one is a group of its own (Horovod).
    assert collective_inputs(vs, groups=[[vs[0], vs[2]]]) == [[1, 3], [2], [4]]


def test_bad_grouping_arguments_raise_naming_them():
    v = tf.Variable(1.0)
    tape = tf.GradientTape()
    bad = [({"groups": 0}, "groups=0"), ({"groups": -2}, "groups=-2"), ({"groups": "x"}, "groups='x'"),
           ({"groups": True}, "groups=True"), ({"groups": [[1.0]]}, "groups"), ({"groups": [v]}, "groups"),
           ({"groups": [[v], [v]]}, "more than once"), ({"num_groups": -1}, "num_groups=-1"),
           ({"num_groups": 1.5}, "num_groups=1.5"), ({"op": tfring.Sum, "gradient_predivide_factor": 2.0},
                                                      "gradient_predivide_factor=2.0")]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message.replace("[", r"\[")):
            tfring.DistributedGradientTape(tape, **kwargs)
        with pytest.raises(ValueError, match=message.replace("[", r"\[")):
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("graph", [False, True])
def test_local_sources_are_not_reduced(scale, graph):
    vs = make_vars()
    table = tf.Variable(np.ones([5, 2], np.float32))  # a local embedding: its gradient is IndexedSlices

    def run():
        with tf.GradientTape() as tape:
            loss = weighted_loss(vs) + tf.reduce_sum(tf.gather(table, [R % 5, 4])) * (R + 1)
        dtape = tfring.DistributedGradientTape(tape, scale_local_gradients=scale, process_set=None)
        dtape.register_local_source(vs[1])
        dtape.register_local_source(table)
        return dtape.gradient(loss, vs + [table])
    grads = (tf.function(run) if graph else run)()
    div = N if scale else 1  # Horovod divides local gradients by the process set's size
    for k, g in enumerate(grads[:4]):
        want = (k + 1) * (R + 1) / div if k == 1 else (k + 1) * MEAN_W
        np.testing.assert_allclose(g.numpy(), np.full([k + 1], want), rtol=1e-6)
    sparse = grads[4]
    assert isinstance(sparse, tf.IndexedSlices)
    np.testing.assert_array_equal(sparse.indices.numpy(), [R % 5, 4])  # this rank's rows only
    np.testing.assert_allclose(sparse.values.numpy(), np.full([2, 2], (R + 1) / div), rtol=1e-6)


def test_get_local_and_global_gradients():
    vs = make_vars()
    with tf.GradientTape() as tape:
        loss = weighted_loss(vs)
    dtape = tfring.DistributedGradientTape(tape)
    dtape.register_local_source(vs[3])
    local, global_ = dtape.get_local_and_global_gradients(loss, vs)
    assert [v is vs[3] for v, _ in local] == [True] and [v for v, _ in global_] == vs[:3]
    np.testing.assert_allclose(local[0][1].numpy(), np.full([4], 4.0 * (R + 1) / N), rtol=1e-6)
    np.testing.assert_allclose(global_[2][1].numpy(), np.full([3], 3.0 * MEAN_W), rtol=1e-6)





def test_partial_tape_keeps_local_layer_gradients_local():
    model = small_model(keras)
    want_all = [local_grads(keras, model, r) for r in range(N)]  # every rank's plain gradients, computed here
    x, y = rank_batch(R)
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, model(x))
    dtape = tfring.PartialDistributedGradientTape(tape, local_layers=model.layers[1], process_set=None)
    got = dtape.gradient(loss, model.trainable_variables)
    for i, g in enumerate(got):
        want = want_all[R][i] / N if i >= 2 else np.mean([w[i] for w in want_all], axis=0)  # layer 1: kernel, bias
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="local_layers must be Keras layers"):
        tfring.PartialDistributedGradientTape(tape, local_layers=[model.layers[0], "dense"])
    with pytest.raises(ValueError, match="not built"):
        tfring.PartialDistributedGradientTape(tape, local_layers=keras.layers.Dense(2))


@pytest.mark.parametrize("scale", [True, False])
def test_partial_optimizer_fit_matches_simulation(scale):
    """Global layer: averaged gradients, identical everywhere. Local layer: each rank's own gradient (divided
    by the size when scale_local_gradients), so it diverges per rank. Checked against a simulation of every
    rank's model and plain SGD, run on every rank."""
    steps = 3
    model = small_model(keras)
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[model.layers[1]],
                                          scale_local_gradients=scale, process_set=None)
    model.compile(optimizer=opt, loss="mse")
    x, y = rank_batch(R)
    model.fit(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), batch_size=4, epochs=1, shuffle=False, verbose=0)
    sims = simulate_partial_sgd(keras, N, steps, scale)
    for got, want in zip(model.get_weights(), sims[R].get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    gathered = np.asarray(hvd.allgather(model.get_weights()[2][None]))
    assert not np.allclose(gathered[0], gathered[1])  # the local layer differs between ranks


@pytest.mark.parametrize("groups", [2, "lists"])
def test_keras_optimizer_groups_train_like_ungrouped(groups):
    model, ref = small_model(keras), small_model(keras)
    if groups == "lists":
        groups = [[model.layers[0].kernel, model.layers[1].kernel]]
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=groups, process_set=None),
                  loss="mse")
    ref.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = rank_batch(R, rows=8)
    for m in (model, ref):
        m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    config = model.optimizer.get_config()
    assert config["groups"] == (2 if groups == 2 else None) and config["scale_local_gradients"] is True


def test_keras_optimizer_groups_decide_the_collectives():
    vs = make_vars()
    # groups=None in a graph: one allreduce per gradient where overlap pays (as Horovod), else one grouped op.
    auto = [[1], [2], [3], [4]] if topology.min_cores_per_rank() >= 2 else [[1, 2, 3, 4]]
    for groups, want in [(None, auto), (2, [[1, 2], [3, 4]]), ([[vs[1], vs[3]]], [[1], [2, 4], [3]])]:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=groups)
        opt.build(vs)
        step = tf.function(lambda: opt.apply([tf.ones_like(v) for v in vs], vs))
        graph = step.get_concrete_function().graph
        ops = [op for op in graph.get_operations() if op.type in ("HorovodGroupedAllreduce", "HorovodAllreduce")]
        assert sorted(sorted(int(t.shape[0]) for t in op.inputs) for op in ops) == want, groups
