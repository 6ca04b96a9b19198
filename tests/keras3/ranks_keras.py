"""Keras 3 DistributedOptimizer and callbacks on real ranks, compared with single-process references: the same
file under KERAS_BACKEND=tensorflow, jax and torch (in each binding's launches: conftest.KERAS3_FILES)."""
import os

import keras
import numpy as np
import pytest

import tfring.keras as hvd

if not hvd.is_initialized():
    hvd.init()
R, N = hvd.rank(), hvd.size()
B = 4  # per-rank batch


def make_model(seed=0, embedding=False):
    keras.utils.set_random_seed(seed)  # same initial weights on every rank and in the reference
    if embedding:
        return keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(20, 4),
                                 keras.layers.Flatten(), keras.layers.Dense(1)])
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])


def data(steps, per_step, embedding=False, seed=7):
    rng = np.random.RandomState(seed)
    n = steps * per_step
    x = rng.randint(0, 20, size=(n, 3)).astype("int32") if embedding else rng.randn(n, 5).astype("float32")
    return x, rng.randn(n, 1).astype("float32")


def my_shard(x, y, steps, per_rank):
    """Rank r's part of every global batch, in order: global batch s = ranks' batches s concatenated."""
    idx = np.concatenate([np.arange(s * N * per_rank + R * per_rank, s * N * per_rank + (R + 1) * per_rank)
                          for s in range(steps)])
    return x[idx], y[idx]


def weights_equal_everywhere(model):
    flat = np.concatenate([w.ravel() for w in model.get_weights()]).astype(np.float64)
    gathered = np.asarray(hvd.allgather(flat[None, :]))
    return all(np.array_equal(gathered[0], g) for g in gathered)


class WeightsCheck(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ok = []

    def on_epoch_end(self, epoch, logs=None):
        self.ok.append(weights_equal_everywhere(self.model))


class EpochLogs(keras.callbacks.Callback):
    """Keeps a copy of every epoch's logs as this callback sees them (before or after MetricAverageCallback)."""

    def __init__(self):
        super().__init__()
        self.logs = []

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs))


def reference_weights(x, y, batch, steps, epochs=1, embedding=False, optimizer=None):
    ref = make_model(embedding=embedding)
    ref.compile(optimizer=optimizer or keras.optimizers.SGD(0.1), loss="mse")
    ref.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0, steps_per_epoch=steps)
    return ref.get_weights()


def test_fit_matches_single_process_full_batch_and_stays_identical():
    steps = 5
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    check = WeightsCheck()
    model.fit(xs, ys, batch_size=B, epochs=2, shuffle=False, verbose=0, callbacks=[check])
    assert check.ok == [True, True]  # bitwise identical on every rank after every epoch
    want = reference_weights(x, y, N * B, steps, epochs=2)
    for got, ref in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_sparse_gradients(sparse_as_dense):
    steps = 3
    x, y = data(steps, N * B, embedding=True)
    xs, ys = my_shard(x, y, steps, B)
    model = make_model(embedding=True)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), sparse_as_dense=sparse_as_dense),
                  loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert weights_equal_everywhere(model)
    want = reference_weights(x, y, N * B, steps, embedding=True)
    for got, ref in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("average", [True, False])
