"""tf_keras (Keras 2 via TF_USE_LEGACY_KERAS=1): the same DistributedOptimizer name and callbacks."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import tfring.keras as hvd  # noqa: E402
from rank_helpers import init  # noqa: E402
from tfring.tensorflow.tf_keras.optimizer import LegacyDistributedOptimizer  # noqa: E402

R, N = init()
B = 4


def make_model():
    tf_keras.utils.set_random_seed(0)
    return tf_keras.Sequential([tf_keras.layers.Dense(8, activation="tanh", input_shape=(5,)),
                                tf_keras.layers.Dense(1)])


def test_tf_keras_is_in_use():
    assert tf.keras.__name__.startswith("tf_keras")


def test_fit_matches_single_process_full_batch():
    steps = 4
    rng = np.random.RandomState(3)
    x, y = rng.randn(steps * N * B, 5).astype("float32"), rng.randn(steps * N * B, 1).astype("float32")
    idx = np.concatenate([np.arange(s * N * B + R * B, s * N * B + (R + 1) * B) for s in range(steps)])
    model = make_model()
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1))
    assert isinstance(opt, LegacyDistributedOptimizer)  # tfring's tf_keras wrapper
    model.compile(optimizer=opt, loss="mse")
    model.fit(x[idx], y[idx], batch_size=B, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()])
    ref = make_model()
    ref.compile(optimizer=tf_keras.optimizers.SGD(0.1), loss="mse")
    ref.fit(x, y, batch_size=N * B, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    gathered = np.asarray(hvd.allgather(flat[None, :]))
    assert all(np.array_equal(gathered[0], g) for g in gathered)


def test_broadcast_callback_with_a_model_built_by_its_first_batch():
    # Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py: a Sequential without an input shape has no
    # weights at on_train_begin (model.variables raises); the callback sends them after the first batch, so
    # ranks that started from their own random weights end identical.
    tf_keras.utils.set_random_seed(R)
    model = tf_keras.Sequential([tf_keras.layers.Dense(8, activation="tanh"), tf_keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.1)), loss="mse")
    rng = np.random.RandomState(R)
    model.fit(rng.randn(16, 5), rng.randn(16, 1), batch_size=4, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    gathered = np.asarray(hvd.allgather(flat[None, :]))
    assert all(np.array_equal(gathered[0], g) for g in gathered)


def test_warmup_sets_learning_rate_and_save_load(tmp_path):
    model = make_model()
    lr = 0.01 * N
    model.compile(optimizer=hvd.DistributedOptimizer(tf_keras.optimizers.SGD(lr)), loss="mse")
    seen = []

    class Record(tf_keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(tf_keras.backend.get_value(self.model.optimizer.learning_rate)))

    rng = np.random.RandomState(R)
    model.fit(rng.randn(8, 5), rng.randn(8, 1), batch_size=4, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=2, steps_per_epoch=2), Record()])
    np.testing.assert_allclose(seen, [lr / N * (e * (N - 1) / 2 + 1) for e in (0.0, 0.5)], rtol=1e-5)
    path = os.path.join(str(tmp_path), "m%d.keras" % R)
    model.save(path)
    loaded = hvd.load_model(path)
    assert int(loaded.optimizer.iterations.numpy()) == 2


def test_sharded_is_refused_by_name_for_a_tf_keras_optimizer():
    with pytest.raises(ValueError, match=r"sharded=True is built for Keras 3 optimizers only"):
        hvd.DistributedOptimizer(tf_keras.optimizers.Adam(0.01), sharded=True)


def test_powersgd_fit_matches_a_simulation_of_every_rank():
    # tests/powersgd_reference.py simulates every rank in float64 numpy (the 64 x 96 kernel compressed, the bias
    # sent as it is, SGD on the mean squared error); fit on each rank's batches must end with its weights.
    import powersgd_reference as ref
    config = hvd.Compression.powersgd(rank=2, warmup_steps=1)
    model = tf_keras.Sequential([tf_keras.layers.Dense(ref.OUT, input_shape=(ref.IN,))])
    model.set_weights(ref.initial_weights())
    opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(ref.LR), compression=config)
    model.compile(optimizer=opt, loss="mse")
    xs, ys = zip(*[ref.batch(step, R) for step in range(ref.STEPS)])
    model.fit(np.concatenate(xs), np.concatenate(ys), batch_size=ref.B, epochs=1, shuffle=False, verbose=0)
    for name, got, want in zip(("kernel", "bias"), model.get_weights(), ref.simulated(config, N)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg="rank %d, %s" % (R, name))
        assert all(np.array_equal(got, other) for other in hvd.allgather_object(got)), name
    again = LegacyDistributedOptimizer.from_config(opt.get_config())
    assert again._tfring_reducer.powersgd.config == config
    assert again._tfring_reducer.powersgd is not opt._tfring_reducer.powersgd  # (its own Q, errors and steps)
    with pytest.raises(ValueError, match=r"does not combine with backward_passes_per_step=2"):
        hvd.DistributedOptimizer(tf_keras.optimizers.SGD(ref.LR), compression=config, backward_passes_per_step=2)
    with pytest.raises(ValueError, match=r"compression=PowerSGD\(rank=2.* does not combine with groups=2"):
        hvd.DistributedOptimizer(tf_keras.optimizers.SGD(ref.LR), compression=config, groups=2)
