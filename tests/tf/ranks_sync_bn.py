"""SyncBatchNormalization (Keras 3) on real ranks: ranks hold batches of different sizes and offsets, and every
rank's output, moving statistics and gradients must equal those of one BatchNormalization over the
concatenated global batch."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring
import tfring.keras as hvd
from rank_helpers import init

R, N = init()
C = 3
EPS = 1e-3


def rank_data(r, tail, seed=10):
    """Rank r holds r + 2 rows, centred at 5 r: local statistics differ from the global ones."""
    rng = np.random.RandomState(seed + r)
    return (rng.randn(r + 2, *tail) * (r + 1) + 5.0 * r).astype("float32")


def make_layer(cls, axis, shape, seed=1):
    layer = cls(axis=axis, momentum=0.9, epsilon=EPS)
    layer.build(shape)
    rng = np.random.RandomState(seed)
    gamma, beta = rng.rand(C).astype("float32") + 0.5, rng.randn(C).astype("float32")
    layer.set_weights([gamma, beta, np.zeros(C, "float32"), np.ones(C, "float32")])
    return layer, gamma, beta


def channel_shape(ndim, axis):
    shape = [1] * ndim
    shape[axis] = C
    return shape


def test_exported_names_and_options():
    assert tfring.SyncBatchNormalization is hvd.SyncBatchNormalization
    assert issubclass(hvd.SyncBatchNormalization, keras.layers.BatchNormalization)
    with pytest.raises(ValueError, match="fused=True"):
        hvd.SyncBatchNormalization(fused=True)
    with pytest.raises(ValueError, match="synchronized=True"):
        hvd.SyncBatchNormalization(synchronized=True)
    layer = hvd.SyncBatchNormalization(axis=1, momentum=0.5)
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is hvd.SyncBatchNormalization and clone.axis == 1 and clone.momentum == 0.5


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("tail,axis", [((C,), -1), ((2, 2, C), -1), ((C, 2, 2), 1)])
def test_training_uses_global_batch_statistics(graph, tail, axis):
    xs = [rank_data(r, tail) for r in range(N)]
    x_all = np.concatenate(xs).astype(np.float64)
    ndim = x_all.ndim
    layer, gamma, beta = make_layer(hvd.SyncBatchNormalization, axis, xs[R].shape)
    run = lambda x: layer(x, training=True)  # noqa: E731
    out = (tf.function(run) if graph else run)(tf.constant(xs[R])).numpy()
    red = tuple(i for i in range(ndim) if i != axis % ndim)
    mean, var = x_all.mean(red), x_all.var(red)
    assert not np.allclose(xs[R].mean(red), mean, atol=0.1)  # local statistics would give another answer
    cs = channel_shape(ndim, axis)
    want = gamma.reshape(cs) * (xs[R] - mean.reshape(cs)) / np.sqrt(var.reshape(cs) + EPS) + beta.reshape(cs)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 + 0.1 * var, rtol=1e-5)
    # The same as Keras's BatchNormalization over the concatenated global batch.
    ref, _, _ = make_layer(keras.layers.BatchNormalization, axis, x_all.shape)
    start = sum(len(x) for x in xs[:R])
    ref_out = ref(x_all.astype("float32"), training=True).numpy()[start:start + len(xs[R])]
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=1e-5)


@pytest.mark.parametrize("graph", [False, True])
def test_gradients_equal_global_batch_norm(graph):
    """The loss is the sum of every rank's loss: x's gradient comes back from the other ranks' losses through
    the synchronized statistics; gamma/beta gradients are local and sum to the reference."""
    xs = [rank_data(r, (C,)) for r in range(N)]
    ws = [np.random.RandomState(50 + r).randn(*x.shape).astype("float32") for r, x in enumerate(xs)]
    layer, _, _ = make_layer(hvd.SyncBatchNormalization, -1, xs[R].shape)

    def grads(bn, x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(bn(x, training=True) * w)
        return tape.gradient(loss, [x, bn.gamma, bn.beta])
    run = lambda x, w: grads(layer, x, w)  # noqa: E731
    gx, ggamma, gbeta = (tf.function(run) if graph else run)(tf.constant(xs[R]), tf.constant(ws[R]))
    ref, _, _ = make_layer(keras.layers.BatchNormalization, -1, (None, C))
    rx, rgamma, rbeta = grads(ref, tf.constant(np.concatenate(xs)), tf.constant(np.concatenate(ws)))
    start = sum(len(x) for x in xs[:R])
    np.testing.assert_allclose(gx.numpy(), rx.numpy()[start:start + len(xs[R])], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tfring.allreduce(ggamma, op=tfring.Sum).numpy(), rgamma.numpy(), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(tfring.allreduce(gbeta, op=tfring.Sum).numpy(), rbeta.numpy(), rtol=1e-4,
                               atol=1e-5)


def test_inference_uses_moving_statistics_without_communication():
    x = rank_data(R, (C,))
    layer, gamma, beta = make_layer(hvd.SyncBatchNormalization, -1, x.shape)
    mm, mv = np.arange(C, dtype="float32") - 1, np.arange(C, dtype="float32") + 2
    layer.moving_mean.assign(mm)
    layer.moving_variance.assign(mv)
    infer = tf.function(lambda t: layer(t, training=False))
    np.testing.assert_allclose(infer(tf.constant(x)).numpy(), gamma * (x - mm) / np.sqrt(mv + EPS) + beta,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(layer.moving_mean.numpy(), mm)  # not updated

    def collectives(training):
        fn = tf.function(lambda t: layer(t, training=training))
        graph = fn.get_concrete_function(tf.TensorSpec([None, C], tf.float32)).graph
        return [op.type for op in graph.get_operations() if op.type.startswith("Horovod")]
    assert collectives(False) == []
    assert collectives(True) == ["HorovodAllgather"]


def test_masked_statistics_and_an_empty_rank():
    """Masked-out steps and a rank with no rows (rank 0) do not count: counts weight every rank."""
    rows = 0 if R == 0 else R + 1
    xs, masks = [], []
    for r in range(N):
        n = 0 if r == 0 else r + 1
        rng = np.random.RandomState(70 + r)
        xs.append((rng.randn(n, 4, C) + 3.0 * r).astype("float32"))
        masks.append(rng.rand(n, 4) > 0.4)
    layer, gamma, beta = make_layer(hvd.SyncBatchNormalization, -1, (None, 4, C))
    out = layer(tf.constant(xs[R]), training=True, mask=tf.constant(masks[R])).numpy()
    picked = np.concatenate([x[m] for x, m in zip(xs, masks)]).astype(np.float64)  # unmasked steps, [k, C]
    mean, var = picked.mean(0), picked.var(0)
    assert out.shape == (rows, 4, C)
    np.testing.assert_allclose(out, gamma * (xs[R] - mean) / np.sqrt(var + EPS) + beta, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 + 0.1 * var, rtol=1e-5)


def make_model(bn_cls):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), bn_cls(momentum=0.8),
                             keras.layers.Activation("tanh"), keras.layers.Dense(1)])


def test_fit_with_distributed_optimizer_equals_global_batch_training():
    """Equal per-rank batches: SyncBN + averaged gradients train exactly like BatchNormalization on the
    global batch in one process (weights and moving statistics), on every rank."""
    steps, b = 3, 4
    rng = np.random.RandomState(5)
    x, y = rng.randn(steps * N * b, 5).astype("float32") * 2 + 1, rng.randn(steps * N * b, 1).astype("float32")
    idx = np.concatenate([np.arange(s * N * b + R * b, s * N * b + (R + 1) * b) for s in range(steps)])
    model = make_model(hvd.SyncBatchNormalization)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    model.fit(x[idx], y[idx], batch_size=b, epochs=2, shuffle=False, verbose=0)
    ref = make_model(keras.layers.BatchNormalization)
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ref.fit(x, y, batch_size=N * b, epochs=2, shuffle=False, verbose=0)
    assert len(model.get_weights()) == len(ref.get_weights())
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