def test_backward_passes_per_step_matches_double_batch(average):
    steps = 4  # 2 updates of 2 passes each
    x, y = data(steps, N * B)
    # Pass p of update u on rank r holds global-batch rows [u, r, p]: reorder so that the reference's
    # batch u (size 2*N*B) holds exactly the rows of update u.
    xs, ys = my_shard(x, y, steps, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                                     average_aggregated_gradients=average), loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert weights_equal_everywhere(model)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == steps // 2
    # Horovod's default (average_aggregated_gradients=False) applies the sum of the 2 passes' averages: twice the
    # double batch's mean gradient, i.e. plain SGD at twice the rate (SGD is linear in the gradient).
    want = reference_weights(x, y, 2 * N * B, steps // 2, optimizer=keras.optimizers.SGD(0.1 if average else 0.2))
    for got, ref in zip(model.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_gradient_predivide_factor_still_averages():
    # Divided by the factor before the sum and by size/factor after: the plain average (dropping either scale
    # moves the weights by another amount).
    steps = 2
    x, y = data(steps, N * B)
    xs, ys = my_shard(x, y, steps, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), gradient_predivide_factor=4.0),
                  loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert weights_equal_everywhere(model)
    for got, ref in zip(model.get_weights(), reference_weights(x, y, N * B, steps)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


# Gradients the wire dtype cannot hold, rounding unambiguously (ties to even) to 1, 2, -1 in it.
WIRE_GRADS = {"none": ([1 + 2 ** -11, 2 - 2 ** -12, -(1 + 2 ** -12)], [1 + 2 ** -11, 2 - 2 ** -12, -(1 + 2 ** -12)]),
              "fp16": ([1 + 2 ** -11, 2 - 2 ** -12, -(1 + 2 ** -12)], [1.0, 2.0, -1.0]),
              "bf16": ([1 + 2 ** -8, 2 - 2 ** -9, -(1 + 2 ** -9)], [1.0, 2.0, -1.0])}


@pytest.mark.parametrize("compression", sorted(WIRE_GRADS))
def test_compression_rounds_the_gradients_on_the_wire(compression):
    # loss = x . w with w = 0: the gradient is x itself, the same on every rank; one SGD(1) step sets w to
    # -(the averaged gradient as it came off the wire). A no-op compression leaves the unrounded x.
    sent, arrived = WIRE_GRADS[compression]
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), compression=getattr(hvd.Compression, compression))
    model.compile(optimizer=opt, loss=lambda y_true, y_pred: y_pred)
    x = np.array([sent], dtype="float32")
    model.fit(x, np.zeros((1, 1), "float32"), batch_size=1, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_array_equal(model.get_weights()[0][:, 0], -np.array(arrived, "float32"))
    assert weights_equal_everywhere(model)


def test_broadcast_callback_metric_average_and_warmup():
    keras.utils.set_random_seed(100 + R)  # different init per rank: the broadcast must fix it
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    lr = 0.01 * N
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9)), loss="mse")
    seen_lr = []
    raw, averaged = EpochLogs(), EpochLogs()

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen_lr.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    x, y = data(4, B, seed=R)  # different data per rank: different local losses
    model.fit(x, y, batch_size=B, epochs=3, shuffle=False, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw, hvd.callbacks.MetricAverageCallback(), averaged,
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=2, steps_per_epoch=4), Record()])
    assert weights_equal_everywhere(model)
    for epoch in range(3):
        local = raw.logs[epoch]["loss"]
        everyone = np.asarray(hvd.allgather(np.array([local])))
        assert abs(averaged.logs[epoch]["loss"] - everyone.mean()) < 1e-6 * max(1.0, abs(everyone.mean()))
    # Documented warmup: lr(e) = lr / N * (e * (N - 1) / warmup + 1), e = epoch + batch / steps.
    want = [lr / N * ((e + b / 4.0) * (N - 1) / 2 + 1) for e in range(2) for b in range(4)] + [lr] * 4
    np.testing.assert_allclose(seen_lr, want, rtol=1e-5)


def test_broadcast_callback_syncs_the_optimizer_state_too():
    # Every rank starts from its own Adam state (moments and iteration count, as after a resume from different
    # checkpoints): the callback must make it rank 0's, or the ranks' steps differ from the first one on.
    model = make_model(seed=0)
    inner = keras.optimizers.Adam(0.01)
    inner.build(model.trainable_variables)
    for v in inner.variables:
        v.assign(np.full(v.shape, R + 1, dtype=v.dtype))
    model.compile(optimizer=hvd.DistributedOptimizer(inner), loss="mse")
    x, y = data(2, B, seed=R)
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    state = np.concatenate([np.ravel(keras.ops.convert_to_numpy(v)).astype(np.float64) for v in inner.variables])
    gathered = np.asarray(hvd.allgather(state[None, :]))
    assert all(np.array_equal(gathered[0], g) for g in gathered)  # identical optimizer state on every rank
    assert weights_equal_everywhere(model)


