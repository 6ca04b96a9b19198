"""Size 1: SyncBatchNormalization is exactly BatchNormalization, local gradients are not scaled, and the
partial/grouped wrappers train like the plain optimizer."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfring.keras as hvd


@pytest.fixture(scope="module", autouse=True)
def initialized():
    hvd.init()
    yield


def test_sync_batch_norm_at_size_one_is_batch_normalization():
    x = np.random.RandomState(0).randn(6, 4).astype("float32") * 3 + 1
    sync, plain = hvd.SyncBatchNormalization(), keras.layers.BatchNormalization()
    for training in (True, False):
        np.testing.assert_array_equal(sync(x, training=training).numpy(), plain(x, training=training).numpy())
    np.testing.assert_array_equal(sync.moving_variance.numpy(), plain.moving_variance.numpy())


def test_tape_with_groups_and_local_source_at_size_one():
    vs = [tf.Variable([1.0, 2.0]), tf.Variable([3.0])]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(vs[0] * 2.0) + tf.reduce_sum(vs[1] * 5.0)
    dtape = hvd.DistributedGradientTape(tape, groups=[[vs[1]]], process_set=None)
    dtape.register_local_source(vs[0])
    g0, g1 = dtape.gradient(loss, vs)
    np.testing.assert_array_equal(g0.numpy(), [2.0, 2.0])  # divided by the size, 1
    np.testing.assert_array_equal(g1.numpy(), [5.0])


def test_partial_optimizer_trains_like_the_inner_one_at_size_one():
    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    x, y = np.random.RandomState(1).randn(8, 3), np.random.RandomState(2).randn(8, 1)
    m, ref = model(), model()
    m.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=m.layers[1],
                                                        groups=2), loss="mse")
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    for model_ in (m, ref):
        model_.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(m.get_weights(), ref.get_weights()):
        np.testing.assert_array_equal(a, b)
