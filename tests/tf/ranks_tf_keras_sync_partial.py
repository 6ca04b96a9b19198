"""tf_keras (TF_USE_LEGACY_KERAS=1): SyncBatchNormalization, PartialDistributedOptimizer and groups on the
tf_keras DistributedOptimizer, checked against single-process references every rank computes."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import tfring  # noqa: E402
import tfring.keras as hvd  # noqa: E402
from rank_helpers import init  # noqa: E402
from tfring.tensorflow.tf_keras.optimizer import LegacyDistributedOptimizer  # noqa: E402
from sim_helpers import rank_batch, simulate_partial_sgd, small_model  # noqa: E402

R, N = init()
C, EPS = 3, 1e-3


def rank_data(r, seed=10):
    rng = np.random.RandomState(seed + r)
    return (rng.randn(r + 2, 2, C) * (r + 1) + 5.0 * r).astype("float32")  # r + 2 rows centred at 5 r


def make_bn(cls):
    layer = cls(momentum=0.9, epsilon=EPS)
    layer.build((None, 2, C))
    rng = np.random.RandomState(1)
    layer.set_weights([rng.rand(C).astype("float32") + 0.5, rng.randn(C).astype("float32"),
                       np.zeros(C, "float32"), np.ones(C, "float32")])
    return layer


def test_sync_bn_is_the_tf_keras_layer():
    assert tfring.SyncBatchNormalization is hvd.SyncBatchNormalization
    assert issubclass(hvd.SyncBatchNormalization, tf_keras.layers.BatchNormalization)
    for bad in ({"fused": True}, {"fused": None}, {"virtual_batch_size": 2}):
        with pytest.raises(ValueError, match=list(bad)[0]):
            hvd.SyncBatchNormalization(**bad)


@pytest.mark.parametrize("graph", [False, True])
def test_sync_bn_statistics_and_gradients_equal_global_batch_norm(graph):
    xs = [rank_data(r) for r in range(N)]
    ws = [np.random.RandomState(50 + r).randn(*x.shape).astype("float32") for r, x in enumerate(xs)]
    layer = make_bn(hvd.SyncBatchNormalization)

    def step(bn, x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = bn(x, training=True)
            loss = tf.reduce_sum(y * w)
        return [y] + tape.gradient(loss, [x, bn.gamma, bn.beta])
    run = lambda x, w: step(layer, x, w)  # noqa: E731
    y, gx, ggamma, gbeta = (tf.function(run) if graph else run)(tf.constant(xs[R]), tf.constant(ws[R]))
    ref = make_bn(tf_keras.layers.BatchNormalization)
    ry, rx, rgamma, rbeta = step(ref, tf.constant(np.concatenate(xs)), tf.constant(np.concatenate(ws)))
    mine = slice(sum(len(x) for x in xs[:R]), sum(len(x) for x in xs[:R + 1]))
    np.testing.assert_allclose(y.numpy(), ry.numpy()[mine], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx.numpy(), rx.numpy()[mine], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tfring.allreduce(ggamma, op=tfring.Sum).numpy(), rgamma.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tfring.allreduce(gbeta, op=tfring.Sum).numpy(), rbeta.numpy(), rtol=1e-4, atol=1e-5)
    everything = np.concatenate(xs).astype(np.float64)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * everything.mean((0, 1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 + 0.1 * everything.var((0, 1)), rtol=1e-5)





@pytest.mark.parametrize("scale", [True, False])
def test_partial_optimizer_fit_matches_simulation(scale):
    steps = 3
    model = small_model(tf_keras)
    opt = hvd.PartialDistributedOptimizer(tf_keras.optimizers.SGD(0.1), local_layers=model.layers[1],
                                          scale_local_gradients=scale, process_set=None)
    assert isinstance(opt, LegacyDistributedOptimizer)  # tfring's tf_keras wrapper
    model.compile(optimizer=opt, loss="mse")
    x, y = rank_batch(R)
    model.fit(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), batch_size=4, epochs=1, shuffle=False, verbose=0)
    sims = simulate_partial_sgd(tf_keras, N, steps, scale)
    for got, want in zip(model.get_weights(), sims[R].get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_groups_train_like_ungrouped_and_bad_groups_raise():
    model, ref = small_model(tf_keras), small_model(tf_keras)
    groups = [[model.layers[0].kernel, model.layers[1].kernel]]
    model.compile(optimizer=hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1), groups=groups), loss="mse")
    ref.compile(optimizer=hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1)), loss="mse")
    x, y = rank_batch(R, rows=8)
    for m in (model, ref):
        m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    gathered = np.asarray(hvd.allgather(flat[None]))
    assert all(np.array_equal(gathered[0], g) for g in gathered)
    with pytest.raises(ValueError, match="groups=0"):
        hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1), groups=0)


def test_groups_decide_the_collectives():
    vs = [tf.Variable(np.ones([k + 1], np.float32)) for k in range(4)]
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1), groups=[[vs[0], vs[3]]], process_set=None)
    opt.build(vs)
    step = tf.function(lambda: opt.apply_gradients([(tf.ones_like(v), v) for v in vs]))
    ops = [op for op in step.get_concrete_function().graph.get_operations() if op.type == "HorovodGroupedAllreduce"]
    assert sorted(sorted(int(t.shape[0]) for t in op.inputs) for op in ops) == [[1, 4], [2], [3]]