def test_broadcast_callback_with_a_model_built_by_its_first_batch():
    # Horovod's examples build Sequential models without an input shape: no weights until fit builds them. Every
    # rank starts from its own random weights; after fit they are rank 0's, and identical, everywhere.
    keras.utils.set_random_seed(R)
    model = keras.Sequential([keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    assert not model.variables
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = data(2, B, seed=R)
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert weights_equal_everywhere(model)


def test_metric_average_covers_every_metric_and_validation():
    # Each rank has its own data, so every local metric differs; after MetricAverageCallback each logged value,
    # the validation ones and other metrics included, is the mean over the ranks.
    model = make_model(seed=0)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse", metrics=["mae"])
    raw, averaged = EpochLogs(), EpochLogs()

    x, y = data(2, B, seed=R)
    vx, vy = data(1, B, seed=50 + R)
    model.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0, validation_data=(vx, vy), callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw, hvd.callbacks.MetricAverageCallback(), averaged])
    for before, after in zip(raw.logs, averaged.logs):
        assert {"loss", "mae", "val_loss", "val_mae"} <= set(after), after
        for key in ("loss", "mae", "val_loss", "val_mae"):
            everyone = np.asarray(hvd.allgather(np.array([before[key]], dtype=np.float64)))
            assert len(set(everyone.tolist())) == N, (key, everyone)  # the local values really differ
            assert abs(after[key] - everyone.mean()) < 1e-6 * max(1.0, abs(everyone.mean())), (key, after, everyone)


def test_save_load_resumes(tmp_path):
    x, y = data(4, N * B)
    xs, ys = my_shard(x, y, 4, B)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(str(tmp_path), "rank%d.keras" % R)
    model.save(path)
    loaded = hvd.load_model(path)
    assert isinstance(loaded.optimizer, hvd.DistributedOptimizer)
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == 4
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    loaded.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6)  # resumed with the same optimizer state
    assert weights_equal_everywhere(loaded)


def test_plain_keras_load_model_knows_every_tfring_class(tmp_path):
    # Each tfring Keras class is registered once, on every backend: keras.models.load_model needs no
    # custom_objects for a model holding a SyncBatchNormalization layer and a DistributedOptimizer.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), hvd.SyncBatchNormalization(momentum=0.5),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2),
                  loss="mse")
    x, y = data(2, B)
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(str(tmp_path), "sbn_rank%d.keras" % R)
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.layers[1]) is hvd.SyncBatchNormalization and loaded.layers[1].momentum == 0.5
    assert type(loaded.optimizer) is hvd.DistributedOptimizer
    assert loaded.optimizer.backward_passes_per_step == 2
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_best_checkpoint_written_by_rank_zero_only(tmp_path):
    # Each rank names its own folder (tmp_path differs per rank): a rank that wrote would leave files in its own.
    own = os.path.join(str(tmp_path), "ckpt_rank%d" % R)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    x, y = data(2, B)
    model.fit(x, y, batch_size=B, epochs=2, verbose=0, validation_data=(x, y),
              callbacks=[hvd.callbacks.BestModelCheckpoint(os.path.join(own, "best.keras"))])
    hvd.barrier()
    if R != 0:
        assert not os.path.exists(own) or os.listdir(own) == [], os.listdir(own)
    else:
        assert sorted(os.listdir(own)) == ["best.keras"]  # no temp files left
        keras.models.load_model(os.path.join(own, "best.keras"))
